"""`pretrain --decay-from RUN/checkpoints/step-N`: the decay of a warmup-stable-decay run laid from a checkpoint of
its stable phase. On the stable run's corpus, decaying its step-4 checkpoint over 4 steps is exactly the run that
decayed at step 4 (weights, optimizer state, data order and dropout carried; the schedule's decay alone), so the
two end on the same weights and curve. Data: the session's corpus of Python's documentation (conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_helpers import run_error, run_json
from safetensors.torch import load_file

pytestmark = pytest.mark.usefixtures("one_thread")

COMMON = ["--set", "train.batch_size=8", "--set", "train.log_every=1", "--set", "train.eval_batches=1",
          "--set", "schedule.decay=wsd", "--set", "schedule.warmup_fraction=0", "--set", "schedule.warmup_steps=1",
          "--set", "schedule.decay_shape=1-sqrt", "--set", "engine.precision=fp32"]  # fmt: skip


def _curve(run: Path) -> list[tuple[float, float]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [(row["loss"], row["lr"]) for row in rows if "loss" in row]


def test_decaying_a_stable_checkpoint_is_the_run_that_decayed_there(tmp_path: Path, corpus_dir: Path) -> None:
    stable = tmp_path / "stable"
    run_json("pretrain", "-r", "bert-tiny", "-c", str(corpus_dir), "-o", str(stable), *COMMON,
             "--set", "train.steps=8", "--set", "schedule.decay_fraction=0.5", "--set", "train.checkpoint_every=2",
             "--set", "train.keep_last=1", "--set", "train.keep_every=2")  # fmt: skip
    kept = sorted(p.name for p in (stable / "checkpoints").iterdir())
    assert kept == ["step-2", "step-4", "step-6", "step-8"]  # keep_every keeps the points to decay from
    decayed = tmp_path / "decay-at-4"
    out = run_json("pretrain", "-r", "bert-tiny", "-c", str(corpus_dir), "-o", str(decayed), *COMMON,
                   "--set", "train.steps=4", "--decay-from", str(stable / "checkpoints" / "step-4"))  # fmt: skip
    assert out["decay"]["data"] == "continued from the checkpoint" and out["decay"]["shape"] == "1-sqrt"
    ours, theirs = _curve(decayed), _curve(stable)[4:]
    assert [lr for _, lr in ours] == pytest.approx([lr for _, lr in theirs])  # the decay alone: 1-sqrt to 0
    assert [loss for loss, _ in ours] == pytest.approx([loss for loss, _ in theirs], abs=1e-6)
    a = load_file(str(decayed / "model" / "model.safetensors"))
    b = load_file(str(stable / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
    # from an earlier point of the stable phase: the same decay, two steps sooner
    earlier = run_json("pretrain", "-r", "bert-tiny", "-c", str(corpus_dir), "-o", str(tmp_path / "decay-at-2"),
                       *COMMON, "--set", "train.steps=4", "--decay-from", str(stable / "checkpoints" / "step-2"))
    assert earlier["steps"] == 4 and earlier["decay"]["from"].endswith("step-2")


def test_what_cannot_be_decayed_is_one_line(tmp_path: Path, corpus_dir: Path, pretrained_run: Path) -> None:
    line = run_error("pretrain", "-r", "bert-tiny", "-c", str(corpus_dir), "-o", str(tmp_path / "a"), *COMMON,
                     "--decay-from", str(pretrained_run / "model"))  # fmt: skip
    assert "is not a bertkit training checkpoint (RUN/checkpoints/step-N" in line and not (tmp_path / "a").exists()
    line = run_error("pretrain", "-r", "bert-tiny", "-c", str(corpus_dir), "-o", str(tmp_path / "b"), *COMMON,
                     "--decay-from", str(pretrained_run / "model"), "--init-from", str(pretrained_run))  # fmt: skip
    assert "leave out --init-from" in line and not (tmp_path / "b").exists()

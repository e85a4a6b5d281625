"""Activation checkpointing's memory and time on CPU (`make bench`): bert-base masked-LM pretraining (NSP off) on
512-token sequences, 4 a step, with and without `train.activation_checkpointing=1`, each in a process of its own.

Peak memory is the process's peak resident set (the allocator's high-water mark as the kernel counts it: weights,
optimizer state and the activations kept for the backward pass), read with getrusage in a wrapper process that
runs nothing else. Text: the session's Python documentation; vocabulary: the MiniLM fixture's 30,522-token
WordPiece (bert-base's size). What must hold: the same losses (within 1e-5) and a lower peak with checkpointing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from records import figure, write_record

STEPS = 4
WRAPPER = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(json.dumps({"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr[-2000:],
                  "peak_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                  "seconds": time.perf_counter() - start}))
"""


@pytest.fixture(scope="module")
def corpus(minilm_dir: Path, text_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from bertkit.corpus.build import BuildOptions, build_corpus

    output = tmp_path_factory.mktemp("ckpt") / "corpus"
    build_corpus([text_file], minilm_dir, output, BuildOptions(max_seq_len=512))
    return output


def _run(corpus: Path, output: Path, every: int) -> dict:
    command = [sys.executable, "-m", "bertkit", "pretrain", "-r", "bert-base", "-c", str(corpus), "-o", str(output),
               "--set", f"train.steps={STEPS}", "--set", "train.batch_size=4", "--set", "train.grad_accum=1",
               "--set", "train.log_every=1", "--set", "train.eval_batches=1", "--set", "engine.precision=fp32",
               "--set", "model.hidden_dropout=0", "--set", "model.attention_dropout=0",
               "--set", "objective.nsp=0", "--set", f"train.activation_checkpointing={every}", "--json",
               "--quiet"]  # fmt: skip
    wrapped = subprocess.run([sys.executable, "-c", WRAPPER, *command], capture_output=True, text=True, check=True)
    result = json.loads(wrapped.stdout)
    assert result["rc"] == 0, result["stderr"]
    rows = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines() if line.strip()]
    result["losses"] = [row["loss"] for row in rows if "loss" in row]
    result["step_seconds"] = json.loads(result["stdout"].strip().splitlines()[-1])["seconds"] / STEPS
    return result


@pytest.mark.bench
def test_checkpointing_keeps_the_losses_and_lowers_the_peak(corpus: Path, tmp_path: Path, capsys) -> None:
    plain = _run(corpus, tmp_path / "plain", 0)
    recomputed = _run(corpus, tmp_path / "recomputed", 1)
    with capsys.disabled():
        for name, run in (("without", plain), ("every layer", recomputed)):
            print(f"\n[bench] bert-base, 4 x 512 tokens, {name:11}: peak {run['peak_kib'] / 2**20:.2f} GiB, "
                  f"{run['step_seconds']:.1f} s a step (run / steps), losses {run['losses']}")  # fmt: skip
    assert recomputed["losses"] == pytest.approx(plain["losses"], abs=1e-5)
    write_record("activation-checkpointing-cpu", "pytest -m bench tests/bench/test_activation_checkpointing_bench.py",
                 {"recipe": "bert-base", "batch": 4, "seq": 512, "steps": STEPS},
                 {"peak_gib_without": figure(round(plain["peak_kib"] / 2**20, 3), "GiB", "without checkpointing"),
                  "peak_gib_with": figure(round(recomputed["peak_kib"] / 2**20, 3), "GiB", "bertkit"),
                  "seconds_per_step_without": figure(round(plain["step_seconds"], 2), "s", "without checkpointing"),
                  "seconds_per_step_with": figure(round(recomputed["step_seconds"], 2), "s", "bertkit")},
                 "fp32")  # fmt: skip
    assert recomputed["peak_kib"] < plain["peak_kib"]

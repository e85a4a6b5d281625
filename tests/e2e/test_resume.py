"""Exact resume: a run killed with SIGKILL (and another stopped with SIGTERM) and resumed gives the same
loss curve and bitwise the same final weights as an uninterrupted run (fp32, CPU, dropout on); the same for
modernbert-tiny with its StableAdamW and 1-sqrt decay."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

STEPS = 24


def command(corpus: Path, output: Path, *extra: str, recipe: str = "bert-tiny", steps: int = STEPS) -> list[str]:
    sets = {
        "train.steps": steps,
        "train.batch_size": 8,
        "train.grad_accum": 2,
        "train.log_every": 1,
        "train.checkpoint_every": 4,
        "train.eval_every": 8,
        "train.eval_batches": 2,
        "engine.threads": 1,
        "engine.tensorboard": "false",  # its import alone costs seconds per process
    }
    args = [sys.executable, "-m", "bertkit", "pretrain", "-r", recipe, "-c", str(corpus), "-o", str(output)]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    return [*args, "--quiet", "--json", *extra]


def run_until(
    args: list[str], marker: Path, sig: signal.Signals, delay: float = 0.0, **popen: object
) -> subprocess.CompletedProcess:
    """Start the run (`popen`: env, cwd), wait until `marker` exists and `delay` seconds more, then send `sig` (the
    run must still be going)."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)  # type: ignore[call-overload]
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert proc.poll() is None, f"run ended before {marker.name}: {proc.stderr.read() if proc.stderr else ''}"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(delay)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def assert_same_weights_bitwise(run: Path, reference: Path) -> None:
    final = load_file(str(run / "model" / "model.safetensors"))
    expected = load_file(str(reference / "model" / "model.safetensors"))
    assert final.keys() == expected.keys()
    assert all(final[k].equal(expected[k]) for k in expected)


def curve(run_dir: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # Everything but wall-clock figures (tokens/s, MFU, training seconds) must match exactly.
    clock = ("tokens_per_s", "mfu", "train_seconds")
    return [tuple(sorted((k, v) for k, v in row.items() if k not in clock)) for row in rows]


def test_sigkill_and_sigterm_then_resume_is_bitwise_exact(corpus_dir: Path, tmp_path: Path) -> None:
    reference, interrupted = tmp_path / "reference", tmp_path / "interrupted"
    subprocess.run(command(corpus_dir, reference), check=True, capture_output=True)

    killed = run_until(command(corpus_dir, interrupted), interrupted / "checkpoints" / "step-8", signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    assert not (interrupted / "model").exists()

    # Resume, then stop it politely: SIGTERM saves a checkpoint at the current step and exits 130.
    resume = command(corpus_dir, interrupted, "--resume")
    stopped = run_until(resume, interrupted / "checkpoints" / "step-16", signal.SIGTERM)
    assert stopped.returncode == 130, stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1].startswith("error: interrupted by SIGTERM at step ")

    finished = subprocess.run(resume, check=True, capture_output=True, text=True)
    summary = json.loads(finished.stdout.strip().splitlines()[-1])
    assert summary["steps"] == STEPS and summary["resumed_from"] >= 16

    assert curve(interrupted) == curve(reference)
    assert_same_weights_bitwise(interrupted, reference)
    assert os.listdir(interrupted / "checkpoints") == os.listdir(reference / "checkpoints")


@pytest.mark.slow  # 12 s (the default suite's time limit); bert-tiny's exact resume stays in the default suite
def test_modernbert_tiny_killed_after_a_checkpoint_resumes_exactly(corpus_dir: Path, tmp_path: Path) -> None:
    """modernbert-tiny as shipped: StableAdamW, whose step count lives in its parameter groups rather than in the
    per-parameter state, and the 1-sqrt decay of warmup-stable-decay (warm-up and decay both inside the 8 steps,
    so the resumed half runs on the decaying rate). Killed after its step-4 checkpoint, resumed: the same
    metrics.jsonl curve and bitwise the same weights as the run that was never interrupted."""
    steps = 8
    schedule = ["--set", "schedule.warmup_steps=2", "--set", "schedule.decay_fraction=0.5"]
    args = {"recipe": "modernbert-tiny", "steps": steps}
    reference, interrupted = tmp_path / "reference", tmp_path / "interrupted"
    # The uninterrupted run alongside the one that is killed: two processes on two cores.
    uninterrupted = subprocess.Popen(command(corpus_dir, reference, *schedule, **args), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)  # fmt: skip
    killed = run_until(command(corpus_dir, interrupted, *schedule, **args), interrupted / "checkpoints" / "step-4",
                       signal.SIGKILL)  # fmt: skip
    assert killed.returncode == -signal.SIGKILL
    _, err = uninterrupted.communicate(timeout=300)
    assert uninterrupted.returncode == 0, err[-3000:]

    resumed = subprocess.run(command(corpus_dir, interrupted, *schedule, "--resume", **args), capture_output=True,
                             text=True)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert summary["family"] == "modernbert" and summary["steps"] == steps and summary["resumed_from"] >= 4
    recipe = yaml.safe_load((interrupted / "recipe.yaml").read_text())
    assert recipe["optim"]["name"] == "stableadamw" and recipe["schedule"]["decay_shape"] == "1-sqrt"

    assert curve(interrupted) == curve(reference)
    assert_same_weights_bitwise(interrupted, reference)

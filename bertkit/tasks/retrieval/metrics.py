"""Ranking metrics of a run (each query's documents, best first) against relevance judgements (qrels), as
trec_eval computes them (and so pytrec_eval and BEIR): a document is relevant when its judgement is at least 1,
gains are the judgements themselves (linear), ranks are discounted by log2(rank + 1), and every judged query counts
(one with no relevant document, or nothing retrieved, scores 0).

- ndcg@k: DCG of the top k over the DCG of the ideal ordering of the query's judgements (top k of them).
- mrr@k: 1 / rank of the first relevant document within the top k (0 when none).
- recall@k: relevant documents in the top k / the query's relevant documents.
- map@k: the sum of precision at the rank of each relevant document in the top k / the query's relevant
  documents (trec_eval's map_cut).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

Qrels = Mapping[str, Mapping[str, int]]  # query id -> document id -> judgement
Run = Mapping[str, Sequence[str]]  # query id -> document ids, best first

DEFAULT_METRICS = ("ndcg@10", "mrr@10", "recall@100", "map@100")
_NAMES = ("ndcg", "mrr", "recall", "map")


def parse_metric(name: str) -> tuple[str, int]:
    """("ndcg", 10) of "ndcg@10"; one line naming the accepted forms otherwise."""
    measure, _, cut = name.partition("@")
    if measure not in _NAMES or not cut.isdigit() or int(cut) < 1:
        raise ValueError(f"unknown retrieval metric {name!r}; use one of {', '.join(n + '@K' for n in _NAMES)}")
    return measure, int(cut)


def deepest_cut(metrics: Iterable[str]) -> int:
    """How many documents a run must hold per query for `metrics`."""
    return max(parse_metric(name)[1] for name in metrics)


def query_scores(ranked: Sequence[str], judged: Mapping[str, int], metrics: Iterable[str]) -> dict[str, float]:
    """Each metric of one query's ranking."""
    relevant = {doc for doc, grade in judged.items() if grade >= 1}
    out: dict[str, float] = {}
    for name in metrics:
        measure, k = parse_metric(name)
        top = ranked[:k]
        if measure == "ndcg":
            dcg = sum(max(judged.get(doc, 0), 0) / math.log2(rank + 2) for rank, doc in enumerate(top))
            ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:k]
            idcg = sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal))
            out[name] = dcg / idcg if idcg > 0 else 0.0
        elif measure == "mrr":
            out[name] = next((1.0 / (rank + 1) for rank, doc in enumerate(top) if doc in relevant), 0.0)
        elif measure == "recall":
            out[name] = sum(doc in relevant for doc in top) / len(relevant) if relevant else 0.0
        else:
            hits, precision_sum = 0, 0.0
            for rank, doc in enumerate(top):
                if doc in relevant:
                    hits += 1
                    precision_sum += hits / (rank + 1)
            out[name] = precision_sum / len(relevant) if relevant else 0.0
    return out


def score_run(run: Run, qrels: Qrels, metrics: Iterable[str] = DEFAULT_METRICS) -> dict[str, float]:
    """The mean of each metric over the judged queries."""
    metrics = list(metrics)
    for name in metrics:
        parse_metric(name)
    judged_queries = [q for q, docs in qrels.items() if docs]
    if not any(g >= 1 for q in judged_queries for g in qrels[q].values()):
        raise ValueError("no query has a relevant document (a judgement of at least 1)")
    totals = dict.fromkeys(metrics, 0.0)
    for query in judged_queries:
        for name, value in query_scores(run.get(query, ()), qrels[query], metrics).items():
            totals[name] += value
    return {name: total / len(judged_queries) for name, total in totals.items()}

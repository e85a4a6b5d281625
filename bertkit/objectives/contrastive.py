"""Losses of bi-encoders, on the vectors `SentenceEncoder` gives.

- `RankingObjective`: MultipleNegativesRankingLoss (InfoNCE with in-batch negatives). Each query's positive is
  scored against every passage of the batch (the other queries' positives and every hard negative) by cosine
  similarity times `scale` (20, sentence-transformers' default; 1 / temperature), and the loss is the cross-entropy
  of the positive. `symmetric` adds the reverse direction, each positive picking its query among the batch's
  queries, and averages the two. `dims` (Matryoshka) sums the loss over the vectors' first d components for each d.
  Target: a query.
- `SimilarityObjective`: CoSENT (log(1 + sum over pairs of pairs whose gold order is i < j of
  exp(scale * (cos_i - cos_j)))), or the squared error of the cosine against the gold score scaled to [0, 1].
  CoSENT ranks the whole batch at once, so its target is a batch; the squared error's is a pair.

In-batch negatives are the batch this process holds in one pass: under gradient accumulation a micro-batch would
see fewer negatives than the batch, so the task kinds refuse accumulation (bertkit/tasks/kinds/retrieval.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.objectives.base import Counts, Metrics, Objective, share


def encode(model: nn.Module, batch: dict[str, torch.Tensor], prefix: str) -> torch.Tensor:
    """The vectors of one column of the batch (`query_`, `` for the passages, `pair_`)."""
    return model(batch[f"{prefix}input_ids"], batch[f"{prefix}attention_mask"], batch.get(f"{prefix}token_type_ids"))


def ranking_loss_sum(queries: torch.Tensor, passages: torch.Tensor, scale: float,
                     symmetric: bool) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(the sum over queries of the ranking loss, how many queries rank their own positive first). `passages` holds
    the positives first (row i answers query i), then any hard negatives."""
    count = queries.shape[0]
    scores = F.normalize(queries.float(), dim=-1) @ F.normalize(passages.float(), dim=-1).T * scale
    target = torch.arange(count, device=scores.device)
    loss = F.cross_entropy(scores, target, reduction="sum")
    if symmetric:
        reverse = F.cross_entropy(scores[:, :count].T, target, reduction="sum")
        loss = (loss + reverse) / 2
    return loss, (scores.argmax(dim=-1) == target).sum()


class RankingObjective(Objective):
    name = "ranking"

    def __init__(self, scale: float = 20.0, symmetric: bool = False, dims: list[int] | None = None) -> None:
        super().__init__()
        self.scale, self.symmetric, self.dims = scale, symmetric, list(dims or [])

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return float(batch["query_input_ids"].shape[0])

    def __call__(
        self, model: nn.Module, batch: dict[str, torch.Tensor], totals: Counts | None = None
    ) -> tuple[torch.Tensor, Metrics]:
        total = (totals or self.counts(batch))[self.name]
        queries, passages = encode(model, batch, "query_"), encode(model, batch, "")
        loss, correct = ranking_loss_sum(queries, passages, self.scale, self.symmetric)
        for dim in self.dims:
            if dim < queries.shape[-1]:
                loss = loss + ranking_loss_sum(queries[:, :dim], passages[:, :dim], self.scale, self.symmetric)[0]
        return share(loss, total), {"acc": share(correct.float(), total)}


def cosent_loss(cosines: torch.Tensor, gold: torch.Tensor, scale: float) -> torch.Tensor:
    """CoSENT over one batch of pairs: every two pairs whose gold scores differ should be ordered as they are."""
    scores = cosines.float() * scale
    gaps = scores[:, None] - scores[None, :]  # s_i - s_j
    wrong_way = gold[:, None] < gold[None, :]  # pairs (i, j) with gold_i < gold_j: s_i - s_j should be negative
    gaps = gaps - (~wrong_way).float() * 1e12
    return torch.logsumexp(torch.cat([gaps.new_zeros(1), gaps.flatten()]), dim=0)


class SimilarityObjective(Objective):
    name = "similarity"

    def __init__(self, loss: str = "cosent", scale: float = 20.0, low: float = 0.0, high: float = 1.0) -> None:
        super().__init__()
        if loss not in ("cosent", "cosine_mse"):
            raise ValueError(f"loss must be cosent or cosine_mse, not {loss!r}")
        self.kind, self.scale, self.low, self.high = loss, scale, low, high

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return 1.0 if self.kind == "cosent" else float(batch["labels"].shape[0])

    def __call__(
        self, model: nn.Module, batch: dict[str, torch.Tensor], totals: Counts | None = None
    ) -> tuple[torch.Tensor, Metrics]:
        total = (totals or self.counts(batch))[self.name]
        first, second = encode(model, batch, ""), encode(model, batch, "pair_")
        cosines = F.cosine_similarity(first.float(), second.float(), dim=-1)
        gold = batch["labels"].float()
        if self.kind == "cosent":
            return share(cosent_loss(cosines, gold, self.scale), total), {}
        target = (gold - self.low) / max(self.high - self.low, 1e-12)
        return share((cosines - target).pow(2).sum(), total), {}

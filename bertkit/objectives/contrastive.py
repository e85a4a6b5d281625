"""Losses of bi-encoders, on the vectors `SentenceEncoder` gives.

- `RankingObjective`: MultipleNegativesRankingLoss (InfoNCE with in-batch negatives). Each query's positive is
  scored against every passage of the batch (the other queries' positives and every hard negative) by cosine
  similarity times `scale` (20, sentence-transformers' default; 1 / temperature), and the loss is the cross-entropy
  of the positive. `symmetric` adds the reverse direction, each positive picking its query among the batch's
  queries, and averages the two. `dims` (Matryoshka) sums the loss over the vectors' first d components for each d.
  Target: a query.
- With a teacher's vectors of the batch's texts (`teacher_query`, `teacher_passage`), the ranking objective adds
  `distill_weight` times the squared distance of the unit vectors to the teacher's (`mse`, embedding distillation)
  or the KL divergence of its in-batch ranking from the teacher's (`kl`).
- With a cross-encoder's margins of the batch's queries (`teacher_margin`, its score of the query with its positive
  less that with each hard negative), the ranking objective adds `margin_weight` times MarginMSE: the squared
  difference of the model's margin (`scale` times the cosine margin) from the cross-encoder's.
- `SimilarityObjective`: CoSENT (log(1 + sum over pairs of pairs whose gold order is i < j of
  exp(scale * (cos_i - cos_j)))), or the squared error of the cosine against the gold score scaled to [0, 1].
  CoSENT ranks the whole batch at once, so its target is a batch; the squared error's is a pair.

In-batch negatives are the whole batch in one pass: under gradient accumulation a micro-batch would see fewer
negatives than the batch, so the task kinds refuse accumulation (bertkit/tasks/kinds/retrieval.py). Under several
processes (DDP, FSDP, ZeRO) each process's queries are scored against every process's passages (`gather`, on by
default), so two processes make the step of one holding the whole batch.

`cache_chunk` (GradCache, Gao et al. 2021; sentence-transformers' CachedMultipleNegativesRankingLoss) makes a batch
larger than memory one pass: every text is embedded without a graph, `cache_chunk` texts at a time; the loss and its
gradient with respect to those vectors are computed on the whole batch; then, when the loop calls backward, each
chunk is embedded again with a graph (the same dropout, its random state replayed; the same autocast) and its
vectors' gradients are pushed through it. The gradients are those of the uncached batch, with the activations of
one chunk in memory at a time.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.objectives.base import Counts, Metrics, Objective, share


def encode(model: nn.Module, batch: dict[str, torch.Tensor], prefix: str) -> torch.Tensor:
    """The vectors of one column of the batch (`query_`, `` for the passages, `pair_`)."""
    return model(batch[f"{prefix}input_ids"], batch[f"{prefix}attention_mask"], batch.get(f"{prefix}token_type_ids"))


def distance_sum(vectors: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """The squared distance of each unit vector to the teacher's (unit) vector for the same text, summed over texts:
    embedding distillation (the student learns the teacher's vector space)."""
    return (F.normalize(vectors.float(), dim=-1) - teacher.float()).pow(2).sum()


def ranking_kl_sum(queries: torch.Tensor, passages: torch.Tensor, teacher_queries: torch.Tensor,
                   teacher_passages: torch.Tensor, scale: float) -> torch.Tensor:
    """KL divergence of the student's in-batch ranking (each query's softmax over the batch's passages) from the
    teacher's, summed over queries: the student learns how the teacher ranks, not only where its vectors lie."""
    with torch.autocast(queries.device.type, enabled=False):
        student = F.normalize(queries.float(), dim=-1) @ F.normalize(passages.float(), dim=-1).T * scale
        teacher = teacher_queries.float() @ teacher_passages.float().T * scale
        return F.kl_div(F.log_softmax(student, dim=-1), F.log_softmax(teacher, dim=-1), log_target=True,
                        reduction="sum")


class _GatherRows(torch.autograd.Function):
    """Every process's rows, in rank order, with a gradient: each process's rows get the sum of every process's
    gradient for them (the losses of all processes read them)."""

    @staticmethod
    def forward(ctx: Any, rows: torch.Tensor) -> torch.Tensor:
        parts = [torch.empty_like(rows) for _ in range(torch.distributed.get_world_size())]
        torch.distributed.all_gather(parts, rows.contiguous())
        return torch.cat(parts)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous()
        torch.distributed.all_reduce(grad)
        size = grad.shape[0] // torch.distributed.get_world_size()
        start = torch.distributed.get_rank() * size
        return grad[start : start + size]


def gathered(rows: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(every process's rows, where this process's start); this process's rows alone outside a process group."""
    if not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return rows, 0
    if torch.distributed.get_world_size() == 1:
        return rows, 0
    return _GatherRows.apply(rows), torch.distributed.get_rank() * rows.shape[0]


def ranking_loss_sum(queries: torch.Tensor, passages: torch.Tensor, scale: float, symmetric: bool,
                     gather: bool = False) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(the sum over this process's queries of the ranking loss, how many rank their own positive first).
    `passages` holds the positives first (row i answers query i), then any hard negatives. With `gather`, under
    a process group, every process's passages (and queries, for the reverse direction) are the negatives."""
    with torch.autocast(queries.device.type, enabled=False):  # the scores in fp32, under any autocast
        return _ranking_loss_sum(queries.float(), passages.float(), scale, symmetric, gather)


def margin_mse_sum(queries: torch.Tensor, passages: torch.Tensor, teacher_margins: torch.Tensor,
                   scale: float) -> torch.Tensor:  # fmt: skip
    """MarginMSE (Hofstätter et al. 2020), summed over (query, hard negative): the squared difference of the
    model's margin, `scale` times the cosine of the query with its positive less that with the negative, from the
    cross-encoder's margin (`teacher_margins`, queries x negatives). `passages` holds the positives (row i answers
    query i), then the first hard negative of every query, then the second..."""
    with torch.autocast(queries.device.type, enabled=False):
        count, width = teacher_margins.shape
        queries, passages = F.normalize(queries.float(), dim=-1), F.normalize(passages.float(), dim=-1)
        positive = (queries * passages[:count]).sum(-1)
        negatives = passages[count : count * (width + 1)].view(width, count, -1).transpose(0, 1)
        negative = torch.einsum("qd,qnd->qn", queries, negatives)
        margins = scale * (positive[:, None] - negative)
        return (margins - teacher_margins.float()).pow(2).sum()


def _ranking_loss_sum(queries: torch.Tensor, passages: torch.Tensor, scale: float, symmetric: bool,
                      gather: bool) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    count = queries.shape[0]
    queries, passages = F.normalize(queries, dim=-1), F.normalize(passages, dim=-1)
    every_passage, passage_start = gathered(passages) if gather else (passages, 0)
    scores = queries @ every_passage.T * scale
    target = torch.arange(count, device=scores.device)
    loss = F.cross_entropy(scores, target + passage_start, reduction="sum")
    if symmetric:  # each positive picks its query among the queries
        every_query, query_start = gathered(queries) if gather else (queries, 0)
        reverse = passages[:count] @ every_query.T * scale
        loss = (loss + F.cross_entropy(reverse, target + query_start, reduction="sum")) / 2
    return loss, (scores.argmax(dim=-1) == target + passage_start).sum()


class RankingObjective(Objective):
    name = "ranking"

    def __init__(self, scale: float = 20.0, symmetric: bool = False, dims: list[int] | None = None,
                 cache_chunk: int = 0, gather: bool = True, distill_weight: float = 1.0,
                 distill_loss: str = "mse", margin_weight: float = 1.0) -> None:  # fmt: skip
        super().__init__()
        self.scale, self.symmetric, self.dims, self.cache_chunk = scale, symmetric, list(dims or []), cache_chunk
        self.gather, self.distill_weight, self.distill_loss = gather, distill_weight, distill_loss
        self.margin_weight = margin_weight

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return float(batch["query_input_ids"].shape[0])

    def loss_sum(self, queries: torch.Tensor, passages: torch.Tensor,
                 batch: dict[str, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """The loss summed over queries (and over the Matryoshka widths), and the queries ranked right; with a
        teacher's vectors in the batch, plus the distillation term."""
        loss, correct = ranking_loss_sum(queries, passages, self.scale, self.symmetric, self.gather)
        if batch is not None and "teacher_query" in batch:
            if self.distill_loss == "kl":
                term = ranking_kl_sum(queries, passages, batch["teacher_query"], batch["teacher_passage"], self.scale)
            else:
                term = distance_sum(queries, batch["teacher_query"]) + distance_sum(passages, batch["teacher_passage"])
            loss = loss + self.distill_weight * term
        if batch is not None and "teacher_margin" in batch:
            loss = loss + self.margin_weight * margin_mse_sum(queries, passages, batch["teacher_margin"], self.scale)
        for dim in self.dims:
            if dim < queries.shape[-1]:
                part = ranking_loss_sum(queries[:, :dim], passages[:, :dim], self.scale, self.symmetric, self.gather)
                loss = loss + part[0]
        return loss, correct

    def __call__(
        self, model: nn.Module, batch: dict[str, torch.Tensor], totals: Counts | None = None
    ) -> tuple[torch.Tensor, Metrics]:
        total = (totals or self.counts(batch))[self.name]
        if self.cache_chunk and torch.is_grad_enabled():
            return cached_ranking(self, model, batch, total)
        loss, correct = self.loss_sum(encode(model, batch, "query_"), encode(model, batch, ""), batch)
        return share(loss, total), {"acc": share(correct.float(), total)}


def _rng_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def _set_rng_state(state: tuple[torch.Tensor, torch.Tensor | None], device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def _chunks(batch: dict[str, torch.Tensor], prefix: str, size: int) -> list[tuple[torch.Tensor, ...]]:
    ids, mask, types = (batch.get(f"{prefix}{key}") for key in ("input_ids", "attention_mask", "token_type_ids"))
    return [(ids[s : s + size], mask[s : s + size], None if types is None else types[s : s + size])
            for s in range(0, ids.shape[0], size)]  # fmt: skip


def cached_ranking(objective: RankingObjective, model: nn.Module, batch: dict[str, torch.Tensor],
                   total: float) -> tuple[torch.Tensor, Metrics]:  # fmt: skip
    """The ranking loss of the whole batch with the activations of `objective.cache_chunk` texts at a time (see the
    module's notes): the returned loss is a leaf whose backward re-embeds each chunk and back-propagates into it."""
    device = batch["input_ids"].device
    autocast = (device.type, torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type))
    columns = [_chunks(batch, prefix, objective.cache_chunk) for prefix in ("query_", "")]
    states: list[list[tuple[torch.Tensor, torch.Tensor | None]]] = []
    vectors = []
    with torch.no_grad():
        for chunks in columns:
            states.append([])
            parts = []
            for chunk in chunks:
                states[-1].append(_rng_state(device))
                parts.append(model(*chunk).float())
            vectors.append(torch.cat(parts).requires_grad_())
    after = _rng_state(device)
    with torch.enable_grad(), torch.autocast(device.type, enabled=False):
        loss, correct = objective.loss_sum(vectors[0], vectors[1], batch)
        loss = share(loss, total)
        grads = torch.autograd.grad(loss, vectors)

    def replay(grad_output: torch.Tensor) -> None:
        """Called by the loop's backward: each chunk embedded again with a graph, its vectors' gradient pushed in."""
        resume = _rng_state(device)
        with torch.enable_grad(), torch.autocast(autocast[0], dtype=autocast[2], enabled=autocast[1]):
            for chunks, chunk_states, grad in zip(columns, states, grads, strict=True):
                start = 0
                for chunk, state in zip(chunks, chunk_states, strict=True):
                    _set_rng_state(state, device)
                    out = model(*chunk).float()
                    part = grad[start : start + out.shape[0]]
                    start += out.shape[0]
                    torch.autograd.backward(out, part * grad_output)
        _set_rng_state(resume, device)

    _set_rng_state(after, device)
    out = loss.detach().requires_grad_()
    out.register_hook(replay)
    return out, {"acc": share(correct.float(), total)}


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
        with torch.autocast(first.device.type, enabled=False):
            cosines = F.cosine_similarity(first.float(), second.float(), dim=-1)
        gold = batch["labels"].float()
        if self.kind == "cosent":
            return share(cosent_loss(cosines, gold, self.scale), total), {}
        target = (gold - self.low) / max(self.high - self.low, 1e-12)
        return share((cosines - target).pow(2).sum(), total), {}

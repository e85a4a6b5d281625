"""What every objective shares: target counts, the batch fields a model reads, several losses off one pass.

One global batch, one update. A loss is a sum over its targets (masked tokens for MLM, tokens for RTD,
sequences for NSP/SOP/classification, ...) divided by the number of such targets in the whole global
batch: every accumulation micro-step on every rank. The training loop counts them before the step's first
forward (`counts(batch)`, one all-reduce) and hands the totals to every call, so any split of the batch
over micro-steps and processes gives the same gradient. A mean per micro-batch would not: micro-batches
hold different numbers of masked tokens, and averaging their means weighs tokens unequally.

An objective is called as `objective(model, batch, totals) -> (loss, metrics)`: the loss and every metric
are this micro-batch's share of the global mean (sum here / global count), so the loop sums them over
micro-steps and ranks. Without `totals` (evaluation, tests), the batch's own counts are used: a plain mean.
Each objective also exposes `loss(outputs, batch, totals)`, so a combined objective runs the model once
and lets every loss read the same outputs (BERT's MLM and NSP share one encoder pass).
"""

from __future__ import annotations

import torch
from torch import nn

# Batch fields that are model inputs (the rest, such as labels, only feed the losses). ELECTRA reads
# mlm_labels too: it needs the original tokens to tell which of its generator's samples replaced one.
# document_ids marks the documents of a packed corpus row (attention stays within each).
# XLNet reads its factorization order (perm_mask) and which positions the query stream predicts (target_mapping).
MODEL_INPUTS = (
    "input_ids",
    "attention_mask",
    "token_type_ids",
    "document_ids",
    "mlm_positions",
    "mlm_labels",
    "sbo_left",
    "sbo_right",
    "sbo_offsets",
    "perm_mask",
    "target_mapping",
)

Metrics = dict[str, torch.Tensor]
Counts = dict[str, float]


def model_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key: batch[key] for key in MODEL_INPUTS if key in batch}


def sequences(batch: dict[str, torch.Tensor]) -> float:
    """Target count of a sequence-level loss (a batch of texts, or of their precomputed features)."""
    return float((batch["input_ids"] if "input_ids" in batch else batch["features"]).shape[0])


def share(total: torch.Tensor, count: float) -> torch.Tensor:
    """A sum over targets as its share of the global mean (an empty global batch contributes 0, not NaN)."""
    return total / max(count, 1.0)


class Objective:
    name = "objective"
    # The batch fields this loss needs beyond input_ids/attention_mask.
    requires: tuple[str, ...] = ()

    def __init__(self, weight: float = 1.0) -> None:
        self.weight = weight

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        """How many targets this loss has in `batch`, from the batch alone (before any forward pass)."""
        raise NotImplementedError

    def counts(self, batch: dict[str, torch.Tensor]) -> Counts:
        return {self.name: self.count(batch)}

    def loss(
        self, outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor], totals: Counts
    ) -> tuple[torch.Tensor, Metrics]:
        raise NotImplementedError

    def __call__(
        self, model: nn.Module, batch: dict[str, torch.Tensor], totals: Counts | None = None
    ) -> tuple[torch.Tensor, Metrics]:
        totals = self.counts(batch) if totals is None else totals
        loss, metrics = self.loss(model(**model_inputs(batch)), batch, totals)
        return self.weight * loss, metrics


class CombinedObjective(Objective):
    """Weighted sum of several objectives over one forward pass; each part's loss is logged on its own."""

    name = "combined"

    def __init__(self, parts: list[Objective]) -> None:
        super().__init__(1.0)
        if not parts:
            raise ValueError("no objective to combine")
        self.parts = parts
        self.requires = tuple(dict.fromkeys(field for part in parts for field in part.requires))

    def counts(self, batch: dict[str, torch.Tensor]) -> Counts:
        return {name: value for part in self.parts for name, value in part.counts(batch).items()}

    def loss(
        self, outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor], totals: Counts
    ) -> tuple[torch.Tensor, Metrics]:
        total: torch.Tensor | None = None
        metrics: Metrics = {}
        for part in self.parts:
            loss, part_metrics = part.loss(outputs, batch, totals)
            weighted = part.weight * loss
            total = weighted if total is None else total + weighted
            metrics.update(part_metrics)
        assert total is not None
        return total, metrics


def correct(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Number of right predictions (a sum, normalised like the loss)."""
    with torch.no_grad():
        return (logits.argmax(-1) == labels).float().sum()

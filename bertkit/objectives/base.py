"""What every objective shares: the batch fields a model reads, and running several losses off one pass.

An objective is called as `objective(model, batch) -> (loss, metrics)` by the one training loop. Each
one here also exposes `loss(outputs, batch)`, so a combined objective runs the model once and lets every
loss read the same outputs (BERT's MLM and NSP share one encoder pass).
"""

from __future__ import annotations

import torch
from torch import nn

# Batch fields that are model inputs (the rest, such as labels, only feed the losses). ELECTRA reads
# mlm_labels too: it needs the original tokens to tell which of its generator's samples replaced one.
MODEL_INPUTS = (
    "input_ids",
    "attention_mask",
    "token_type_ids",
    "mlm_positions",
    "mlm_labels",
    "sbo_left",
    "sbo_right",
    "sbo_offsets",
)

Metrics = dict[str, torch.Tensor]


def model_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key: batch[key] for key in MODEL_INPUTS if key in batch}


class Objective:
    name = "objective"
    # The batch fields this loss needs beyond input_ids/attention_mask.
    requires: tuple[str, ...] = ()

    def __init__(self, weight: float = 1.0) -> None:
        self.weight = weight

    def loss(self, outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Metrics]:
        raise NotImplementedError

    def __call__(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Metrics]:
        loss, metrics = self.loss(model(**model_inputs(batch)), batch)
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

    def loss(self, outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Metrics]:
        total: torch.Tensor | None = None
        metrics: Metrics = {}
        for part in self.parts:
            loss, part_metrics = part.loss(outputs, batch)
            weighted = part.weight * loss
            total = weighted if total is None else total + weighted
            metrics.update(part_metrics)
        assert total is not None
        return total, metrics


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return (logits.argmax(-1) == labels).float().mean()

"""Span boundary objective (SpanBERT): predict every token of a masked span from the encodings of the two
tokens just outside it and its position inside the span (the SBO head computes the logits)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bertkit.objectives.base import Counts, Metrics, Objective, correct, share


class SBOObjective(Objective):
    """Target: a token inside a masked span."""

    name = "sbo"
    requires = ("sbo_positions", "sbo_left", "sbo_right", "sbo_offsets", "sbo_labels")

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return float(batch["sbo_labels"].numel())

    def loss(
        self, outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor], totals: Counts
    ) -> tuple[torch.Tensor, Metrics]:
        logits = outputs["sbo_logits"].float()
        labels = batch["sbo_labels"]
        total = totals[self.name]
        loss = share(F.cross_entropy(logits, labels, reduction="sum"), total)
        return loss, {"sbo_loss": loss.detach(), "sbo_acc": share(correct(logits, labels), total)}

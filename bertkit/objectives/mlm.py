"""Masked language modelling, computed only on the masked positions."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bertkit.objectives.base import Counts, Metrics, Objective, correct, share


class MLMObjective(Objective):
    """Cross-entropy of the MLM head at the masked positions the loader chose. The model returns logits
    only at those positions (sparse prediction), never for the whole sequence. Target: a masked token."""

    name = "mlm"
    requires = ("mlm_positions", "mlm_labels")

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return float(batch["mlm_labels"].numel())

    def loss(
        self, outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor], totals: Counts
    ) -> tuple[torch.Tensor, Metrics]:
        logits = outputs["mlm_logits"].float()
        labels = batch["mlm_labels"]
        total = totals[self.name]
        loss = share(F.cross_entropy(logits, labels, reduction="sum"), total)
        return loss, {"mlm_loss": loss.detach(), "mlm_acc": share(correct(logits, labels), total)}

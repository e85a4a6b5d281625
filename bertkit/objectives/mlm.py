"""Masked language modelling, computed only on the masked positions."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bertkit.objectives.base import Metrics, Objective, accuracy


class MLMObjective(Objective):
    """Cross-entropy of the MLM head at the masked positions the loader chose. The model returns logits
    only at those positions (sparse prediction), never for the whole sequence."""

    name = "mlm"
    requires = ("mlm_positions", "mlm_labels")

    def loss(self, outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Metrics]:
        logits = outputs["mlm_logits"].float()
        labels = batch["mlm_labels"]
        loss = F.cross_entropy(logits, labels)
        return loss, {"mlm_loss": loss.detach(), "mlm_acc": accuracy(logits, labels)}

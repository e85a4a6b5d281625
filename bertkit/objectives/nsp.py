"""Next-sentence prediction (BERT): is segment B the segment that followed A (label 0) or a random one (1)?"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bertkit.objectives.base import Metrics, Objective, accuracy


class PairObjective(Objective):
    """Two-way cross-entropy of the pair head on the pooled [CLS] output."""

    requires = ("pair_labels", "token_type_ids")

    def loss(self, outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Metrics]:
        logits = outputs["pair_logits"].float()
        labels = batch["pair_labels"]
        loss = F.cross_entropy(logits, labels)
        return loss, {f"{self.name}_loss": loss.detach(), f"{self.name}_acc": accuracy(logits, labels)}


class NSPObjective(PairObjective):
    name = "nsp"

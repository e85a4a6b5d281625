"""Next-sentence prediction (BERT): is segment B the segment that followed A (label 0) or a random one (1)?"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bertkit.objectives.base import Counts, Metrics, Objective, correct, sequences, share


class PairObjective(Objective):
    """Two-way cross-entropy of the pair head on the pooled [CLS] output. Target: a sequence."""

    requires = ("pair_labels", "token_type_ids")

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return sequences(batch)

    def loss(
        self, outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor], totals: Counts
    ) -> tuple[torch.Tensor, Metrics]:
        logits = outputs["pair_logits"].float()
        labels = batch["pair_labels"]
        total = totals[self.name]
        loss = share(F.cross_entropy(logits, labels, reduction="sum"), total)
        return loss, {f"{self.name}_loss": loss.detach(), f"{self.name}_acc": share(correct(logits, labels), total)}


class NSPObjective(PairObjective):
    name = "nsp"

"""Permutation language modelling (XLNet): cross-entropy of the LM head on the query stream at the targets
of the sampled factorization order (the loader draws them: bertkit/corpus/permutation.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bertkit.objectives.base import Counts, Metrics, Objective, correct, share

IGNORE = -100  # an empty target slot (rows of a batch have different numbers of targets)


class PLMObjective(Objective):
    """Target: a token of the predicted last 1/K of the order (a non-empty `plm_labels` slot)."""

    name = "plm"
    requires = ("perm_mask", "target_mapping", "plm_labels")

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return float((batch["plm_labels"] != IGNORE).sum())

    def loss(
        self, outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor], totals: Counts
    ) -> tuple[torch.Tensor, Metrics]:
        labels = batch["plm_labels"].reshape(-1)
        keep = labels != IGNORE
        logits = outputs["plm_logits"].reshape(labels.shape[0], -1)[keep].float()
        labels = labels[keep]
        total = totals[self.name]
        loss = share(F.cross_entropy(logits, labels, reduction="sum"), total)
        return loss, {"plm_loss": loss.detach(), "plm_acc": share(correct(logits, labels), total)}

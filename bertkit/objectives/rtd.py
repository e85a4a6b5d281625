"""Replaced-token detection (ELECTRA): per-token binary cross-entropy over the non-padding tokens.

The total ELECTRA loss is MLM (generator) + weight * RTD with weight 50 in the paper; the combined
objective adds the two. Metrics include the accuracy of the trivial "nothing was replaced" guess, the
baseline a useful discriminator has to beat.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bertkit.objectives.base import Counts, Metrics, Objective, share


class RTDObjective(Objective):
    """Target: a non-padding token."""

    name = "rtd"
    requires = ("mlm_positions", "mlm_labels")

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return float(batch["attention_mask"].sum())

    def loss(
        self, outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor], totals: Counts
    ) -> tuple[torch.Tensor, Metrics]:
        valid = batch["attention_mask"].bool()
        logits = outputs["rtd_logits"].float()[valid]
        replaced = outputs["replaced"][valid].float()
        total = totals[self.name]
        loss = share(F.binary_cross_entropy_with_logits(logits, replaced, reduction="sum"), total)
        with torch.no_grad():
            right = ((logits > 0).float() == replaced).float().sum()
            replaced_count = replaced.sum()
        return loss, {
            "rtd_loss": loss.detach(),
            "rtd_acc": share(right, total),
            "rtd_baseline_acc": share(replaced.numel() - replaced_count, total),
            "replaced_fraction": share(replaced_count, total),
        }

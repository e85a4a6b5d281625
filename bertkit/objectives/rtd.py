"""Replaced-token detection (ELECTRA): per-token binary cross-entropy over the non-padding tokens.

The total ELECTRA loss is MLM (generator) + weight * RTD with weight 50 in the paper; the combined
objective adds the two. Metrics include the accuracy of the trivial "nothing was replaced" guess, the
baseline a useful discriminator has to beat.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bertkit.objectives.base import Metrics, Objective


class RTDObjective(Objective):
    name = "rtd"
    requires = ("mlm_positions", "mlm_labels")

    def loss(self, outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Metrics]:
        valid = batch["attention_mask"].bool()
        logits = outputs["rtd_logits"].float()[valid]
        replaced = outputs["replaced"][valid].float()
        loss = F.binary_cross_entropy_with_logits(logits, replaced)
        with torch.no_grad():
            accuracy = ((logits > 0).float() == replaced).float().mean()
            replaced_fraction = replaced.mean()
        return loss, {
            "rtd_loss": loss.detach(),
            "rtd_acc": accuracy,
            "rtd_baseline_acc": 1.0 - replaced_fraction,
            "replaced_fraction": replaced_fraction,
        }

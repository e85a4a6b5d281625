"""Span boundary objective (SpanBERT): predict every token of a masked span from the encodings of the two
tokens just outside it and its position inside the span (the SBO head computes the logits)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bertkit.objectives.base import Metrics, Objective, accuracy


class SBOObjective(Objective):
    name = "sbo"
    requires = ("sbo_positions", "sbo_left", "sbo_right", "sbo_offsets", "sbo_labels")

    def loss(self, outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Metrics]:
        logits = outputs["sbo_logits"].float()
        labels = batch["sbo_labels"]
        loss = F.cross_entropy(logits, labels)
        return loss, {"sbo_loss": loss.detach(), "sbo_acc": accuracy(logits, labels)}

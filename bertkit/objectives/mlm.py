"""Masked language modelling, computed only on the masked positions."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MLMObjective:
    """Cross-entropy of the MLM head at the masked positions the loader chose."""

    name = "mlm"

    def __init__(self, weight: float = 1.0) -> None:
        self.weight = weight

    def __call__(
        self, model: nn.Module, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        outputs = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            mlm_positions=batch["mlm_positions"],
            token_type_ids=batch.get("token_type_ids"),
        )
        logits = outputs["mlm_logits"].float()
        loss = F.cross_entropy(logits, batch["mlm_labels"])
        with torch.no_grad():
            accuracy = (logits.argmax(-1) == batch["mlm_labels"]).float().mean()
        return self.weight * loss, {"mlm_loss": loss.detach(), "mlm_acc": accuracy}

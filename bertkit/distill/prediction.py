"""The objective of the task stage's prediction phase: the student's classifier learns the teacher's soft
targets (TinyBERT's L_pred, soft cross-entropy at temperature t), optionally beside the gold labels.

The targets come with the batch (`teacher_logits`, read from the cache, bertkit/distill/cache.py) or, when
the cache is off, from a teacher forward on the batch. One target per sequence for both terms, so each
call returns its micro-batch's share of the global means (bertkit/objectives/base.py).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.distill import losses
from bertkit.objectives.base import Counts, Metrics, share


class PredictionObjective:
    name = "distill-prediction"

    def __init__(
        self, teacher: nn.Module | None, alpha_soft: float, alpha_gold: float, temperature: float, t_squared: bool
    ) -> None:
        """`teacher`: None when every batch carries `teacher_logits`. `t_squared`: DistilBERT's soft targets
        carry T² (gradients keep their scale as T grows); TinyBERT's have none."""
        self.teacher, self.temperature = teacher, temperature
        self.weights = {term: w for term, w in (("prediction", alpha_soft), ("gold", alpha_gold)) if w > 0}
        self.scale = temperature**2 if t_squared else 1.0

    def attach(self, backend: Any) -> None:
        if self.teacher is not None:
            self.teacher = backend.prepare_frozen(self.teacher)

    @property
    def terms(self) -> tuple[str, ...]:
        return tuple(self.weights)

    def counts(self, batch: dict[str, torch.Tensor]) -> Counts:
        return dict.fromkeys(self.weights, float(batch["input_ids"].shape[0]))

    def teacher_logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if "teacher_logits" in batch:
            return batch["teacher_logits"]
        if self.teacher is None:
            raise RuntimeError("a batch without teacher_logits and no teacher to compute them")
        return self.teacher(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids")).logits

    def __call__(
        self, model: nn.Module, batch: dict[str, torch.Tensor], totals: Counts | None = None
    ) -> tuple[torch.Tensor, Metrics]:
        totals = self.counts(batch) if totals is None else totals
        logits = model(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids")).logits
        loss = torch.zeros((), device=logits.device)
        metrics: Metrics = {}
        for term, weight in self.weights.items():
            if term == "prediction":
                target = self.teacher_logits(batch)
                value = self.scale * losses.prediction_soft_ce(logits, target, self.temperature)
            else:
                value = F.cross_entropy(logits.float(), batch["labels"], reduction="sum")
            value = share(value, totals[term])
            loss = loss + weight * value
            metrics[f"{term}_loss"] = value.detach()
        return loss, metrics

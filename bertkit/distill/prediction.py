"""The objective of the task stage's prediction phase: the student's head learns the teacher's soft targets
(TinyBERT's L_pred, soft cross-entropy at temperature t), optionally beside the gold labels.

The targets come with the batch (`teacher_logits`, read from the cache, bertkit/distill/cache.py) or, when
the cache is off, from a teacher forward on the batch. What a target is depends on the task
(bertkit/tasks/kinds: a sequence, a word, a QA window); both terms count the same targets, so each
call returns its micro-batch's share of the global means (bertkit/objectives/base.py).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.distill import losses
from bertkit.objectives.base import Counts, Metrics, share
from bertkit.tasks.kinds import task_kind


class PredictionObjective:
    name = "distill-prediction"

    def __init__(
        self,
        teacher: nn.Module | None,
        alpha_soft: float,
        alpha_gold: float,
        temperature: float,
        t_squared: bool,
        kind: Any = None,
    ) -> None:
        """`teacher`: None when every batch carries `teacher_logits`. `t_squared`: DistilBERT's soft targets
        carry T² (gradients keep their scale as T grows); TinyBERT's have none. `kind`: the task's logits and
        targets (bertkit/tasks/kinds), sequence classification by default."""
        self.teacher, self.temperature = teacher, temperature
        self.kind = kind if kind is not None else task_kind("classification")
        self.weights = {term: w for term, w in (("prediction", alpha_soft), ("gold", alpha_gold)) if w > 0}
        self.scale = temperature**2 if t_squared else 1.0

    def attach(self, backend: Any) -> None:
        if self.teacher is not None:
            self.teacher = backend.prepare_frozen(self.teacher)

    @property
    def terms(self) -> tuple[str, ...]:
        return tuple(self.weights)

    def counts(self, batch: dict[str, torch.Tensor]) -> Counts:
        return dict.fromkeys(self.weights, self.kind.count(batch))

    def teacher_logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if "teacher_logits" in batch:
            return batch["teacher_logits"]
        if self.teacher is None:
            raise RuntimeError("a batch without teacher_logits and no teacher to compute them")
        return self.kind.logits(self.teacher, batch)

    def __call__(
        self, model: nn.Module, batch: dict[str, torch.Tensor], totals: Counts | None = None
    ) -> tuple[torch.Tensor, Metrics]:
        totals = self.counts(batch) if totals is None else totals
        student = self.kind.logits(model, batch)
        teacher = self.teacher_logits(batch) if "prediction" in self.weights else student.detach()
        parts = self.kind.rows(student, teacher, batch)
        loss = torch.zeros((), device=student.device)
        metrics: Metrics = {}
        for term, weight in self.weights.items():
            value = torch.zeros((), device=student.device)
            for rows, target, gold, share_of_target in parts:
                if term == "prediction":
                    value = value + share_of_target * losses.prediction_soft_ce(rows, target, self.temperature)
                else:
                    value = value + share_of_target * F.cross_entropy(rows.float(), gold, reduction="sum")
            if term == "prediction":
                value = self.scale * value
            value = share(value, totals[term])
            loss = loss + weight * value
            metrics[f"{term}_loss"] = value.detach()
        return loss, metrics

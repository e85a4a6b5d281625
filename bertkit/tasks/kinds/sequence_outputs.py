"""What a sequence task's model outputs and learns, one class per way: one class of several (softmax), a set of
labels (one sigmoid each) or a score (one number). A sequence kind is reading, encoding and a classifier on the
encoder (bertkit/tasks/kinds/sequence.py) with one of these; nothing else about it differs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.config.schema import TaskConfig
from bertkit.errors import BertkitError
from bertkit.objectives.base import Objective
from bertkit.tasks.classification import (
    ClassificationBatches,
    classification_objective,
    evaluate_classifier,
    evaluate_multi_label,
    evaluate_regressor,
    label_indices,
    multi_hot,
    multi_label_objective,
    regression_objective,
)
from bertkit.tasks.data import TaskData


class OneClass:
    """One class of several per input: a softmax over the classes, cross-entropy, accuracy and F1."""

    objective: Objective = classification_objective
    probe_loss = "softmax"  # the linear probe's loss (bertkit/tasks/probe.py)

    def labels_of(self, data: TaskData, task: TaskConfig, source: Path) -> list[str]:
        """The model's outputs, from the training data; one line when there is nothing to learn."""
        labels = sorted(set(data.labels or []))
        if len(labels) < 2:
            raise BertkitError(
                f"{source}: every one of its {len(data)} rows has the label {labels[0]!r}; classification "
                f"needs at least two labels (is --label-field '{task.label_field}' the right column?)"
            )
        # Checked now, not at the first evaluation: the run directory does not exist yet.
        if task.metric == "f1" and len(labels) != 2:
            raise BertkitError(
                f"task.metric f1 is the positive class's F1 of a two-class task, but {source} has "
                f"{len(labels)} labels; use task.metric=macro_f1 instead"
            )
        return labels

    def width(self, labels: list[str]) -> int:
        return len(labels)

    def targets(self, labels: list[Any], names: list[str], source: object) -> np.ndarray:
        """Class indices of the labels read, against the training labels `names`."""
        return label_indices(labels, names, source)

    def evaluate(self, model: nn.Module, batches: ClassificationBatches, device: torch.device, task: TaskConfig,
                 batch_size: int = 64) -> dict[str, float]:  # fmt: skip
        return evaluate_classifier(model, batches, device, batch_size)

    def records(self, logits: np.ndarray, labels: list[str], threshold: float) -> list[dict[str, Any]]:
        """`bertkit predict`'s rows: the most probable label and every label's probability."""
        probs = torch.softmax(torch.from_numpy(logits), dim=-1).numpy()
        return [{"label": labels[int(p.argmax())], "probabilities": _by_label(labels, p)} for p in probs]


class LabelSet(OneClass):
    """Any set of labels per input: one sigmoid per label, every label at or above task.threshold predicted."""

    objective = multi_label_objective
    probe_loss = "sigmoid"

    def labels_of(self, data: TaskData, task: TaskConfig, source: Path) -> list[str]:
        label_sets = {tuple(sorted(row)) for row in data.labels or []}
        labels = sorted({label for row in label_sets for label in row})
        if len(label_sets) < 2 or not labels:
            raise BertkitError(
                f"{source}: every one of its {len(data)} rows has the labels {sorted(label_sets)[0]!r}; there is "
                f"nothing to learn (is --label-field '{task.label_field}' the right column, and "
                f"task.label_separator '{task.label_separator}' the separator?)"
            )
        return labels

    def targets(self, labels: list[Any], names: list[str], source: object) -> np.ndarray:
        """0/1 rows, one column per training label."""
        return multi_hot(labels, names, source)

    def evaluate(self, model: nn.Module, batches: ClassificationBatches, device: torch.device, task: TaskConfig,
                 batch_size: int = 64) -> dict[str, float]:  # fmt: skip
        return evaluate_multi_label(model, batches, device, task.threshold, batch_size)

    def records(self, logits: np.ndarray, labels: list[str], threshold: float) -> list[dict[str, Any]]:
        sig = torch.sigmoid(torch.from_numpy(logits)).numpy()
        return [{"labels": [name for name, v in zip(labels, p, strict=True) if v >= threshold],
                 "probabilities": _by_label(labels, p)} for p in sig]  # fmt: skip


class Score(OneClass):
    """A number per input (STS-B's similarity, a rating): one output, squared error, correlation."""

    objective = regression_objective
    probe_loss = "squared"

    def labels_of(self, data: TaskData, task: TaskConfig, source: Path) -> list[str]:
        if len(set(data.labels or [])) < 2:
            raise BertkitError(f"{source}: every score is the same; regression needs varied scores")
        return []

    def width(self, labels: list[str]) -> int:
        return 1

    def targets(self, labels: list[Any], names: list[str], source: object) -> np.ndarray:
        return np.asarray(labels, dtype=np.float32)

    def evaluate(self, model: nn.Module, batches: ClassificationBatches, device: torch.device, task: TaskConfig,
                 batch_size: int = 64) -> dict[str, float]:  # fmt: skip
        return evaluate_regressor(model, batches, device, batch_size)

    def records(self, logits: np.ndarray, labels: list[str], threshold: float) -> list[dict[str, Any]]:
        return [{"score": round(float(x), 6)} for x in logits[:, 0]]


def _by_label(labels: list[str], probabilities: np.ndarray) -> dict[str, float]:
    return {name: round(float(v), 6) for name, v in zip(labels, probabilities, strict=True)}

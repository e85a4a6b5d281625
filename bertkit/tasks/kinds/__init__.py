"""The registry of task kinds: one object per `task.kind`, which `finetune`, `evaluate` (through finetune), the
scoring of extra dev sets, `predict` and the distillation task stage look up, by kind or by the architecture a
fine-tuned model records. A new kind is one file beside these and one line here, and its description (metrics, task
keys, what the commands may do with it) in config/task_kinds.py."""

from __future__ import annotations

from bertkit.tasks.kinds.base import DistillData, FineTuned, Part, Prepared, TaskKind
from bertkit.tasks.kinds.retrieval import RetrievalKind
from bertkit.tasks.kinds.sequence import SequenceKind
from bertkit.tasks.kinds.sequence_outputs import LabelSet, OneClass, Score
from bertkit.tasks.kinds.similarity import SimilarityKind
from bertkit.tasks.kinds.spans import SpanKind
from bertkit.tasks.kinds.tokens import TokenKind

KINDS: dict[str, TaskKind] = {
    kind.name: kind
    for kind in (
        SequenceKind("classification", OneClass()),
        SequenceKind("multi-label", LabelSet()),
        SequenceKind("regression", Score()),
        TokenKind(),
        SpanKind(),
        RetrievalKind(),
        SimilarityKind(),
    )  # fmt: skip
}
BY_ARCHITECTURE: dict[str, TaskKind] = {kind.architecture: kind for kind in KINDS.values()}


def task_kind(name: str) -> TaskKind:
    """The kind of `task.kind` (or of a model's architecture, `sequence-classification` and the like)."""
    return KINDS.get(name) or BY_ARCHITECTURE[name]


__all__ = ["BY_ARCHITECTURE", "KINDS", "DistillData", "FineTuned", "Part", "Prepared", "TaskKind", "task_kind"]

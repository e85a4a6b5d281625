"""What the task stage's prediction phase does per kind of task: which logits a model gives, and which rows of
them are targets.

TinyBERT's L_pred is a soft cross-entropy between the teacher's and the student's output distributions. Its
released code has it for sequence classification only; the same loss carries over to the other heads with
one target per distribution the fine-tuned model predicts:

- sequence classification: one distribution over the classes per sequence;
- token classification (NER, POS): one distribution over the tags per word (its first sub-word, the
  position the tagger is trained and read at), so later sub-words, specials and padding are no target;
- extractive QA: per window, a distribution over its positions for the answer's start and one for its end,
  each weighted 1/2 as in the gold QA loss (bertkit/tasks/qa.py), padding masked out of both softmaxes.

A kind gives the logits in one layout, the layout the teacher-output cache stores (bertkit/distill/cache.py):
(B, C) for sequences, (B, T, C) for tokens, (B, T, 2) for spans (start, end). `rows` turns a batch of student
logits and the teacher's (cached ones padded to the longest example, so cut to the batch's length) into
(student rows, teacher rows, gold targets, weight) parts, each row one distribution.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bertkit.tasks.token_classification import IGNORE

Part = tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]

# A logit no softmax can pick, finite so that 0 * log p stays 0 at any temperature (-inf would give NaN).
MASKED = -1.0e4


def _inputs(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    return batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids")


class SequenceKind:
    """Sequence classification: the classifier's (B, C) logits, one target per sequence."""

    name = "classification"

    def logits(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(*_inputs(batch)).logits

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return float(batch["input_ids"].shape[0])

    def rows(self, student: torch.Tensor, teacher: torch.Tensor, batch: dict[str, torch.Tensor]) -> list[Part]:
        return [(student, teacher, batch["labels"], 1.0)]


class TokenKind:
    """Token classification: (B, T, C) tag logits; a target per labelled word (its first sub-word)."""

    name = "token-classification"

    def logits(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(*_inputs(batch))["logits"]

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return float((batch["labels"] != IGNORE).sum().item())

    def rows(self, student: torch.Tensor, teacher: torch.Tensor, batch: dict[str, torch.Tensor]) -> list[Part]:
        words = batch["labels"] != IGNORE
        teacher = teacher[:, : student.shape[1]]
        return [(student[words], teacher[words], batch["labels"][words], 1.0)]


class SpanKind:
    """Extractive QA: (B, T, 2) start and end logits; a target per window, half of it start, half end."""

    name = "question-answering"

    def logits(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        out = model(*_inputs(batch))
        return torch.stack([out["start_logits"], out["end_logits"]], dim=-1)

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return float(batch["input_ids"].shape[0])

    def rows(self, student: torch.Tensor, teacher: torch.Tensor, batch: dict[str, torch.Tensor]) -> list[Part]:
        padding = ~batch["attention_mask"].bool()[..., None]
        student = student.float().masked_fill(padding, MASKED)
        teacher = teacher[:, : student.shape[1]].float().masked_fill(padding, MASKED)
        gold = (batch["start_positions"], batch["end_positions"])
        return [(student[..., i], teacher[..., i], gold[i], 0.5) for i in range(2)]


KINDS: dict[str, Any] = {
    "sequence-classification": SequenceKind(),
    "token-classification": TokenKind(),
    "question-answering": SpanKind(),
}

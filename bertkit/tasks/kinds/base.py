"""What a task kind is to bertkit: how its data is read and encoded, the model it trains, its objective and
metrics (`prepare`, for `finetune`), and what a teacher fine-tuned for it gives the distillation task stage
(`logits`, `count`, `rows`). One file per kind (sequence.py, tokens.py, spans.py); bertkit/tasks/kinds/__init__.py
is the registry.

The distillation half: TinyBERT's L_pred is a soft cross-entropy between teacher's and student's output
distributions; a kind gives its logits in one layout, the one the teacher-output cache stores (bertkit/distill/
cache.py): (B, C) for sequences, (B, T, C) for tokens, (B, T, 2) for spans (start, end). `rows` turns a batch of
student logits and the teacher's (cached ones padded to the longest example, so cut to the batch's length) into
(student rows, teacher rows, gold targets, weight) parts, each row one distribution.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from bertkit.config.schema import ModelConfig, TaskConfig
from bertkit.tokenizers.base import Tokenizer

Part = tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]
Evaluate = Callable[[nn.Module], dict[str, float]]


@dataclass
class Prepared:
    """A task's data read and encoded for one fine-tuning run, everything checked, nothing written yet."""

    labels: list[str]  # classes or tags in the model's output order; [] for regression and QA
    model_cfg: ModelConfig  # the encoder's configuration (XLNet's classifiers add a summary layer)
    examples: int  # what an epoch passes over: examples, or QA windows
    metric: str  # the evaluation metric that picks the best model
    # The task model around a freshly built encoder, and whether the pretrained encoder must fill it exactly.
    build: Callable[[nn.Module], nn.Module]
    objective: Any
    # (model, micro-batch size, seed, device) -> (training source, evaluation or None): a kind that freezes the
    # encoder (feature-based) computes its features here.
    sources: Callable[[nn.Module, int, int, torch.device], tuple[Any, Evaluate | None]]
    task_meta: dict[str, Any]  # what bertkit_model.json records of the task (predict and export read it)
    summary: dict[str, Any] = field(default_factory=dict)  # what the run summary adds
    # Encoder keys a pretrained checkpoint may lack: they start fresh (XLNet's sequence summary).
    fresh: tuple[str, ...] = ()


class TaskKind(Protocol):
    name: str  # task.kind
    architecture: str  # bertkit_model.json's name of a model fine-tuned for it (predict and export read it)

    def prepare(self, task: TaskConfig, model_cfg: ModelConfig, tokenizer: Tokenizer, train_file: Path,
                eval_file: Path | None, seed: int) -> Prepared: ...  # fmt: skip

    def logits(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...

    def count(self, batch: dict[str, torch.Tensor]) -> float: ...

    def rows(self, student: torch.Tensor, teacher: torch.Tensor, batch: dict[str, torch.Tensor]) -> list[Part]: ...


def model_inputs(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    return batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids")


def window(task: TaskConfig, model_cfg: ModelConfig) -> int:
    """Tokens per example: task.max_seq_len, never more than the model's positions."""
    return min(task.max_seq_len, model_cfg.max_position_embeddings - model_cfg.position_offset)

"""The fine-tuned models bertkit serves: the task architectures a model directory's metadata names, the
task model built from its weights, and the window length it reads. `bertkit predict`, `bertkit embed` and
the ONNX export (bertkit/export) all import it."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bertkit.config.schema import ModelConfig

TASK_ARCHITECTURES = (
    "sequence-classification",
    "sequence-multi-label",
    "sequence-regression",
    "token-classification",
    "question-answering",
)


def build_task_model(architecture: str, meta: dict[str, Any], cfg: ModelConfig, weights: dict[str, torch.Tensor],
                     source: str) -> nn.Module:  # fmt: skip
    """The fine-tuned model of a task architecture with its weights loaded, in eval mode (dropout off)."""
    from bertkit.engine.checkpoint import load_state
    from bertkit.models.pretraining import build_encoder
    from bertkit.tasks.classification import SequenceClassifier
    from bertkit.tasks.qa import QuestionAnswerer
    from bertkit.tasks.token_classification import TokenClassifier

    labels = list(meta.get("labels") or [])
    task = meta.get("task") or {}
    if architecture == "question-answering":
        model: nn.Module = QuestionAnswerer(build_encoder(cfg))
    elif architecture == "token-classification":
        model = TokenClassifier(build_encoder(cfg), len(labels), 0.0)
    else:
        outputs = 1 if architecture == "sequence-regression" else len(labels)
        model = SequenceClassifier(build_encoder(cfg), outputs, 0.0, task.get("pool", "cls"))
    load_state(model, weights, source)
    return model.eval()


def window_length(cfg: ModelConfig, task: dict[str, Any], max_seq_len: int | None) -> int:
    """Tokens per input: --max-seq-len, else what the model was fine-tuned with, never more than its positions."""
    limit = cfg.max_position_embeddings - cfg.position_offset
    return min(max_seq_len if max_seq_len is not None else task.get("max_seq_len") or limit, limit)

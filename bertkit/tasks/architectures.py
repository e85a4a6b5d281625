"""The fine-tuned models bertkit serves (config/task_kinds.py's HEADED_ARCHITECTURES): the task model built from a
model directory's weights (the window it reads is modelio/modeldir.py's `window_length`). `bertkit predict`,
`bertkit embed` and the ONNX export (bertkit/export) all import it."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bertkit.config.schema import ModelConfig


def build_task_model(architecture: str, meta: dict[str, Any], cfg: ModelConfig, weights: dict[str, torch.Tensor],
                     source: str) -> nn.Module:  # fmt: skip
    """The fine-tuned model of a task architecture with its weights loaded, in eval mode (dropout off): the kind's
    head on a fresh encoder, as the metadata describes it."""
    from bertkit.engine.checkpoint import load_state
    from bertkit.models.pretraining import build_encoder
    from bertkit.tasks.kinds import task_kind

    model = task_kind(architecture).task_model(build_encoder(cfg), list(meta.get("labels") or []),
                                               meta.get("task") or {})  # fmt: skip
    load_state(model, weights, source)
    return model.eval()

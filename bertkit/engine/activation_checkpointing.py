"""Activation checkpointing (train.activation_checkpointing): every k-th layer of each encoder keeps only its input
in the forward pass and runs again in the backward pass. Set on the plain model before it is compiled and before an
engine wraps or shards it (checkpointing, then compile, then DDP/FSDP2/ZeRO), so each of those sees the layer loop
that recomputes; the layer loop itself is bertkit/models/capture.py's `run_layers`, which every encoder shares."""

from __future__ import annotations

from torch import nn

from bertkit.errors import BertkitError


def configure_activation_checkpointing(model: nn.Module, every: int) -> int:
    """Recompute every `every`-th layer (0: none) of each encoder of `model`; returns how many encoders. A model
    with no encoder that can (XLNet's two-stream layers carry a second stream between them) is one error line."""
    encoders = [m for m in model.modules() if hasattr(m, "checkpoint_every")]
    if every and not encoders:
        raise BertkitError(
            "train.activation_checkpointing: this model's layers cannot be recomputed (XLNet's two-stream layers "
            "pass a second stream between them); set train.activation_checkpointing=0"
        )
    for encoder in encoders:
        encoder.checkpoint_every = every
    return len(encoders)

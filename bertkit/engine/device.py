"""Device and precision selection."""

from __future__ import annotations

import contextlib

import torch

from bertkit.config.schema import EngineConfig
from bertkit.errors import BertkitError


def resolve_device(cfg: EngineConfig) -> torch.device:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise BertkitError(
            "the recipe asks for a GPU (engine.device=cuda) but none is available; use --set engine.device=cpu or auto"
        )
    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.device)


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bf16 autocast keeps fp32 master weights; matmuls run in bf16 (CPU and GPU)."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()

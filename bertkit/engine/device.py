"""Device and precision selection."""

from __future__ import annotations

import contextlib

import torch

from bertkit.config.schema import EngineConfig
from bertkit.errors import BertkitError


def resolve_device(cfg: EngineConfig) -> torch.device:
    """The device of this process: under a launcher, GPU number LOCAL_RANK."""
    from bertkit.engine.dist import local_rank

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise BertkitError(
            "the recipe asks for a GPU (engine.device=cuda) but none is available; use --set engine.device=cpu or auto"
        )
    if cfg.precision == "fp16" and (cfg.device == "cpu" or not torch.cuda.is_available()):
        raise BertkitError(
            "engine.precision=fp16 (dynamic loss scaling) needs a GPU; on CPU use --set engine.precision=bf16 or fp32"
        )
    if cfg.device == "cpu" or (cfg.device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    index = local_rank() if cfg.backend != "single" else torch.cuda.current_device()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bf16/fp16 autocast keeps fp32 master weights; matmuls run in half precision."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    if precision == "fp16":
        return torch.autocast(device_type=device.type, dtype=torch.float16)
    return contextlib.nullcontext()

"""Execution backends: how one training step runs on one or many processes.

The loop talks to a small interface (`Backend`); each backend wraps the model its own way (DDP,
FSDP2 `fully_shard`, DeepSpeed ZeRO) and is imported only when chosen, so the model code and the
single-process path never import any of them.
"""

from __future__ import annotations

import torch

from bertkit.config.schema import EngineConfig
from bertkit.engine.backends.base import Backend


def create_backend(cfg: EngineConfig, device: torch.device) -> Backend:
    if cfg.backend == "ddp":
        from bertkit.engine.backends.ddp import DDPBackend

        return DDPBackend(cfg, device)
    if cfg.backend == "fsdp":
        from bertkit.engine.backends.fsdp import FSDPBackend

        return FSDPBackend(cfg, device)
    if cfg.backend == "deepspeed":
        from bertkit.engine.backends.deepspeed import DeepSpeedBackend

        return DeepSpeedBackend(cfg, device)
    return Backend(cfg, device)


__all__ = ["Backend", "create_backend"]

"""DistributedDataParallel: every rank holds the whole model; gradients are averaged in the backward."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from bertkit.config.schema import OptimConfig, TrainConfig
from bertkit.engine.backends.base import DistributedBackend
from bertkit.engine.optim import build_optimizer


class DDPBackend(DistributedBackend):
    name = "ddp"

    def setup(self, model: nn.Module, optim_cfg: OptimConfig, train_cfg: TrainConfig) -> None:
        self.module = model.to(self.device)
        # DDP broadcasts rank 0's weights at construction, so every rank starts from the same model.
        # find_unused_parameters: a step may leave a trainable part without a gradient (a head whose
        # inputs a batch lacks); DDP must not wait for it.
        self.ddp = DistributedDataParallel(
            self.module,
            device_ids=[self.device.index] if self.device.type == "cuda" else None,
            find_unused_parameters=True,
        )
        self.optimizer = build_optimizer(self.module, optim_cfg)
        self.forward_module = torch.compile(self.ddp) if self.cfg.compile else self.ddp

    def no_sync(self) -> contextlib.AbstractContextManager:
        # Accumulation micro-steps keep their gradients local; the last micro-step all-reduces the sum.
        return self.ddp.no_sync()

    def model_state(self) -> dict[str, torch.Tensor]:
        return super().model_state() if self.rank == 0 else {}

    def optimizer_state(self) -> dict[str, Any]:
        return super().optimizer_state() if self.rank == 0 else {}

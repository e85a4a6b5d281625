"""FSDP2 (`torch.distributed.fsdp.fully_shard`): parameters, gradients and optimizer state are
sharded across ranks; each transformer layer is gathered just in time for its forward/backward."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from bertkit.config.schema import OptimConfig, TrainConfig
from bertkit.engine.backends.base import DistributedBackend
from bertkit.engine.optim import build_optimizer


class FSDPBackend(DistributedBackend):
    name = "fsdp"

    def _shard(self, module: nn.Module) -> None:
        mesh = init_device_mesh(self.device.type, (self.world_size,))
        for sub in list(module.modules()):
            if isinstance(sub, nn.ModuleList):
                for layer in sub:  # one all-gather unit per transformer layer
                    fully_shard(layer, mesh=mesh)
        fully_shard(module, mesh=mesh)

    def setup(self, model: nn.Module, optim_cfg: OptimConfig, train_cfg: TrainConfig) -> None:
        module = self.replicated_copy(model)  # fully_shard rewrites the module in place
        self._shard(module)
        self.module = module
        self.optimizer = build_optimizer(module, optim_cfg)
        self.forward_module = torch.compile(module) if self.cfg.compile else module

    def prepare_frozen(self, module: nn.Module) -> nn.Module:
        # Sharded like the student: each rank keeps 1/N of the teacher, gathered layer by layer in its forward.
        module = super().prepare_frozen(module)
        self._shard(module)
        return module

    def no_sync(self) -> contextlib.AbstractContextManager:
        return self._no_sync()

    @contextlib.contextmanager
    def _no_sync(self) -> Iterator[None]:
        # Accumulation micro-steps skip the reduce-scatter; the last micro-step reduces the sum.
        self.module.set_requires_gradient_sync(False)  # type: ignore[operator]
        try:
            yield
        finally:
            self.module.set_requires_gradient_sync(True)  # type: ignore[operator]

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        norm = super().clip_grad_norm(max_norm)
        return norm.full_tensor() if isinstance(norm, DTensor) else norm

    def model_state(self) -> dict[str, torch.Tensor]:
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(self.module, options=options)

    def optimizer_state(self) -> dict[str, Any]:
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_optimizer_state_dict(self.module, self.optimizer, options=options)

    def load_optimizer_state(self, optimizer_state: dict[str, Any]) -> None:
        # Every rank read the full checkpoint; each keeps its own shard. Parameters the objective never
        # used (the pooler under MLM) have no optimizer state yet: not an error.
        options = StateDictOptions(full_state_dict=True, strict=False)
        set_optimizer_state_dict(self.module, self.optimizer, optimizer_state, options=options)

    def final_weights_into(self, model: nn.Module) -> None:
        full = get_model_state_dict(self.module, options=StateDictOptions(full_state_dict=True))
        model.load_state_dict({k: v.detach().cpu() for k, v in full.items()})

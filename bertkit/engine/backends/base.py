"""The backend interface, implemented directly for a single process."""

from __future__ import annotations

import contextlib
import copy
import math
from typing import Any

import torch
from torch import nn

from bertkit.config.schema import EngineConfig, OptimConfig, TrainConfig
from bertkit.engine import dist
from bertkit.engine.optim import build_optimizer


def optimizer_state_by_name(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """torch keys optimizer state by parameter position; key it by parameter name instead, so a
    checkpoint moves between engines (and FSDP's full optimizer state dict uses the same layout)."""
    names = {id(p): n for n, p in model.named_parameters()}
    ordered = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    raw = optimizer.state_dict()
    return {
        "state": {ordered[i]: s for i, s in raw["state"].items()},
        "param_groups": [{**g, "params": [ordered[i] for i in g["params"]]} for g in raw["param_groups"]],
    }


def optimizer_state_from_names(
    model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> dict[str, Any]:
    """Inverse of `optimizer_state_by_name` for this optimizer's parameter order."""
    names = {id(p): n for n, p in model.named_parameters()}
    index = {names[id(p)]: i for i, p in enumerate(p for g in optimizer.param_groups for p in g["params"])}
    return {
        "state": {index[n]: s for n, s in state["state"].items()},
        "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in state["param_groups"]],
    }


class Backend:
    """One process, one device. Subclasses override what their engine does differently."""

    name = "single"
    # fp16 loss scaling with torch.amp.GradScaler (an engine that scales the loss itself sets False).
    uses_amp_scaler = True

    def __init__(self, cfg: EngineConfig, device: torch.device) -> None:
        self.cfg, self.device = cfg, device
        self.rank, self.world_size = 0, 1
        # The parameters (names in the plain model) that compute gradients but take no update for now (`hold`):
        # what a part freezes within a run where the engine fixed the trainable set when it wrapped the model (DDP's
        # reducer, FSDP2's parameter groups, which also swap the parameter objects: so they are named, not kept).
        self.held: frozenset[str] = frozenset()

    def hold(self, names: list[str]) -> None:
        """From the next step on, drop the gradients of the parameters `names` before the update (clipping
        included), so they take none, as if they did not require gradients; an empty list ends the hold."""
        self.held = frozenset(names)

    # --- set-up -------------------------------------------------------------------------------
    def setup(self, model: nn.Module, optim_cfg: OptimConfig, train_cfg: TrainConfig) -> None:
        """Place the model, build the optimizer (`train_cfg`: the batch shape, for engines that want it).
        `self.module` is the plain model (names, weights), `self.forward_module` what the objective
        calls (the wrapper, for gradient hooks)."""
        self.module = model.to(self.device)
        self.optimizer = build_optimizer(self.module, optim_cfg)
        self.forward_module: nn.Module = torch.compile(self.module) if self.cfg.compile else self.module

    def prepare_frozen(self, module: nn.Module) -> nn.Module:
        """Place a frozen module that the objective reads but never trains (a distillation teacher): on this
        device here and under DDP (every rank holds a copy); engines that shard parameters shard it too."""
        module.requires_grad_(False)
        return module.to(self.device).eval()

    @property
    def eval_module(self) -> nn.Module:
        """What evaluation calls: the plain model (or the sharded one, where forward is collective)."""
        return self.module

    # --- one step ------------------------------------------------------------------------------
    def no_sync(self) -> contextlib.AbstractContextManager:
        """Context for accumulation micro-steps whose gradients need not be synchronised yet."""
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """Clip to `max_norm` (inf: measure only) and return the global gradient norm."""
        params = [p for p in self.module.parameters() if p.grad is not None]
        return torch.nn.utils.clip_grad_norm_(params, max_norm, error_if_nonfinite=False)

    def step(self, max_norm: float, scaler: Any = None) -> torch.Tensor:
        """Clip and apply the accumulated gradients; return the global gradient norm. A non-finite
        norm means the update was not applied (the caller counts the step as skipped)."""
        if self.held:
            for name, parameter in self.module.named_parameters():
                if name in self.held:
                    parameter.grad = None
        if scaler is not None:
            scaler.unscale_(self.optimizer)
        norm = self.clip_grad_norm(max_norm)
        if torch.isfinite(norm):
            if scaler is not None:
                scaler.step(self.optimizer)
            else:
                self.optimizer.step()
        if scaler is not None:
            scaler.update()  # an fp16 overflow lowers the scale: expected, not an error
        self.zero_grad()
        return norm

    def discard_gradients(self) -> None:
        """Drop the accumulated gradients without an update (the loss was NaN/inf)."""
        self.zero_grad()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    # --- checkpoint state ----------------------------------------------------------------------
    def model_state(self) -> dict[str, torch.Tensor]:
        """Full (unsharded) weights on CPU; collective under distributed backends. Empty on ranks > 0
        where the engine gathers to rank 0 only."""
        return {k: v.detach().cpu() for k, v in self.module.state_dict().items()}

    def optimizer_state(self) -> dict[str, Any]:
        """Full optimizer state keyed by parameter name (see `optimizer_state_by_name`)."""
        return optimizer_state_by_name(self.module, self.optimizer)

    def load_optimizer_state(self, optimizer_state: dict[str, Any]) -> None:
        """Restore the full, name-keyed optimizer state of a checkpoint (weights are loaded before setup)."""
        self.optimizer.load_state_dict(optimizer_state_from_names(self.module, self.optimizer, optimizer_state))

    def final_weights_into(self, model: nn.Module) -> None:
        """After training, leave the trained weights in the caller's plain model (the same object here)."""


def clip_value(grad_clip: float) -> float:
    return grad_clip if grad_clip > 0 else math.inf


class DistributedBackend(Backend):
    """A backend over a process group: the launcher's (torchrun, deepspeed), or a group of one without one.
    The command leaves the group once its result is out (`bertkit.cli.common.emit_main`)."""

    def __init__(self, cfg: EngineConfig, device: torch.device) -> None:
        super().__init__(cfg, device)
        dist.init_process_group(device, cfg.timeout)
        self.rank, self.world_size = dist.rank(), dist.world_size()

    def replicated_copy(self, model: nn.Module) -> nn.Module:
        """A copy of `model` on this device with rank 0's weights, for engines that rewrite the module they
        wrap in place (FSDP, ZeRO-3): the caller's model stays a plain module that the pipeline can save,
        and `final_weights_into` copies the trained weights back into it."""
        module = copy.deepcopy(model).to(self.device)
        with torch.no_grad():
            for tensor in module.state_dict().values():
                torch.distributed.broadcast(tensor, src=0)  # same start on every rank
        return module

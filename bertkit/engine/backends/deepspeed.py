"""DeepSpeed ZeRO stages 1-3: optimizer state (1), gradients (2) and parameters (3) are partitioned
across ranks by DeepSpeed's engine; the loop, the model and the objectives are unchanged.

Three choices keep it interchangeable with the other backends:
- bertkit's own AdamW is handed to DeepSpeed as a client optimizer, with bertkit's parameter groups
  and scheduler, so the update rule is identical to the single-process one.
- DeepSpeed runs with `managed_gradient_accumulation: false`: the loop owns accumulation and calls
  `step()` once per optimizer step, as it does for every backend.
- Checkpoints are the portable, name-keyed full state (the same files as DDP/FSDP write), gathered with
  DeepSpeed's `safe_get_full_*` API, so a ZeRO-3 run resumes under DDP, FSDP or one process, and back.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from typing import Any

import torch
from torch import nn

from bertkit.config.schema import DeepSpeedConfig, EngineConfig, OptimConfig, TrainConfig
from bertkit.engine.backends.base import DistributedBackend
from bertkit.engine.optim import build_optimizer
from bertkit.errors import BertkitError


def _import_deepspeed(device: torch.device) -> Any:
    # DeepSpeed picks its accelerator when imported; on a CPU run say so, rather than let it probe for CUDA.
    if device.type == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        import deepspeed
    except ImportError:
        raise BertkitError(
            'engine.backend=deepspeed needs DeepSpeed: pip install "bertkit[deepspeed]" "torch==<your torch>"'
        ) from None
    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)  # its INFO lines would drown the progress bar
    # DeepSpeed still calls collectives that torch has renamed; the per-call FutureWarning is not the user's.
    warnings.filterwarnings(
        "ignore", message=r".*is deprecated\. Please use `torch\.distributed\.", category=FutureWarning
    )
    return deepspeed


def deepspeed_config(
    ds_cfg: DeepSpeedConfig, train_cfg: TrainConfig, optim_cfg: OptimConfig, world_size: int
) -> dict[str, Any]:
    """The DeepSpeed JSON config for this recipe, with the user's file (if any) merged over it."""
    config: dict[str, Any] = {
        "train_batch_size": train_cfg.batch_size,
        "train_micro_batch_size_per_gpu": train_cfg.batch_size // train_cfg.grad_accum // world_size,
        "gradient_accumulation_steps": train_cfg.grad_accum,
        "gradient_clipping": optim_cfg.grad_clip,  # 0 means no clipping in both
        "managed_gradient_accumulation": False,
        # bertkit's AdamW is a client optimizer that DeepSpeed has not "tested"; ZeRO wraps it faithfully.
        "zero_allow_untested_optimizer": True,
        # ZeRO-Offload (offload_optimizer in a user file) then steps bertkit's AdamW on the CPU copy: slower
        # than DeepSpeedCPUAdam, but the same update as every other engine.
        "zero_force_ds_cpu_optimizer": False,
        "zero_optimization": {"stage": ds_cfg.zero_stage},
        "steps_per_print": 2**31 - 1,  # bertkit logs; DeepSpeed's own progress lines are off
        "wall_clock_breakdown": False,
    }
    user = ds_cfg.user_config()  # validated when the recipe was read
    zero = {**config["zero_optimization"], **user.pop("zero_optimization", {})}
    return {**config, **user, "zero_optimization": zero}


def _first_line(err: Exception) -> str:
    details = getattr(err, "errors", None)
    if callable(details):  # a pydantic ValidationError: its first line only names the model
        first = details()[0]
        return f"{'.'.join(map(str, first['loc']))}: {first['msg']}"
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


class DeepSpeedBackend(DistributedBackend):
    name = "deepspeed"
    uses_amp_scaler = False

    def __init__(self, cfg: EngineConfig, device: torch.device) -> None:
        super().__init__(cfg, device)
        self.deepspeed = _import_deepspeed(device)
        # DeepSpeed's communication layer wraps the process group that is already there (gloo/NCCL).
        # Loading its shared-memory op prints a success line to stdout, which belongs to --json: drop it
        # (a failed build raises, with its own message).
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                self.deepspeed.init_distributed(dist_backend=torch.distributed.get_backend())
        except Exception as err:  # typically its C++ op failing to build
            raise BertkitError(
                f"DeepSpeed could not start: {_first_line(err)} (on first use it compiles a C++ op, which needs "
                "a C++ compiler and ninja on PATH: pip install ninja)"
            ) from None

    def setup(self, model: nn.Module, optim_cfg: OptimConfig, train_cfg: TrainConfig) -> None:
        module = self.replicated_copy(model)  # ZeRO-3 partitions the module it is given in place
        optimizer = build_optimizer(module, optim_cfg)
        # Parameter names per optimizer group, taken before ZeRO swaps the groups' tensors for flat partitions.
        names = {id(p): n for n, p in module.named_parameters()}
        self._group_names = [[names[id(p)] for p in group["params"]] for group in optimizer.param_groups]
        config = deepspeed_config(self.cfg.deepspeed, train_cfg, optim_cfg, self.world_size)
        try:
            self.engine, self.zero_optimizer, _, _ = self.deepspeed.initialize(
                model=module, optimizer=optimizer, config=config
            )
        except Exception as err:  # DeepSpeed validates the merged config here: assertions, pydantic, its own
            source = f" (with {self.cfg.deepspeed.config})" if self.cfg.deepspeed.config else ""
            raise BertkitError(f"DeepSpeed rejected the configuration{source}: {_first_line(err)}") from None
        self.module = self.engine.module
        # The scheduler drives the client optimizer's learning rate, which ZeRO reads at every step.
        self.optimizer = optimizer
        self.forward_module = torch.compile(self.engine) if self.cfg.compile else self.engine
        self._named = dict(self.module.named_parameters())
        self._state_linked = False

    def prepare_frozen(self, module: nn.Module) -> nn.Module:
        """ZeRO-3 partitions the teacher as it partitions the student (an engine without an optimizer, as
        ZeRO-Inference runs); stages 1 and 2 keep whole parameters on every rank, so the teacher does too."""
        if self.cfg.deepspeed.zero_stage < 3:
            return super().prepare_frozen(module)
        module.requires_grad_(False)
        config = {
            "train_micro_batch_size_per_gpu": 1,  # required by the config schema; this engine never steps
            "zero_optimization": {"stage": 3},  # fp32 weights: bf16 comes from autocast, as for the student
            "steps_per_print": 2**31 - 1,
        }
        engine, *_ = self.deepspeed.initialize(model=module.to(self.device), config=config)
        engine.eval()
        return engine

    def backward(self, loss: torch.Tensor) -> None:
        if not bool(torch.isfinite(loss.detach())):
            # A NaN/inf loss can still leave finite gradients (a mean over nothing); make them NaN, so that
            # DeepSpeed's own overflow check skips the update in `step`/`discard_gradients`.
            loss = loss * float("nan")
        # The loop's loss is already this micro-step's share of the global mean: no division by the steps.
        self.engine.backward(loss, scale_wrt_gas=False)

    def step(self, max_norm: float, scaler: Any = None) -> torch.Tensor:
        # DeepSpeed reduces the accumulated gradients, clips to `gradient_clipping`, and skips the update
        # (clearing the gradients) when their norm is not finite.
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        if not self.engine.was_step_applied() or norm is None:
            return torch.tensor(float("inf"))
        return torch.as_tensor(norm, dtype=torch.float32).cpu()

    def discard_gradients(self) -> None:
        # A NaN/inf loss leaves NaN/inf gradients; DeepSpeed's step detects them, skips the update and
        # clears its (possibly partitioned) gradient buffers, which is the only sound way to empty them.
        self.engine.step()
        if self.engine.was_step_applied():
            raise BertkitError("DeepSpeed applied an update for a NaN/inf loss; stopping rather than train on it")

    # --- checkpoint state: full, name-keyed, identical in layout to the other backends ----------------
    def _utils(self) -> Any:
        return self.deepspeed.utils

    def _link_optimizer_state(self) -> None:
        """ZeRO 1/2 map each parameter to its slice of the optimizer state after the first update;
        with several parameter groups that map is made before the later groups have state. Redo it
        once state exists for all of them (ZeRO-3 looks the state up directly)."""
        if self._state_linked or self.cfg.deepspeed.zero_stage == 3:
            return
        self.zero_optimizer._hp_optimizer_states_linked = False
        self.zero_optimizer._lazy_init_hp_params_optimizer_state()
        self._state_linked = True

    def _full_parameters(self) -> dict[int, torch.Tensor]:
        """Every parameter, whole, on CPU, by id. Collective: ZeRO-3 ranks hold only a shard of each."""
        full: dict[int, torch.Tensor] = {}
        frozen = []
        for param in self._named.values():
            value = self._utils().safe_get_full_fp32_param(param)  # None for a parameter ZeRO does not train
            if value is None:
                frozen.append(param)
            else:
                full[id(param)] = value.detach().cpu()
        # Frozen parameters (a feature-based encoder) are outside the optimizer: gather them directly
        # (a no-op below ZeRO-3, where every rank holds them whole).
        with self.deepspeed.zero.GatheredParameters(frozen):
            full.update({id(p): p.detach().cpu().clone() for p in frozen})
        return full

    def _full_state(self) -> dict[str, torch.Tensor]:
        full = self._full_parameters()
        return {
            key: full[id(value)] if id(value) in full else value.detach().cpu()  # buffers are never partitioned
            for key, value in self.module.state_dict(keep_vars=True).items()
        }

    def model_state(self) -> dict[str, torch.Tensor]:
        state = self._full_state()
        return state if self.rank == 0 else {}

    def _flat_partitions(self) -> list[torch.Tensor]:
        """This rank's fp32 flat partitions: what ZeRO hands the client optimizer, and keys its state by."""
        zero = self.zero_optimizer
        if self.cfg.deepspeed.zero_stage == 3:
            return list(zero.fp32_partitioned_groups_flat)
        return list(zero.single_partition_of_fp32_groups)

    def _state_keys(self) -> tuple[list[str], dict[str, torch.Tensor]]:
        """The per-parameter tensor keys of the client optimizer's state (exp_avg...) and its scalar
        entries (step), read from the flat partitions ZeRO gives the optimizer."""
        for flat in self._flat_partitions():
            entry = self.optimizer.state.get(flat)
            if entry:
                tensors = [k for k, v in entry.items() if torch.is_tensor(v) and v.shape == flat.shape]
                scalars = {k: v for k, v in entry.items() if k not in tensors}
                return tensors, scalars
        return [], {}

    def _trained_names(self) -> list[str]:
        return [name for names in self._group_names for name in names]

    def optimizer_state(self) -> dict[str, Any]:
        tensor_keys, scalars = self._state_keys()
        state: dict[str, dict[str, Any]] = {}
        if tensor_keys:
            self._link_optimizer_state()
            get = self._utils().safe_get_full_optimizer_state
            for name in self._trained_names():  # collective
                param = self._named[name]
                state[name] = {
                    **{k: v.clone() for k, v in scalars.items()},  # own copies: torch steps them in place
                    **{k: get(param, k).detach().cpu() for k in tensor_keys},
                }
        groups = [
            {**{k: v for k, v in g.items() if k != "params"}, "params": names}
            for g, names in zip(self.optimizer.param_groups, self._group_names, strict=True)
        ]
        return {"state": state, "param_groups": groups} if self.rank == 0 else {}

    def load_optimizer_state(self, optimizer_state: dict[str, Any]) -> None:
        for group, saved_group in zip(self.optimizer.param_groups, optimizer_state["param_groups"], strict=True):
            group.update({k: v for k, v in saved_group.items() if k != "params"})  # lr included: exact resume
        saved = optimizer_state["state"]
        if not saved:  # saved before any update
            return
        example = next(iter(saved.values()))
        tensor_keys = [k for k, v in example.items() if torch.is_tensor(v) and v.ndim > 0]
        # The client optimizer creates its state lazily at the first update: create it now, on ZeRO's
        # flat partitions, then fill each parameter's slice from the checkpoint.
        for flat in self._flat_partitions():
            entry = {k: v.clone() for k, v in example.items() if k not in tensor_keys}
            entry.update({k: torch.zeros_like(flat) for k in tensor_keys})
            self.optimizer.state[flat] = entry
        self._link_optimizer_state()
        put = self._utils().safe_set_full_optimizer_state
        for name in self._trained_names():  # collective under ZeRO-3
            if name in saved:  # parameters no objective ever used have no state: they start at zero
                for key in tensor_keys:
                    put(self._named[name], saved[name][key].to(self.device), key)

    def final_weights_into(self, model: nn.Module) -> None:
        model.load_state_dict(self._full_state())

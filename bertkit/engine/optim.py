"""Optimizers (AdamW, LAMB, StableAdamW) and learning-rate schedules (linear/cosine decay, warmup-stable-decay)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from bertkit.config.schema import OptimConfig, ScheduleConfig
from bertkit.errors import BertkitError

STABLEADAMW_INSTALL = 'optim.name=stableadamw needs torch-optimi: pip install "bertkit[stableadamw]"'


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """BERT's rule: no weight decay on biases and LayerNorm weights (nor on any 1-D parameter).

    LAMB follows ALBERT and also leaves these out of the layer-wise adaptation (`adapt`)."""
    decay, no_decay = [], []
    for _, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim < 2 else decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay, "adapt": True},
        {"params": no_decay, "weight_decay": 0.0, "adapt": False},
    ]


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al., 2019, "Large Batch Optimization for Deep Learning"), as used by ALBERT.

    Adam's bias-corrected update plus decoupled weight decay, rescaled per parameter tensor by the
    trust ratio ||w|| / ||update||, so every layer moves by a step proportional to its own size."""

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
    ) -> None:
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "adapt": True}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                state["step"] += 1
                step = float(state["step"])
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.mul_(beta1).add_(param.grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(param.grad, param.grad, value=1 - beta2)
                corrected_avg = exp_avg / (1 - beta1**step)
                corrected_sq = exp_avg_sq / (1 - beta2**step)
                update = corrected_avg / (corrected_sq.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update = update.add(param, alpha=group["weight_decay"])
                trust = 1.0
                if group["adapt"]:
                    weight_norm, update_norm = float(param.norm()), float(update.norm())
                    # A zero-initialised tensor (or a zero update) falls back to the plain Adam step.
                    if weight_norm > 0 and update_norm > 0:
                        trust = weight_norm / update_norm
                param.add_(update, alpha=-group["lr"] * trust)
        return loss


def stable_adamw(groups: list[dict], cfg: OptimConfig) -> torch.optim.Optimizer:
    """StableAdamW (Wortsman et al. 2023, "Stable and low-precision training for large-scale vision-language
    models", Algorithm 2), from torch-optimi, the implementation ModernBERT trained with: AdamW with Adafactor's
    bias correction folded into the betas, whose step size for each tensor is divided by
    max(1, RMS(g^2 / max(v, eps^2))), so a tensor whose gradient outgrows its second-moment estimate cannot jump.

    Weight decay is optimi's default (decouple_lr=False), the paper's: theta -= lr_t * wd * theta with the clipped,
    scheduled rate lr_t, as PyTorch's AdamW, so `optim.weight_decay` means the same for every bertkit optimizer.
    ModernBERT's "fully decoupled" 1e-5 (decouple_lr=True: wd * lr_t / peak lr) is the same update written with
    wd = 1e-5 / peak lr, which is what its recipes set.

    optimi's loop over tensors is used, never its Triton kernels: those sum each tensor's RMS with atomic adds
    (in any order, so not bitwise reproducible, and a resumed run would drift) and the choice would be saved with
    the checkpoint's parameter groups (a GPU checkpoint could not resume on CPU). The loop reads each RMS back to
    the host, one small sync per tensor, small beside a step's forward and backward."""
    try:
        from optimi import StableAdamW
    except ImportError:
        raise BertkitError(STABLEADAMW_INSTALL) from None
    return StableAdamW(
        groups,
        lr=cfg.lr,
        betas=cfg.betas,
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
        decouple_lr=False,
        foreach=False,
        triton=False,
    )


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    groups = parameter_groups(model, cfg.weight_decay)
    if cfg.name == "lamb":
        return Lamb(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps)
    for group in groups:
        group.pop("adapt")
    if cfg.name == "stableadamw":
        return stable_adamw(groups, cfg)
    # PyTorch's fused kernel updates each tensor in one pass where the default (foreach) makes a pass per
    # operation: on a 2-core CPU, about 7x faster for a small BERT with its 30k x H embedding table, whose update
    # was a tenth of its distillation step (tests/bench/test_optimizer_bench.py). It takes CPU and CUDA
    # parameters (FSDP's DTensors and DeepSpeed's flat partitions too).
    fused = all(p.device.type in ("cpu", "cuda") for group in groups for p in group["params"])
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, fused=fused or None)


def lr_multiplier(step: float, total_steps: int, cfg: ScheduleConfig) -> float:
    """Linear warmup to the peak, then linear/cosine decay to `min_lr_ratio`, constant, or
    warmup-stable-decay (constant, then a linear or 1-sqrt decay over the last `decay_fraction` of the steps)."""
    warmup = cfg.warmup_for(total_steps)
    if warmup and step < warmup:
        return (step + 1) / warmup
    if cfg.decay == "constant":
        return 1.0
    if cfg.decay == "wsd":
        decay_steps = max(1, round(total_steps * cfg.decay_fraction))
        decay_start = max(warmup, total_steps - decay_steps)
        if step < decay_start:
            return 1.0
        progress = min(1.0, (step - decay_start) / max(1, total_steps - decay_start))
        # ModernBERT's OneMinusSqrtScheduler: alpha_f + (1 - alpha_f) * (1 - sqrt((t - t_start) / t_decay)).
        shape = 1.0 - (math.sqrt(progress) if cfg.decay_shape == "1-sqrt" else progress)
        return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * shape
    span = max(1, total_steps - warmup)
    progress = min(1.0, (step - warmup) / span)
    shape = 1.0 - progress if cfg.decay == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * shape


def build_scheduler(optimizer: torch.optim.Optimizer, total_steps: int, cfg: ScheduleConfig):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_multiplier(step, total_steps, cfg))


def move_step_scheduler(scheduler: torch.optim.lr_scheduler.LambdaLR, step: int) -> None:
    """Put a step schedule at `step` (its rates set), for a run resumed from a checkpoint whose schedule was laid
    over a budget: without the budget it continues on the step schedule from where it stands."""
    scheduler.last_epoch = step
    for group, base, factor in zip(
        scheduler.optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas, strict=True
    ):
        group["lr"] = base * factor(step)
    scheduler._last_lr = [group["lr"] for group in scheduler.optimizer.param_groups]


class BudgetScheduler:
    """The schedule laid over a budget (cramming's "fake step"): at progress p (the spent share of the budget) the
    rate is the step schedule's at step p x total_steps, so warm-up (`warmup_fraction`, or `warmup_steps` as a share
    of `total_steps`) and decay (every `schedule.decay`, WSD's decay share included) land exactly on the deadline,
    however many steps the budget buys. The loop sets the progress after every step; the rate it sets is the next
    step's, as a step scheduler's `step()` does."""

    def __init__(self, optimizer: torch.optim.Optimizer, total_steps: int, cfg: ScheduleConfig) -> None:
        self.optimizer, self.total_steps, self.cfg = optimizer, total_steps, cfg
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        self.set_progress(0.0)

    def set_progress(self, progress: float) -> None:
        self.progress = progress
        factor = lr_multiplier(progress * self.total_steps, self.total_steps, self.cfg)  # type: ignore[arg-type]
        for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = base * factor

    def get_last_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, float]:
        return {"progress": self.progress}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.set_progress(float(state["progress"]))

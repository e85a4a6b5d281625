"""One optimizer step over one global batch: the micro-steps' forwards and backwards, one update.

One global batch, one update: every loss's targets are counted over all micro-steps and ranks before the
first forward (one all-reduce), so each micro-step's loss is its share of the global mean and any split of the
batch (accumulation, processes) gives the same step (bertkit/objectives/base.py).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from bertkit.engine import dist
from bertkit.engine.backends.base import clip_value
from bertkit.engine.contracts import Objective
from bertkit.engine.device import autocast

_TOKENS, _SEQUENCES = "_tokens", "_sequences"


@dataclass
class StepOutput:
    values: dict[str, float]  # the global loss ("loss") and metrics, summed over micro-steps and ranks
    tokens: int  # real tokens of the global batch (padding left out)
    sequences: int
    loss_finite: bool
    grad_norm: torch.Tensor  # NaN/inf: no update was applied

    @property
    def applied(self) -> bool:
        return bool(torch.isfinite(self.grad_norm))


def train_step(
    backend: Any,
    objective: Objective,
    micro_batches: list[dict[str, torch.Tensor]],
    precision: str,
    grad_clip: float,
    scaler: Any = None,
) -> StepOutput:
    """Forward and backward every micro-batch (gradients synchronised on the last), then one update, applied only
    if the loss and the gradient norm are finite (clipped at `grad_clip`, 0: no clipping)."""
    totals = global_counts(objective, micro_batches)
    tokens, sequences = int(totals.pop(_TOKENS)), int(totals.pop(_SEQUENCES))
    device = backend.device
    total_loss = torch.zeros((), device=device)
    summed: dict[str, torch.Tensor] = {}
    for index, batch in enumerate(micro_batches):
        sync = contextlib.nullcontext() if index == len(micro_batches) - 1 else backend.no_sync()
        with sync:
            with autocast(device, precision):
                loss, metrics = objective(backend.forward_module, batch, totals)
            # Every backend averages gradients over its ranks; the shares already sum to the global mean, so
            # undo the average.
            scaled = loss * backend.world_size
            backend.backward(scaler.scale(scaled) if scaler is not None else scaled)
        total_loss += loss.detach().float()
        for key, value in metrics.items():
            summed[key] = summed.get(key, 0) + value.detach().float()
    # One collective for everything logged: the shares of all ranks add up to the global means.
    keys = sorted(summed)
    packed = dist.all_reduce_sum(torch.stack([total_loss, *(summed[k] for k in keys)]).float())
    loss_finite = bool(torch.isfinite(packed[0]))
    if loss_finite:
        grad_norm = backend.step(clip_value(grad_clip), scaler)  # applies the update only if the norm is finite
    else:
        backend.discard_gradients()
        grad_norm = torch.tensor(float("nan"))
    values = {"loss": float(packed[0]), **{key: float(packed[i]) for i, key in enumerate(keys, start=1)}}
    return StepOutput(values, tokens, sequences, loss_finite, grad_norm)


def global_counts(objective: Objective, micro_batches: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    """Targets of every loss, plus tokens and sequences, over this step's micro-batches on all ranks."""
    local: dict[str, float] = {}
    for batch in micro_batches:
        # Every column of texts a batch holds (a bi-encoder's queries, passages, pairs) has its own mask.
        masks = [value for key, value in batch.items() if key.endswith("attention_mask")]
        counts = {
            **objective.counts(batch),
            _TOKENS: float(sum(mask.sum() for mask in masks)),
            _SEQUENCES: float(sum(mask.shape[0] for mask in masks)),
        }
        for key, value in counts.items():
            local[key] = local.get(key, 0.0) + float(value)
    keys = sorted(local)
    summed = dist.all_reduce_sum(torch.tensor([local[k] for k in keys], dtype=torch.float64))
    return dict(zip(keys, summed.tolist(), strict=True))

"""What the trainer asks of the parts its callers hand it: the data source, the objective, the callbacks.

`pretrain`, `distill` and `finetune` differ only in these (and the model); the trainer (bertkit/engine/trainer.py)
never looks behind them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import torch
from torch import nn


@runtime_checkable
class DataSource(Protocol):
    """Micro-batches in a resumable order. `shard(rank, world_size)` gives this process its share of every
    global batch; `state_dict()` is the position in the order, which a checkpoint keeps and `load_state_dict`
    goes back to. `reshardable`: the position means the same under any number of processes (bertkit's sources
    walk one global order, bertkit/corpus/loader.py `EpochSampler`), so a checkpoint resumes on another number of
    processes; a source without that refuses such a checkpoint."""

    reshardable: bool

    def next_batch(self) -> dict[str, torch.Tensor]: ...

    def shard(self, rank: int, world_size: int) -> None: ...

    def state_dict(self) -> dict[str, int]: ...

    def load_state_dict(self, state: dict[str, int]) -> None: ...


class Objective(Protocol):
    """What the loop trains (bertkit/objectives/base.py has the contract): `counts(batch)` gives the number of
    targets of each loss in a micro-batch, from the batch alone; the call returns the micro-batch's share of
    the global-batch mean loss (its sum over targets / the global count in `totals`) and metrics alike."""

    def counts(self, batch: dict[str, torch.Tensor]) -> dict[str, float]: ...

    def __call__(
        self, model: nn.Module, batch: dict[str, torch.Tensor], totals: dict[str, float]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...


Evaluator = Callable[[nn.Module], dict[str, float]]
# Called on every rank after each evaluation with (step, metrics, snapshot); `snapshot()` returns the full
# weights (collective: call it on all ranks or none; empty on ranks > 0 under some engines). Returning True
# stops training there (early stopping); after the final evaluation the return value is ignored.
OnEval = Callable[[int, dict[str, float], Callable[[], dict[str, torch.Tensor]]], bool]
# Called on every rank at each `train.snapshot_every_share` with (step, when, snapshot), snapshot as above and
# `when` the run's share, training seconds and tokens at that step.
OnSnapshot = Callable[[int, dict[str, float], Callable[[], dict[str, torch.Tensor]]], None]

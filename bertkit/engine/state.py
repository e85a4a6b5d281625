"""The pieces of training state a checkpoint keeps, each with `state_dict()` and `load_state_dict()`.

The checkpointer (bertkit/engine/checkpointer.py) saves `{name: part}`: tensor parts go to training_state.pt
(a weights-only torch file), the others to trainer_state.json, each part owning its own keys. New state is a
new part here and one entry in the trainer's table (bertkit/engine/trainer.py), nothing else.
"""

from __future__ import annotations

from typing import Any

import torch

from bertkit.engine import dist
from bertkit.engine.contracts import DataSource
from bertkit.engine.optim import move_step_scheduler
from bertkit.errors import BertkitError
from bertkit.progress import stderr_console


class Mismatch(BertkitError):
    """A checkpoint this run cannot continue; the message completes "checkpoint PATH ..." (the checkpointer
    names the path)."""


def warn(line: str) -> None:
    stderr_console.print(line, markup=False, highlight=False, soft_wrap=True)


class Counters:
    """Optimizer steps taken, steps skipped (a NaN/inf loss or gradient), real tokens trained on and the training
    FLOPs they cost (bertkit/engine/flops.py's count), all over every rank."""

    def __init__(self) -> None:
        self.step = self.skipped_steps = self.tokens = 0
        self.flops = 0.0

    def state_dict(self) -> dict[str, Any]:
        # The step itself is the checkpoint's name and its trainer_state.json's "step" (save_checkpoint).
        return {"skipped_steps": self.skipped_steps, "tokens": self.tokens, "flops": self.flops}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step, self.skipped_steps = int(state["step"]), int(state["skipped_steps"])
        self.tokens, self.flops = int(state["tokens"]), float(state.get("flops", 0.0))


class RandomState:
    """Every rank's torch (and CUDA) random state. Saving gathers them (collective); resuming, each rank takes
    its own. Resumed on more processes than it was saved from, the new ranks keep their fresh seeds, and the run
    says so in one line."""

    def __init__(self, device: torch.device, rank: int, world: int) -> None:
        self.device, self.rank, self.world = device, rank, world

    def state_dict(self) -> list[dict[str, torch.Tensor]]:
        state = {"torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(self.device)
        return dist.gather_objects(state)

    def load_state_dict(self, saved: list[dict[str, torch.Tensor]]) -> None:
        restore_rng(saved, self.rank, self.world, self.device)


def restore_rng(saved: list[dict[str, torch.Tensor]], rank: int, world: int, device: torch.device) -> None:
    """This rank's random state from a checkpoint's per-rank states (see `RandomState`)."""
    if rank < len(saved):
        torch.set_rng_state(saved[rank]["torch"])
        if "cuda" in saved[rank] and device.type == "cuda":
            torch.cuda.set_rng_state(saved[rank]["cuda"], device)
    if saved and world > len(saved) and rank == 0:
        warn(
            f"warning: the checkpoint holds the random state of {len(saved)} process(es) and this run has {world}; "
            f"ranks {len(saved)}-{world - 1} start from fresh random states, so their dropout and sampling draws "
            "differ from an uninterrupted run's"
        )


class ScheduleState:
    """The learning-rate schedule: a step schedule (LambdaLR) or one laid over a budget (BudgetScheduler), and
    how a checkpoint of either continues under either."""

    def __init__(self, scheduler: Any, progress: Any, counters: Counters) -> None:
        self.scheduler, self.progress, self.counters = scheduler, progress, counters

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        if self.progress.shaped:
            # Laid over the budget now: the rate at the progress the budget continues from (RunProgress, restored
            # before this part), whatever the checkpoint's schedule was.
            self.scheduler.set_progress(self.progress.resumed_at)
        elif "progress" in saved:
            # Laid over a budget before, over steps now: the step schedule continues from this step.
            move_step_scheduler(self.scheduler, self.counters.step)
        else:
            self.scheduler.load_state_dict(saved)


class OptimizerState:
    """The optimizer's state, keyed by parameter name, so it moves between engines."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def state_dict(self) -> dict[str, Any]:
        return self.backend.optimizer_state()  # collective under sharded engines

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        self.backend.load_optimizer_state(saved)


class ScalerState:
    """fp16's loss scaler (None in other precisions, and under engines that scale the loss themselves)."""

    def __init__(self, scaler: Any) -> None:
        self.scaler = scaler

    def state_dict(self) -> dict[str, Any] | None:
        return self.scaler.state_dict() if self.scaler is not None else None

    def load_state_dict(self, saved: dict[str, Any] | None) -> None:
        if self.scaler is not None and saved:
            self.scaler.load_state_dict(saved)


class DataPosition:
    """Where the data source stands in its order, and on how many processes it was drawn."""

    def __init__(self, source: DataSource, world: int) -> None:
        self.source, self.world = source, world

    def state_dict(self) -> dict[str, Any]:
        return {"loader": self.source.state_dict(), "world_size": self.world}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved_world = int(state.get("world_size", self.world))
        if saved_world != self.world and not self.source.reshardable:
            raise Mismatch(
                f"holds a data position taken on {saved_world} process(es), which this data source cannot continue "
                f"on {self.world}; resume with {saved_world} process(es)"
            )
        self.source.load_state_dict(state["loader"])


class RunIdentity:
    """What a checkpoint must agree with to continue: the optimizer (its state's layout), and the engine that
    wrote it (for the record)."""

    def __init__(self, optimizer: str, engine: str) -> None:
        self.optimizer, self.engine = optimizer, engine

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer, "engine": self.engine}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state.get("optimizer", "adamw")
        if saved != self.optimizer:
            raise Mismatch(
                f"was trained with optim.name={saved}, the recipe says {self.optimizer}; resume with --set "
                f"optim.name={saved}"
            )

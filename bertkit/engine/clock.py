"""The run's clocks: training time (pauses left out) and how far through its budget, or its steps, the run is."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from bertkit.config.schema import TrainConfig
from bertkit.engine import dist
from bertkit.engine.budget import Budget


class TrainingClock:
    """Training seconds over every attempt of a run. Evaluating, checkpointing and snapshotting are not training
    time, so not budget time either: the clock stands still inside `pause()`, and what is written there
    (a checkpoint, an evaluation row) says when the pause began."""

    def __init__(self) -> None:
        self.before = 0.0  # the attempts before this one (from the checkpoint resumed)
        self.started = time.perf_counter()
        self.paused = 0.0
        self.pause_began: float | None = None

    def start(self) -> None:
        """This attempt's training begins now."""
        self.started, self.paused, self.pause_began = time.perf_counter(), 0.0, None

    def seconds(self) -> float:
        now = time.perf_counter()
        ongoing = now - self.pause_began if self.pause_began is not None else 0.0
        return self.before + now - self.started - self.paused - ongoing

    def wall(self) -> float:
        """This attempt's wall clock, pauses included."""
        return time.perf_counter() - self.started

    @contextlib.contextmanager
    def pause(self) -> Iterator[None]:
        self.pause_began = time.perf_counter()
        try:
            yield
        finally:
            self.paused += time.perf_counter() - self.pause_began
            self.pause_began = None

    def state_dict(self) -> dict[str, Any]:
        return {"train_seconds": self.seconds()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.before = float(state.get("train_seconds", 0.0))


class RunProgress:
    """The spent share of the run, in [0, 1]: of its budget (training seconds or tokens, `train.budget`), or of
    `train.steps` without one. With `train.budget_schedule` the learning-rate schedule is laid over it (`shaped`).
    A resumed run continues the budget from the progress its checkpoint saved; a budget changed on resume
    stretches or squeezes what is left of the schedule (bertkit/engine/budget.py)."""

    def __init__(self, train_cfg: TrainConfig, clock: TrainingClock, counters: Any) -> None:
        self.total_steps, self.clock, self.counters = train_cfg.steps, clock, counters
        self.budget = Budget.parse(train_cfg.budget) if train_cfg.budget else None
        self.shaped = self.budget is not None and train_cfg.budget_schedule
        self.value = 0.0
        self.resumed_at: float | None = None  # the progress a resumed run's schedule continues from

    def update(self) -> float:
        """The progress after the steps and tokens counted so far; every rank gets the same value."""
        if self.budget is None:
            self.value = self.counters.step / self.total_steps
        elif self.budget.kind in ("tokens", "flops"):  # counted over all ranks already
            self.value = self.budget.progress(float(self.spent_counted()))
        else:  # each rank measures its own clock: all take the slowest's, so they stop and schedule alike
            self.value = self.budget.progress(dist.all_reduce_max(self.clock.seconds()))
        return self.value

    def spent_counted(self) -> float:
        """Tokens or FLOPs spent so far, for a budget of that kind."""
        flops = self.budget is not None and self.budget.kind == "flops"
        return float(self.counters.flops if flops else self.counters.tokens)

    @property
    def over_budget(self) -> bool:
        return self.budget is not None and self.value >= 1.0

    def state_dict(self) -> dict[str, Any]:
        budget = self.budget
        return {"budget": {"kind": budget.kind, "total": budget.total, "progress": self.value} if budget else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the budget from the checkpoint's progress (that of step / train.steps for a run that had no
        budget), over what is left of this run's budget. The same budget needs no anchor: its progress is
        spent / total, as in an uninterrupted run. (The counters and the clock are restored before.)"""
        if self.budget is None:
            return
        saved = state.get("budget") or {}
        saved_progress = float(saved.get("progress", self.counters.step / self.total_steps))
        if (saved.get("kind"), saved.get("total")) != (self.budget.kind, self.budget.total):
            spent = self.clock.before if self.budget.kind == "seconds" else self.spent_counted()
            self.budget = self.budget.resumed(spent, saved_progress)
        self.resumed_at = float(saved.get("progress", self.budget.anchor_progress))

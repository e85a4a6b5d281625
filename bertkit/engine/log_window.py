"""The steps between two rows of metrics.jsonl: their summed loss and metrics, tokens and sequences."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WindowSummary:
    means: dict[str, float]
    tokens: int
    sequences: int
    seconds: float


class LogWindow:
    """Running sums of the current logging window. The sums are part of the checkpoint, so a resumed run logs
    exactly the rows of an uninterrupted one; the throughput (tokens, sequences, wall clock) is this attempt's."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.steps = 0
        self.reset_rates()

    def reset_rates(self) -> None:
        self.tokens = self.sequences = 0
        self.started = time.perf_counter()

    def add(self, values: dict[str, float], tokens: int, sequences: int) -> None:
        """One step's global loss and metrics (the same keys every step), tokens and sequences."""
        for key, value in values.items():
            self.sums[key] = self.sums.get(key, 0.0) + value
        self.steps += 1
        self.tokens += tokens
        self.sequences += sequences

    def close(self) -> WindowSummary:
        """The window's means, tokens, sequences and wall clock; the next window starts empty."""
        summary = WindowSummary(
            {key: round(value / self.steps, 6) for key, value in self.sums.items()},
            self.tokens,
            self.sequences,
            time.perf_counter() - self.started,
        )
        self.sums, self.steps = {}, 0
        self.reset_rates()
        return summary

    def state_dict(self) -> dict[str, Any]:
        return {"window": dict(self.sums), "window_steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sums, self.steps = dict(state["window"]), int(state["window_steps"])

"""The trainer's extension points, as named events a part reacts to, so that what changes the model or the run at a
point of training (activation checkpointing, freezing, a head warm-up; a phase's end) is a part and not an edit
of the Trainer. The Trainer fires, in order:

- `setup(model)`: the plain model, before it is compiled and before an engine wraps or shards it;
- `step_start(model, step)`: before each optimizer step, `step` the number of steps done;
- `end(model, step)`: after the last step, before the final evaluation.

A part implements the events it needs (the others are no-ops in `Part`). Parts fire in the order they are given.
Whatever a part does must depend on the step alone, so that a resumed run reacts as the uninterrupted one did.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from bertkit.engine.activation_checkpointing import configure_activation_checkpointing
from bertkit.engine.freezing import freeze


class Part:
    """A trainer part: what it does at each event (nothing, unless it says)."""

    def setup(self, model: nn.Module) -> None:
        return None

    def step_start(self, model: nn.Module, step: int) -> None:
        return None

    def end(self, model: nn.Module, step: int) -> None:
        return None


class ActivationCheckpointing(Part):
    """train.activation_checkpointing: recompute every k-th layer (set before compile and sharding)."""

    def __init__(self, every: int) -> None:
        self.every = every

    def setup(self, model: nn.Module) -> None:
        configure_activation_checkpointing(model, self.every)


class Freeze(Part):
    """train.freeze: the named parts never learn in this run (frozen before an engine leaves them out)."""

    def __init__(self, prefixes: list[str]) -> None:
        self.prefixes = prefixes

    def setup(self, model: nn.Module) -> None:
        freeze(model, self.prefixes)


class HeadWarmup(Part):
    """The first `steps` optimizer steps train the parameters under `new` alone (a continued pretraining's new head),
    everything else frozen, then all of them; parameters frozen before the run stay frozen.

    In one process the others stop requiring gradients (no backward through them); an engine that fixed the trainable
    set when it wrapped the model (DDP, FSDP2) is given them to `hold` instead: they compute gradients, which are
    dropped before each update, so the steps are the same."""

    def __init__(self, new: tuple[str, ...], steps: int,
                 hold: Callable[[list[str]], None] | None = None) -> None:  # fmt: skip
        self.new, self.steps, self.hold = new, steps, hold
        self.warming = False
        self.frozen_for_good: set[str] = set()

    def setup(self, model: nn.Module) -> None:
        self.frozen_for_good = {name for name, p in model.named_parameters() if not p.requires_grad}

    def step_start(self, model: nn.Module, step: int) -> None:
        warming = step < self.steps and bool(self.new)
        if warming == self.warming:
            return
        self.warming = warming
        others = [(name, p) for name, p in model.named_parameters()
                  if name not in self.frozen_for_good and not name.startswith(self.new)]  # fmt: skip
        if self.hold is not None:
            self.hold([name for name, _ in others] if warming else [])
            return
        for _, parameter in others:
            parameter.requires_grad_(not warming)


class AtEnd(Part):
    """Calls `action(step)` once the last step is done (a phase's closing checkpoint)."""

    def __init__(self, action: Callable[[int], None]) -> None:
        self.action = action

    def end(self, model: nn.Module, step: int) -> None:
        self.action(step)

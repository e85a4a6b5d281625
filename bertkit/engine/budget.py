"""A run's budget (training seconds or tokens) and how far through it the run is.

The loop asks `progress(spent)` after every step: the learning-rate schedule is laid over it (see
`BudgetScheduler` in bertkit/engine/optim.py) and the run stops at 1. A resumed run continues from the
progress its checkpoint saved; if the budget was changed on resume, the rest of the schedule is stretched
(or squeezed) over what is left of the new budget, so the learning rate continues where it was and never
jumps back up.
"""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.config.schema import parse_budget


@dataclass(frozen=True)
class Budget:
    kind: str  # "seconds" (training time), "tokens" (real tokens, padding excluded) or "flops" (training FLOPs)
    total: float
    # Where this process took the run over: spent and progress at the checkpoint it resumed from.
    anchor_spent: float = 0.0
    anchor_progress: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Budget:
        kind, total = parse_budget(text)
        return cls(kind, total)

    def progress(self, spent: float) -> float:
        """The spent share of the budget, in [0, 1]: spent / total for a run that never changed its budget."""
        left = self.total - self.anchor_spent
        if spent >= self.total or left <= 0:
            return 1.0
        return min(1.0, self.anchor_progress + (spent - self.anchor_spent) / left * (1.0 - self.anchor_progress))

    def resumed(self, spent: float, progress: float) -> Budget:
        return Budget(self.kind, self.total, spent, progress)


def ramped_micro_steps(progress: float, grad_accum: int, ramp: float) -> int:
    """Micro-batches in the step taken at `progress` (a share of the run) under a batch ramp over `ramp` of it.

    The batch grows linearly in whole micro-batches: one at the start, `grad_accum` (the full batch) from
    `ramp x (grad_accum - 1) / grad_accum` on. Cramming ramps its batch the same way (over a share of the
    budget); every rank sees the same progress, so every rank takes the same number of micro-steps."""
    if ramp <= 0 or progress >= ramp:
        return grad_accum
    return 1 + int(progress / ramp * grad_accum)  # progress < ramp: at most grad_accum

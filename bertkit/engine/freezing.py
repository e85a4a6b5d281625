"""Parts of a model that do not learn: train.freeze (named parts, the whole run) and the head warm-up of continued
pretraining (everything but the new head, for its first train.head_warmup_steps steps; bertkit/engine/trainer.py)."""

from __future__ import annotations

from collections.abc import Iterable

from torch import nn

from bertkit.errors import BertkitError


def check_freeze(names: Iterable[str], prefixes: list[str]) -> None:
    """Every train.freeze prefix names some parameter; one line listing the model's parts otherwise."""
    names = list(names)
    for prefix in prefixes:
        if not any(name.startswith(prefix) for name in names):
            parts = sorted({".".join(name.split(".")[:2]) + "." for name in names})
            raise BertkitError(f"train.freeze: no parameter of this model starts with '{prefix}'; its parts: "
                               f"{', '.join(parts[:12])}")  # fmt: skip


def freeze(model: nn.Module, prefixes: list[str]) -> None:
    """Freeze the parameters under `prefixes` (before any engine wraps the model, so it leaves them out)."""
    check_freeze((name for name, _ in model.named_parameters()), prefixes)
    for name, parameter in model.named_parameters():
        if name.startswith(tuple(prefixes)):
            parameter.requires_grad_(False)

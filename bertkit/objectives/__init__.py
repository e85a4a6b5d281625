"""Objectives turn a model's outputs and a batch into (loss, metrics). Models never compute losses."""

from __future__ import annotations

from bertkit.config.schema import ObjectiveConfig
from bertkit.objectives.base import CombinedObjective, Objective
from bertkit.objectives.mlm import MLMObjective
from bertkit.objectives.nsp import NSPObjective
from bertkit.objectives.plm import PLMObjective
from bertkit.objectives.rtd import RTDObjective
from bertkit.objectives.sbo import SBOObjective
from bertkit.objectives.sop import SOPObjective

REGISTRY: dict[str, type[Objective]] = {
    "mlm": MLMObjective,
    "nsp": NSPObjective,
    "sop": SOPObjective,
    "rtd": RTDObjective,
    "sbo": SBOObjective,
    "plm": PLMObjective,
}


def build_objective(cfg: ObjectiveConfig) -> CombinedObjective:
    """The weighted sum of every objective with a weight above 0, run off one forward pass."""
    return CombinedObjective([REGISTRY[name](getattr(cfg, name)) for name in cfg.active])


__all__ = ["REGISTRY", "CombinedObjective", "MLMObjective", "Objective", "build_objective"]

"""The base of every configuration section: unknown keys are errors, so a typo never passes silently, and no
number is infinite or NaN (`--set optim.lr=inf` would otherwise pass a `gt=0` bound)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

"""The base of every configuration section: unknown keys are errors, so a typo never passes silently, no number is
infinite or NaN (`--set optim.lr=inf` would otherwise pass a `gt=0` bound), and no number is given as true/false
(which pydantic would read as 1 or 0: `--set optim.lr=true` a rate of 1.0)."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_not_booleans(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                field = cls.model_fields.get(name)
                if isinstance(value, bool) and field is not None and _is_number(field.annotation):
                    raise ValueError(f"'{name}' takes a number, not {str(value).lower()}")
        return data


def _is_number(annotation: Any) -> bool:
    """int or float, or an optional one."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kinds = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return bool(kinds) and all(kind in (int, float) for kind in kinds)
    return annotation in (int, float)


class ChosenByKey(StrictModel):
    """The base of a section validated as one of several classes, chosen by one of its keys (a model's `family`, a
    task's `kind`): `Base(key=..., ...)` and `Base.model_validate(mapping)` build the chosen class, which pydantic
    then validates. The base says which class a mapping chooses; its subclasses choose nothing."""

    @classmethod
    def chosen_class(cls, data: dict[str, Any]) -> type[ChosenByKey] | None:
        """The class `data` chooses when `cls` is the choosing base; None for a class that is already chosen."""
        return None

    def __new__(cls, *args: Any, **data: Any) -> Any:
        return super().__new__(cls.chosen_class(data) or cls)

    @model_validator(mode="wrap")
    @classmethod
    def _dispatch(cls, data: Any, handler: Any) -> Any:
        chosen = cls.chosen_class(data) if isinstance(data, dict) else None
        if chosen is not None and chosen is not cls:
            return chosen.model_validate(data)
        return handler(data)

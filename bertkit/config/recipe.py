"""Recipes: YAML files validated by pydantic, found by name, overridden with dotted `--set` keys."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError, model_validator

from bertkit.config.schema import (
    DataConfig,
    EngineConfig,
    ModelConfig,
    ObjectiveConfig,
    OptimConfig,
    ScheduleConfig,
    StrictModel,
    TaskConfig,
    TrainConfig,
    check_engine_optimizer,
    check_model_objective,
)
from bertkit.errors import BertkitError

RECIPE_DIR = Path(__file__).resolve().parent.parent / "recipes"


class PretrainRecipe(StrictModel):
    kind: Literal["pretrain"] = "pretrain"
    name: str = "custom"
    description: str = ""
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    objective: ObjectiveConfig = ObjectiveConfig()
    optim: OptimConfig = OptimConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    train: TrainConfig = TrainConfig()
    engine: EngineConfig = EngineConfig()

    @model_validator(mode="after")
    def _model_fits_objective(self) -> PretrainRecipe:
        if self.train.epochs is not None:
            raise ValueError("pretraining counts optimizer steps, not epochs; set train.steps (drop train.epochs)")
        check_model_objective(self.model, self.objective)
        check_engine_optimizer(self.engine, self.optim)
        return self


class FinetuneRecipe(StrictModel):
    kind: Literal["finetune"] = "finetune"
    name: str = "custom"
    description: str = ""
    task: TaskConfig = TaskConfig()
    optim: OptimConfig = OptimConfig(lr=5e-5)
    schedule: ScheduleConfig = ScheduleConfig()
    train: TrainConfig = TrainConfig(epochs=3, batch_size=32)  # the BERT paper's 3 epochs
    engine: EngineConfig = EngineConfig()

    @model_validator(mode="after")
    def _engine_fits_optimizer(self) -> FinetuneRecipe:
        check_engine_optimizer(self.engine, self.optim)
        return self


Recipe = PretrainRecipe | FinetuneRecipe
_KINDS: dict[str, type[StrictModel]] = {"pretrain": PretrainRecipe, "finetune": FinetuneRecipe}


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))


def resolve_recipe_path(name_or_path: str) -> Path:
    """`NAME` finds recipes/NAME.yaml; anything ending in .yaml/.yml or containing a slash is a file."""
    looks_like_path = name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path
    path = Path(name_or_path) if looks_like_path else RECIPE_DIR / f"{name_or_path}.yaml"
    if path.is_file():
        return path
    if looks_like_path:
        raise BertkitError(f"recipe file not found: {name_or_path}")
    hint = difflib.get_close_matches(name_or_path, recipe_names(), n=1)
    suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
    raise BertkitError(
        f"unknown recipe '{name_or_path}'{suggestion}; available: {', '.join(recipe_names())} "
        "(or pass a path to a .yaml file)"
    )


def parse_override(item: str) -> tuple[list[str], Any]:
    """'optim.lr=3e-4' -> (['optim', 'lr'], 0.0003). Values are parsed as YAML scalars/lists."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise BertkitError(f"--set expects KEY=VALUE with a dotted key such as optim.lr=3e-4, got '{item}'")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


# Pairs of keys of which a recipe sets one: a --set of one replaces the other coming from the file.
_EITHER_OR = {("train", "steps"): ("train", "epochs"), ("train", "epochs"): ("train", "steps")}


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply dotted `--set` overrides. Setting train.steps on the command line drops the recipe file's
    train.epochs (and the reverse), so `--set train.steps=30` works on an epoch-based recipe; setting
    both on the command line is still refused by validation."""
    given = {tuple(parse_override(item)[0]) for item in overrides}
    for key, other in _EITHER_OR.items():
        section = raw.get(key[0])
        if key in given and other not in given and isinstance(section, dict):
            section.pop(other[1], None)
    for item in overrides:
        keys, value = parse_override(item)
        node = raw
        for depth, key in enumerate(keys[:-1]):
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            if not isinstance(child, dict):
                raise BertkitError(f"--set {item}: '{'.'.join(keys[: depth + 1])}' is a value, not a section")
            node = child
        node[keys[-1]] = value
    return raw


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The valid field names of the section that `loc` points into, for 'did you mean' messages."""
    current: Any = model
    for part in loc[:-1]:
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        current = fields[part].annotation
    return list(getattr(current, "model_fields", {}).keys())


def format_validation_error(err: ValidationError, model: type[BaseModel], source: str) -> str:
    first = err.errors()[0]
    loc = tuple(first["loc"])
    dotted = ".".join(str(p) for p in loc) or "<root>"
    if first["type"] == "extra_forbidden":
        valid = _fields_at(model, loc)
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
        fix = f"did you mean '{'.'.join([*map(str, loc[:-1]), close[0]])}'?" if close else ""
        return f"{source}: unknown key '{dotted}'; {fix or 'valid keys here: ' + ', '.join(valid)}"
    more = f" (and {len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
    message = first["msg"].removeprefix("Value error, ")  # our validators' own messages say what to fix
    if not loc:  # a check across sections (model vs objective, engine vs optimizer)
        return f"{source}: {message}{more}"
    return f"{source}: bad value for '{dotted}': {message}{more}"


def validate_recipe(raw: dict[str, Any], source: str, kind: str | None = None) -> Recipe:
    kind = kind or raw.get("kind", "pretrain")
    model = _KINDS.get(str(kind))
    if model is None:
        raise BertkitError(f"{source}: 'kind' must be one of {', '.join(_KINDS)}, got '{kind}'")
    try:
        return model.model_validate(raw)  # type: ignore[return-value]
    except ValidationError as err:
        raise BertkitError(format_validation_error(err, model, source)) from None


def load_recipe(name_or_path: str, overrides: list[str] | None = None, kind: str | None = None) -> Recipe:
    """Find, parse, override and validate a recipe; every failure is a one-line BertkitError."""
    path = resolve_recipe_path(name_or_path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise BertkitError(f"recipe {path} is not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise BertkitError(f"recipe {path} must be a YAML mapping of sections (model:, data:, ...)")
    raw.setdefault("name", path.stem)
    recipe = validate_recipe(apply_overrides(raw, overrides or []), f"recipe '{path.stem}'", kind)
    if kind and recipe.kind != kind:
        raise BertkitError(f"recipe '{path.stem}' is a {recipe.kind} recipe; this command needs a {kind} recipe")
    return recipe


def recipe_to_dict(recipe: BaseModel) -> dict[str, Any]:
    return recipe.model_dump(mode="json")

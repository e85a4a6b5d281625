"""Recipes: YAML files validated by pydantic, found by name, overridden with dotted `--set` keys."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from bertkit.config.model import FAMILY_CLASSES, BertConfig, FamilyModelConfig
from bertkit.config.schema import (
    DataConfig,
    DistillConfig,
    EngineConfig,
    ObjectiveConfig,
    OptimConfig,
    ScheduleConfig,
    StrictModel,
    TaskConfig,
    TaskSection,
    TrainConfig,
    check_engine_model,
    check_engine_optimizer,
    check_model_objective,
)
from bertkit.config.task_config import TASK_CONFIG_CLASSES
from bertkit.config.task_kinds import SPECS, kinds_that
from bertkit.config.track import TrackConfig
from bertkit.errors import BertkitError

RECIPE_DIR = Path(__file__).resolve().parent.parent / "recipes"


def _tensorboard_from_track(recipe: Any) -> None:
    """track.report_to=tensorboard is engine.tensorboard=true: the loop writes the event files either way."""
    if "tensorboard" in recipe.track.report_to and not recipe.engine.tensorboard:
        recipe.engine.tensorboard = True


class PhaseConfig(StrictModel):
    """One phase of a phased pretraining (a recipe's `phases:`): the phase before it (the first: the recipe) with
    its own overrides, run from the state the phase before it ended in."""

    # Names the phase (its run directory is RUN/phases/NN-NAME): letters, digits, '_' or '-'.
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
    # The corpus it trains on: a name given as `--corpus NAME=DIR`; None: the phase before it's (the first: the
    # recipe's data.train).
    corpus: str | None = None
    # The decay alone from the last phase's state (its weights, optimizer state and, on its corpus, data order):
    # from the peak rate to schedule.min_lr_ratio in the recipe's decay shape over this phase's steps or budget.
    decay: bool = False
    # Recipe overrides for this phase, as --set takes them: its length (train.steps=N or train.budget=2h), rate
    # (optim.lr, schedule.*), masking (data.masking.prob) and what a phase may change of the model (its positions,
    # ModernBERT's rotary bases and local window, dropout). A phase that changes the model starts from the last
    # phase's weights with a fresh optimizer state; one that does not continues its optimizer state.
    set: list[str] = Field(default_factory=list)


class PretrainRecipe(StrictModel):
    # What the recipe trains: pretrain, finetune or distill (each kind accepts its own sections).
    kind: Literal["pretrain"] = "pretrain"
    # The recipe's name; left out, the file name (the default experiment name of trackers).
    name: str = "custom"
    # One line on what the recipe is (shown by `bertkit recipes list`).
    description: str = ""
    # A recipe that continues a checkpoint (continue-mlm): pretrain refuses to run it without --init-from, whose
    # checkpoint gives the model section.
    init_from_required: bool = Field(False, description="the recipe continues a checkpoint given with --init-from")
    model: FamilyModelConfig = Field(default_factory=BertConfig)
    data: DataConfig = DataConfig()
    objective: ObjectiveConfig = ObjectiveConfig()
    optim: OptimConfig = OptimConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    train: TrainConfig = TrainConfig()
    engine: EngineConfig = EngineConfig()
    track: TrackConfig = TrackConfig()
    # Pretraining in phases (bertkit/pipelines/phases.py): the recipe above, then each phase's own overrides, run in
    # order in one run directory; empty: one phase, the recipe as it is.
    phases: list[PhaseConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _phases_are_distinct(self) -> PretrainRecipe:
        names = [phase.name for phase in self.phases]
        if len(set(names)) != len(names):
            raise ValueError("two phases share a name; give each phase its own")
        if self.phases and self.phases[0].decay:
            raise ValueError(f"phase '{names[0]}' decays, but it is the first phase: a decay continues a phase")
        for phase in self.phases:
            for item in phase.set:
                key = item.partition("=")[0].strip()
                if key.startswith(("phases", "data.train", "kind", "name")):
                    raise ValueError(f"phase '{phase.name}': set '{item}' is not a phase setting (a phase's corpus is "
                                     "its `corpus:`, named with --corpus NAME=DIR)")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _model_fits_objective(self) -> PretrainRecipe:
        _tensorboard_from_track(self)
        if self.train.epochs is not None:
            raise ValueError("pretraining counts optimizer steps, not epochs; set train.steps (drop train.epochs)")
        check_model_objective(self.model, self.objective)
        check_engine_optimizer(self.engine, self.optim)
        check_engine_model(self.engine, self.model)
        return self


class FinetuneRecipe(StrictModel):
    # What the recipe trains: pretrain, finetune or distill (each kind accepts its own sections).
    kind: Literal["finetune"] = "finetune"
    # The recipe's name; left out, the file name (the default experiment name of trackers).
    name: str = "custom"
    # One line on what the recipe is (shown by `bertkit recipes list`).
    description: str = ""
    task: TaskSection = Field(default_factory=TaskConfig)
    optim: OptimConfig = OptimConfig(lr=5e-5)
    schedule: ScheduleConfig = ScheduleConfig()
    train: TrainConfig = TrainConfig(epochs=3, batch_size=32)  # the BERT paper's 3 epochs
    engine: EngineConfig = EngineConfig()
    track: TrackConfig = TrackConfig()

    @model_validator(mode="after")
    def _engine_fits_optimizer(self) -> FinetuneRecipe:
        _tensorboard_from_track(self)
        check_engine_optimizer(self.engine, self.optim)
        return self


class DistillRecipe(StrictModel):
    """A student (model), its data and training, and how it learns from the teacher (distill). Built from a
    student's pretrain recipe (`--student tinybert-4`) with a `distill` section, or read as is."""

    # What the recipe trains: pretrain, finetune or distill (each kind accepts its own sections).
    kind: Literal["distill"] = "distill"
    # The recipe's name; left out, the file name (the default experiment name of trackers).
    name: str = "custom"
    # One line on what the recipe is (shown by `bertkit recipes list`).
    description: str = ""
    model: FamilyModelConfig = Field(default_factory=BertConfig)
    data: DataConfig = DataConfig()
    distill: DistillConfig = DistillConfig()
    task: TaskSection = Field(default_factory=TaskConfig)  # the labelled data of the task stage
    optim: OptimConfig = OptimConfig(lr=5e-4)
    schedule: ScheduleConfig = ScheduleConfig()
    train: TrainConfig = TrainConfig()
    engine: EngineConfig = EngineConfig()
    track: TrackConfig = TrackConfig()

    @model_validator(mode="after")
    def _engine_fits_optimizer(self) -> DistillRecipe:
        _tensorboard_from_track(self)
        check_engine_optimizer(self.engine, self.optim)
        check_engine_model(self.engine, self.model)
        return self


Recipe = PretrainRecipe | FinetuneRecipe | DistillRecipe
_KINDS: dict[str, type[StrictModel]] = {
    "pretrain": PretrainRecipe,
    "finetune": FinetuneRecipe,
    "distill": DistillRecipe,
}


TASK_KINDS: tuple[str, ...] = tuple(SPECS)
DEFAULT_FOR = ("finetune", "distill")


def default_recipe(command: str, task: str | None = None) -> str:
    """The recipe a command runs when no --recipe is given: `finetune` the standard recipe of its --task
    (finetune-KIND, finetune-classification without one); `distill` the task stage's for a teacher of that kind,
    distill-task for classifiers, distill-task-KIND for taggers and QA models (the general stage is built from
    --student instead). `bertkit recipes show --for COMMAND [--task KIND]` shows it."""
    if command == "finetune":
        kind = task or TASK_KINDS[0]
        if kind not in TASK_KINDS:
            raise BertkitError(f"--task '{kind}' is not a task bertkit fine-tunes; use one of {', '.join(TASK_KINDS)}")
        return f"finetune-{kind}"
    if command == "distill":
        recipe = SPECS[task].distill_recipe if task in SPECS else None
        if task is None or recipe is not None:
            return recipe or "distill-task"
        raise BertkitError(
            f"the distillation task stage distils {', '.join(kinds_that('distill_recipe'))}, not --task {task}"
        )
    if command == "pretrain":
        raise BertkitError("pretrain has no default recipe: --recipe is required (see `bertkit recipes list`)")
    raise BertkitError(f"--for takes {' or '.join(DEFAULT_FOR)} (the commands with a default recipe), not '{command}'")


def recipe_names() -> list[str]:
    return shipped_names(RECIPE_DIR)


def shipped_names(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.yaml"))


def resolve_recipe_path(name_or_path: str) -> Path:
    return resolve_yaml(name_or_path, RECIPE_DIR, "recipe", "available")


def resolve_yaml(name_or_path: str, folder: Path, what: str, listed: str) -> Path:
    """`NAME` finds FOLDER/NAME.yaml (a shipped recipe or suite); anything ending in .yaml/.yml or containing a slash
    is a file. A shipped name that does not exist gets a did-you-mean and the list."""
    looks_like_path = name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path
    path = Path(name_or_path) if looks_like_path else folder / f"{name_or_path}.yaml"
    if path.is_file():
        return path
    if looks_like_path:
        raise BertkitError(f"{what} file not found: {name_or_path}")
    names = shipped_names(folder)
    hint = difflib.get_close_matches(name_or_path, names, n=1)
    suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
    raise BertkitError(
        f"unknown {what} '{name_or_path}'{suggestion}; {listed}: {', '.join(names)} (or pass a path to a .yaml file)"
    )


def parse_override(item: str) -> tuple[list[str], Any]:
    """'optim.lr=3e-4' -> (['optim', 'lr'], 0.0003). Values are parsed as YAML scalars/lists."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise BertkitError(f"--set expects KEY=VALUE with a dotted key such as optim.lr=3e-4, got '{item}'")
    if not raw.strip():  # `--set train.steps=$STEPS` with STEPS unset: never the schema's default in silence
        raise BertkitError(f"--set {item} has no value after '='; give one, or {key.strip()}=null to unset the key")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


def override_keys(overrides: list[str], section: str) -> set[str]:
    """The keys of `section` that `--set` overrides name: ['model.num_layers=4'] -> {'num_layers'}."""
    keys = (parse_override(item)[0] for item in overrides)
    return {path[1] for path in keys if len(path) > 1 and path[0] == section}


# Pairs of keys of which a recipe sets one: a --set of one replaces the other coming from the file.
_EITHER_OR = {
    ("train", "steps"): ("train", "epochs"),
    ("train", "epochs"): ("train", "steps"),
    ("schedule", "warmup_steps"): ("schedule", "warmup_fraction"),
    ("schedule", "warmup_fraction"): ("schedule", "warmup_steps"),
}


def _drop_replaced(raw: dict[str, Any], given: set[tuple[str, ...]]) -> None:
    """Of each pair in _EITHER_OR of which `given` sets one key (and not the other), drop the other from `raw`:
    what is set later replaces the earlier choice rather than contradicting it."""
    for key, other in _EITHER_OR.items():
        section = raw.get(key[0])
        if key in given and other not in given and isinstance(section, dict):
            section.pop(other[1], None)


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply dotted `--set` overrides. Setting train.steps on the command line drops the recipe file's
    train.epochs (and the reverse), so `--set train.steps=30` works on an epoch-based recipe, and likewise
    schedule.warmup_steps and schedule.warmup_fraction; setting both on the command line is still refused
    by validation."""
    _drop_replaced(raw, {tuple(parse_override(item)[0]) for item in overrides})
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
        if isinstance(part, int):  # an item of a list (a suite's tasks): the list's item type has the fields
            continue
        if isinstance(part, str) and not hasattr(current, "model_fields"):  # a section's class, by its tag
            tagged = next((classes[part] for classes in _TAGGED_SECTIONS.values() if part in classes), None)
            if tagged is not None:
                current = tagged
                continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        current = _model_in(fields[part].annotation)
    return list(getattr(current, "model_fields", {}).keys())


def _model_in(annotation: Any) -> Any:
    """The pydantic model inside `X`, `X | None` or `list[X]` (else the annotation itself)."""
    for arg in (annotation, *get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return annotation


# The sections validated as one of several classes, by a tag: the model's family, the task's kind.
_TAGGED_SECTIONS: dict[str, dict[str, Any]] = {"model": FAMILY_CLASSES, "task": TASK_CONFIG_CLASSES}


def _without_tags(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """pydantic names the class a tagged section was validated as after the section ('model', 'bert', 'x'; 'task',
    'retrieval', 'x'); the key a user writes is model.x, task.x."""
    return tuple(p for i, p in enumerate(loc)
                 if not (i and p in _TAGGED_SECTIONS.get(str(loc[i - 1]), ())))  # fmt: skip


def format_validation_error(err: ValidationError, model: type[BaseModel], source: str) -> str:
    first = err.errors()[0]
    tagged = tuple(first["loc"])
    loc = _without_tags(tagged)
    dotted = ".".join(str(p) for p in loc) or "<root>"
    if first["type"] == "extra_forbidden":
        valid = _fields_at(model, tagged)
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
        fix = f"did you mean '{'.'.join([*map(str, loc[:-1]), close[0]])}'?" if close else ""
        return f"{source}: unknown key '{dotted}'; {fix or 'valid keys here: ' + ', '.join(valid)}"
    more = f" (and {len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
    message = first["msg"].removeprefix("Value error, ")  # our validators' own messages say what to fix
    if not loc or message.startswith(f"{dotted}."):  # a check across sections, or one that names its key
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


def _read_yaml(name_or_path: str) -> tuple[Path, dict[str, Any]]:
    path = resolve_recipe_path(name_or_path)
    return path, read_yaml_mapping(path, "recipe", "of sections (model:, data:, ...)")


def read_yaml_mapping(path: Path, what: str, shape: str) -> dict[str, Any]:
    """A recipe's or suite's YAML file as a mapping; bad YAML or another shape is a one-line BertkitError."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise BertkitError(f"{what} {path} is not valid YAML: {str(err).splitlines()[0]}") from None
    if raw is None:  # nothing but comments or blank lines: every value would be a default, none the user's
        raise BertkitError(f"{what} {path} is empty; it must be a YAML mapping {shape}")
    if not isinstance(raw, dict):
        raise BertkitError(f"{what} {path} must be a YAML mapping {shape}")
    return raw


def load_recipe(name_or_path: str, overrides: list[str] | None = None, kind: str | None = None) -> Recipe:
    """Find, parse, override and validate a recipe; every failure is a one-line BertkitError."""
    path, raw = _read_yaml(name_or_path)
    raw.setdefault("name", path.stem)
    recipe = validate_recipe(apply_overrides(raw, overrides or []), f"recipe '{path.stem}'", kind)
    if kind and recipe.kind != kind:
        raise BertkitError(f"recipe '{path.stem}' is a {recipe.kind} recipe; this command needs a {kind} recipe")
    return recipe


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def load_distill_recipe(student: str | None, recipe: str | None, overrides: list[str] | None = None,
                        task_kind: str | None = None) -> DistillRecipe:  # fmt: skip
    """A distill recipe from a student's pretrain recipe (its model, data, optim, schedule, train and
    engine; its objective gives way to `distill`), with a distill recipe's sections merged over it and
    then the --set overrides. Either may be absent (a student directory brings its own model). `task_kind`:
    the task section's kind when the recipe names none (the task stage's teacher's)."""
    raw: dict[str, Any] = {}
    names = []
    if student is not None:
        path, student_raw = _read_yaml(student)
        kind = student_raw.get("kind", "pretrain")
        if kind != "pretrain":
            raise BertkitError(
                f"--student {student} is a {kind} recipe; a student is a pretrain recipe such as tinybert-4"
            )
        student_raw.pop("objective", None)
        raw = _merge(raw, student_raw)
        names.append(path.stem)
    if recipe is not None:
        path, recipe_raw = _read_yaml(recipe)
        if recipe_raw.get("kind", "distill") != "distill":
            raise BertkitError(f"--recipe {recipe} is a {recipe_raw['kind']} recipe; distill takes a distill recipe")
        # e.g. a distill recipe's schedule.warmup_fraction replaces the student recipe's warmup_steps
        sections = {part: body for part, body in recipe_raw.items() if isinstance(body, dict)}
        _drop_replaced(raw, {(part, key) for part, body in sections.items() for key in body})
        raw = _merge(raw, recipe_raw)
        names.append(path.stem)
    raw.update(kind="distill", name="+".join(names) or "custom")
    if task_kind is not None and isinstance(raw.setdefault("task", {}), dict):
        raw["task"].setdefault("kind", task_kind)
    source = f"recipe '{raw['name']}'"
    return validate_recipe(apply_overrides(raw, overrides or []), source, "distill")  # type: ignore[return-value]


def recipe_to_dict(recipe: BaseModel) -> dict[str, Any]:
    return recipe.model_dump(mode="json")

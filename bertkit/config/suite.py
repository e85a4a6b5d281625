"""Evaluation suites: YAML files (shipped ones under bertkit/suites/, or a user's own) validated by pydantic.

A suite names its tasks; each task is fine-tuned once per (learning rate, seed) cell, and the report picks the
rate by the mean over seeds on the dev set. Suite-level `seeds`, `lrs` and `epochs` are defaults that a task may
override; `probe:` gives the settings of `bertkit evaluate --probe` (a frozen encoder and a linear head).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from bertkit.config.recipe import format_validation_error, read_yaml_mapping, resolve_yaml, shipped_names
from bertkit.config.schema import (
    LOWER_IS_BETTER,
    SEED_LIMIT,
    TASK_METRICS,
    StrictModel,
    TaskKindName,
    task_field_applies,
)
from bertkit.config.task_kinds import SPECS, kinds_that
from bertkit.errors import BertkitError

SUITE_DIR = Path(__file__).resolve().parent.parent / "suites"
TaskKind = TaskKindName
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def lower_is_better(metric: str) -> bool:
    """MSE, and an extra dev set's MSE (mm_mse): never averaged into a score."""
    return metric in LOWER_IS_BETTER or metric.rpartition("_")[2] in LOWER_IS_BETTER


class ProbeSettings(StrictModel):
    """What `--probe` changes: the encoder is frozen and only a linear head learns. By default the head is fitted to
    convergence by L-BFGS on features computed once (SentEval's protocol: no rate, no epochs, one cell a seed);
    `solver: optimizer` trains it with the recipe's optimizer instead, over its own rates and epochs (a head alone
    wants a higher rate and more passes than full fine-tuning)."""

    # lbfgs: a regularised linear model fitted to its optimum (bertkit/tasks/probe.py); optimizer: the loop's.
    solver: Literal["lbfgs", "optimizer"] = "lbfgs"
    # With solver optimizer: the learning-rate grid of the head; None: the suite's (or task's) `lrs`.
    lrs: list[float] | None = None
    # With solver optimizer: epochs of head training; None: the suite's (or task's) `epochs`.
    epochs: int | None = Field(None, gt=0)
    # Recipe overrides (dotted keys, as `--set`) for probe cells, after the task's own `set`.
    set: list[str] = Field(default_factory=list)

    @field_validator("lrs")
    @classmethod
    def _positive_rates(cls, lrs: list[float] | None) -> list[float] | None:
        return _check_rates(lrs) if lrs is not None else None


class SuiteTask(StrictModel):
    """One downstream task: files, fields, what ranks the cells, and its grid."""

    # Names the task in the report and in its cells' directories (letters, digits, '.', '_', '-').
    name: str
    # The `bertkit finetune --task` kind.
    kind: TaskKind  # type: ignore[valid-type]
    # Training and dev files (or datasets directories), relative to `--data` (default: the suite file's folder).
    # Without `train`, a retrieval or similarity task scores each model as it is (MTEB's zero-shot protocol).
    train: str | None = None
    eval: str
    # More dev sets the fine-tuned model is scored on, by name (MNLI's mismatched dev set); their metrics are
    # reported as NAME_METRIC. Sequence-level kinds only.
    extra_eval: dict[str, str] = Field(default_factory=dict)
    # Field names, as `bertkit finetune` calls them; None: the kind's recipe default.
    text_field: str | None = None
    text_pair_field: str | None = None
    label_field: str | None = None
    # The metric that picks the rate and ranks the cells; None: the kind's first (accuracy, pearson, f1...).
    metric: str | None = None
    # The metrics whose mean is the task's score in the suite average (GLUE averages MRPC's F1 and accuracy);
    # None: `metric` alone.
    score: list[str] | None = None
    # The fine-tuning recipe each cell starts from; None: the kind's standard one (finetune-KIND).
    recipe: str | None = None
    # Overrides of the suite's defaults.
    seeds: list[int] | None = None
    lrs: list[float] | None = None
    epochs: int | None = Field(None, gt=0)
    # Recipe overrides (dotted keys, as `--set`): task.max_seq_len=256, train.batch_size=16...
    set: list[str] = Field(default_factory=list)
    # Start from this earlier task's best model (its chosen rate, its best seed) instead of the model under
    # evaluation, with a fresh head: as RTE, MRPC and STS-B start from MNLI in ModernBERT's and MosaicBERT's GLUE.
    warm_start: str | None = None
    # Probe-mode settings of this task, over the suite's `probe:`.
    probe: ProbeSettings | None = None

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        if not _NAME.match(name):
            raise ValueError(f"'{name}' must be letters, digits, '.', '_' or '-' (it names a directory)")
        return name

    @field_validator("lrs")
    @classmethod
    def _positive_rates(cls, lrs: list[float] | None) -> list[float] | None:
        return _check_rates(lrs) if lrs is not None else None

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: list[int] | None) -> list[int] | None:
        return _check_seeds(seeds) if seeds is not None else None

    @model_validator(mode="after")
    def _metrics_fit_kind(self) -> SuiteTask:
        valid = TASK_METRICS[self.kind]
        if self.metric is not None and self.metric not in valid:
            raise ValueError(f"metric '{self.metric}' is not a {self.kind} metric; use one of {', '.join(valid)}")
        if self.extra_eval and not SPECS[self.kind].extra_eval:
            raise ValueError(f"extra_eval applies to {', '.join(kinds_that('extra_eval'))} tasks, not {self.kind}")
        for name in self.extra_eval:
            if not _NAME.match(name):
                raise ValueError(f"extra_eval name '{name}' must be letters, digits, '.', '_' or '-'")
        reported = self.reported_metrics
        for metric in self.score or []:
            if metric not in reported:
                raise ValueError(
                    f"score metric '{metric}' is not reported for this task; use any of {', '.join(reported)}"
                )
        for metric in self.score_metrics:
            if lower_is_better(metric):
                raise ValueError(
                    f"score metric '{metric}' is lower-is-better and cannot be averaged with scores; give the task a "
                    "`score:` of higher-is-better metrics (e.g. [pearson, spearman])"
                )
        own_keys = ("task.kind", "task.metric", "task.text_field", "task.text_pair_field", "task.label_field")
        for item in self.set:
            key = item.partition("=")[0].strip()
            if key in own_keys:
                raise ValueError(f"set '{item}': give '{key.removeprefix('task.')}' as the task's own key instead")
        return self

    @property
    def reported_metrics(self) -> list[str]:
        """The metric names this task's cells report: the kind's, and each extra dev set's as NAME_METRIC."""
        valid = TASK_METRICS[self.kind]
        return [*valid, *(f"{extra}_{metric}" for extra in self.extra_eval for metric in valid)]

    @property
    def rank_metric(self) -> str:
        return self.metric or TASK_METRICS[self.kind][0]

    @property
    def score_metrics(self) -> list[str]:
        return self.score or [self.rank_metric]


class Suite(StrictModel):
    """A downstream suite: defaults for every task, then the tasks in the order they run."""

    name: str
    description: str = ""
    # Seeds of every (task, rate): the report gives the mean, standard deviation and median over them.
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2])
    # The learning-rate grid; the rate with the best mean over seeds on dev is reported.
    lrs: list[float] = Field(default_factory=lambda: [5e-5])
    # Epochs of fine-tuning; None: each task's recipe decides.
    epochs: int | None = Field(None, gt=0)
    # Recipe overrides for every task (dotted keys, as `--set`), before each task's own.
    set: list[str] = Field(default_factory=list)
    probe: ProbeSettings = Field(default_factory=ProbeSettings)
    tasks: list[SuiteTask] = Field(min_length=1)

    @field_validator("lrs")
    @classmethod
    def _positive_rates(cls, lrs: list[float]) -> list[float]:
        return _check_rates(lrs)

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: list[int]) -> list[int]:
        return _check_seeds(seeds)

    @model_validator(mode="after")
    def _tasks_in_order(self) -> Suite:
        seen: list[str] = []
        for task in self.tasks:
            if task.name in seen:
                raise ValueError(f"two tasks are named '{task.name}'; task names must be unique")
            if task.warm_start is not None and task.warm_start not in seen:
                where = "runs after it" if task.warm_start in {t.name for t in self.tasks} else "is not in the suite"
                raise ValueError(
                    f"task '{task.name}' warm-starts from '{task.warm_start}', which {where}; a warm start comes "
                    "from a task listed before it"
                )
            seen.append(task.name)
        for task in self.tasks:
            own = task.probe
            if own is not None and (own.lrs or own.epochs) and self.probe_solver(task) == "lbfgs":
                raise ValueError(
                    f"task '{task.name}': probe lrs and epochs train the head with the optimizer, but "
                    "its probe is fitted by L-BFGS; add `solver: optimizer` to its probe, or remove them"
                )
        shared = self.probe
        if (shared.lrs or shared.epochs) and all(self.probe_solver(task) == "lbfgs" for task in self.tasks):
            raise ValueError(
                "probe lrs and epochs train the head with the optimizer, but the probe is fitted by "
                "L-BFGS (solver lbfgs, the default); add `solver: optimizer` to `probe:`, or remove them"
            )
        return self

    def probe_solver(self, task: SuiteTask) -> str:
        """How `task`'s probe head is trained: the task's own `probe: solver`, else the suite's."""
        if task.probe is not None and "solver" in task.probe.model_fields_set:
            return task.probe.solver
        return self.probe.solver

    def grid(self, task: SuiteTask, probe: bool) -> tuple[list[float], list[int], int | None, list[str]]:
        """(rates, seeds, epochs, overrides) of `task`'s cells in this mode."""
        lrs, epochs = task.lrs or self.lrs, task.epochs or self.epochs
        # The suite's own settings go to the tasks whose kind reads them (a suite-wide task.pool leaves taggers
        # alone); a task's own settings are its own, and a key its kind does not read is refused.
        overrides = [*_for_kind(self.set, task.kind), *task.set]
        if probe:
            for settings, shared in ((self.probe, True), (task.probe, False)):
                if settings is not None:
                    lrs, epochs = settings.lrs or lrs, settings.epochs or epochs
                    overrides += _for_kind(settings.set, task.kind) if shared else settings.set
            if self.probe_solver(task) == "lbfgs":  # no rate and no epochs: one cell a seed, at the first rate
                lrs, epochs = lrs[:1], None
            else:
                overrides.append("task.head_solver=optimizer")
        return lrs, task.seeds or self.seeds, epochs, overrides

    def with_rates(self, lrs: list[float], probe: bool) -> Suite:
        """This suite with `lrs` as every task's rate grid in one mode (`bertkit evaluate --lrs`): the probe's with
        `probe`, full fine-tuning's without; the other mode's rates stay as they are."""
        if probe:
            if all(self.probe_solver(task) == "lbfgs" for task in self.tasks):
                raise BertkitError(
                    f"--lrs with --probe sets the rates of a probe head trained by the optimizer, but suite "
                    f"'{self.name}' fits its probe heads by L-BFGS, without a rate; leave --lrs out, or give the suite "
                    "`probe: {solver: optimizer}`"
                )
            tasks = [t.model_copy(update={"probe": t.probe.model_copy(update={"lrs": None})}) if t.probe else t
                     for t in self.tasks]  # fmt: skip
            return self.model_copy(update={"probe": self.probe.model_copy(update={"lrs": list(lrs)}), "tasks": tasks})
        tasks = []
        for task in self.tasks:  # a probe without rates of its own falls back on the full rates: pin it first
            settings = task.probe or ProbeSettings()
            pinned = settings.model_copy(update={"lrs": self.grid(task, probe=True)[0]})
            tasks.append(task.model_copy(update={"lrs": None, "probe": pinned}))
        return self.model_copy(update={"lrs": list(lrs), "tasks": tasks})

    def with_seeds(self, seeds: list[int]) -> Suite:
        """This suite with `seeds` as every task's seeds (`bertkit evaluate --seeds`), a task's own notwithstanding."""
        tasks = [task.model_copy(update={"seeds": None}) for task in self.tasks]
        return self.model_copy(update={"seeds": list(seeds), "tasks": tasks})

    def with_tasks(self, names: list[str]) -> Suite:
        """This suite cut to the tasks `names` (`bertkit evaluate --tasks`), in the suite's order; a one-line
        BertkitError for a name the suite lacks, or a task whose warm start is left out."""
        given = ",".join(names)
        if not names or "" in names or len(set(names)) != len(names):
            raise BertkitError(f"--tasks '{given}': give task names of the suite, each once, separated by commas")
        known = [task.name for task in self.tasks]
        for name in names:
            if name not in known:
                raise BertkitError(f"--tasks: suite '{self.name}' has no task '{name}'; its tasks: {', '.join(known)}")
        tasks = [task for task in self.tasks if task.name in names]
        for task in tasks:
            if task.warm_start is not None and task.warm_start not in names:
                raise BertkitError(
                    f"--tasks: task '{task.name}' warm-starts from '{task.warm_start}'; add {task.warm_start} to "
                    "--tasks (it runs first)"
                )
        return self.model_copy(update={"tasks": tasks})

    def task(self, name: str) -> SuiteTask:
        return next(task for task in self.tasks if task.name == name)


def _for_kind(overrides: list[str], kind: str) -> list[str]:
    """The dotted overrides that a `kind` task reads: every non-task key, and the task keys of its kind."""
    kept = []
    for item in overrides:
        section, _, rest = item.partition("=")[0].strip().partition(".")
        if section != "task" or task_field_applies(rest.split(".")[0], kind):
            kept.append(item)
    return kept


def _check_rates(lrs: list[float]) -> list[float]:
    if not lrs or any(not 0 < lr < math.inf for lr in lrs):  # NaN fails both comparisons
        raise ValueError("give at least one learning rate, each a finite number above 0 (e.g. [2e-5, 5e-5])")
    if len(set(lrs)) != len(lrs):
        raise ValueError("give each learning rate once (two equal rates would be the same cells)")
    return lrs


def parse_rates(text: str) -> list[float]:
    """`--lrs 5e-5,1e-4,3e-4`: the rates, checked as a suite's `lrs:` is; a one-line BertkitError otherwise."""
    try:
        rates = [float(item) for item in text.split(",")]  # an empty item is refused too ("1e-4,,3e-4")
    except ValueError:
        rates = []
    return check_rate_option(rates, text)


def check_rate_option(lrs: list[float] | tuple[float, ...], text: str | None = None) -> list[float]:
    """The rates of `--lrs` (`text` as written on the command line), or a one-line BertkitError on how to write them."""
    try:
        return _check_rates(list(lrs))
    except ValueError:
        given = text if text is not None else ",".join(f"{lr:g}" for lr in lrs)
        raise BertkitError(
            f"--lrs '{given}': give finite learning rates above 0, each once, separated by commas (e.g. 5e-5,1e-4,3e-4)"
        ) from None


def parse_seeds(text: str) -> list[int]:
    """`--seeds 0,1,2,3,4`: the seeds, checked as a suite's `seeds:` is; a one-line BertkitError otherwise."""
    try:
        seeds = [int(item) for item in text.split(",")]
    except ValueError:
        seeds = []
    return check_seed_option(seeds, text)


def check_seed_option(seeds: list[int] | tuple[int, ...], text: str | None = None) -> list[int]:
    """The seeds of `--seeds` (`text` as written on the command line), or a one-line BertkitError."""
    try:
        return _check_seeds(list(seeds))
    except ValueError:
        given = text if text is not None else ",".join(map(str, seeds))
        raise BertkitError(
            f"--seeds '{given}': give whole-number seeds from 0 to 2^63-1, each once, separated by commas (e.g. 0,1,2)"
        ) from None


def parse_names(text: str) -> list[str]:
    """`--tasks sentiment,ner`: the names as written (blanks around a comma dropped); checked by `Suite.with_tasks`."""
    return [item.strip() for item in text.split(",")]


def _check_seeds(seeds: list[int]) -> list[int]:
    if not seeds or len(set(seeds)) != len(seeds) or not all(0 <= seed < SEED_LIMIT for seed in seeds):
        raise ValueError("give at least one seed, each once, from 0 to 2^63-1 (e.g. [0, 1, 2])")
    return seeds


def suite_names() -> list[str]:
    return shipped_names(SUITE_DIR)


def resolve_suite_path(name_or_path: str) -> Path:
    """`NAME` finds bertkit/suites/NAME.yaml; anything ending in .yaml/.yml or holding a slash is a file."""
    return resolve_yaml(name_or_path, SUITE_DIR, "suite", "shipped")


def load_suite(name_or_path: str) -> tuple[Suite, Path]:
    """The validated suite and its file; every failure is a one-line BertkitError."""
    path = resolve_suite_path(name_or_path)
    raw = read_yaml_mapping(path, "suite", "(name:, tasks:, ...)")
    raw.setdefault("name", path.stem)
    return validate_suite(raw, f"suite '{raw['name']}'"), path


def validate_suite(raw: dict[str, Any], source: str) -> Suite:
    try:
        return Suite.model_validate(raw)
    except ValidationError as err:
        loc = err.errors()[0]["loc"]
        tasks = raw.get("tasks")
        # Name the task an error is in: "tasks.2 (mrpc)" reads better than an index alone.
        if len(loc) > 1 and loc[0] == "tasks" and isinstance(loc[1], int) and isinstance(tasks, list):
            entry = tasks[loc[1]] if loc[1] < len(tasks) else None
            if isinstance(entry, dict) and entry.get("name"):
                source = f"{source}, task '{entry['name']}'"
        raise BertkitError(format_validation_error(err, Suite, source)) from None

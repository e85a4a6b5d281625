"""`bertkit evaluate`: models x a suite's tasks x rates x seeds, each a cell (bertkit/pipelines/evaluate/cells.py),
then the table (aggregate.py) and the report files (report.py).

Order matters, as in every bertkit command: the suite, every model and every task file are read and checked
before the output directory is created, so bad input leaves nothing. The plan (suite, models, mode, data, and what
`--lrs`, `--seeds` and `--tasks` changed) is written first; `--resume` accepts only the same plan and runs only the
cells without a result. Tasks run in waves: a task that warm-starts from another runs once that task's cells are all
done, from the weights of its best cell.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bertkit.config.recipe import default_recipe, load_recipe
from bertkit.config.schema import StrictModel
from bertkit.config.suite import (
    SUITE_DIR,
    Suite,
    SuiteTask,
    check_rate_option,
    check_seed_option,
    load_suite,
    lower_is_better,
)
from bertkit.config.task_kinds import SPECS, kinds_that
from bertkit.config.track import TRACKERS, TrackConfig
from bertkit.errors import BertkitError
from bertkit.fsutil import check_output_dir, hash_file_into, read_json, write_json_atomic
from bertkit.pipelines.evaluate.aggregate import PROTOCOL, summarize_model, summarize_task
from bertkit.pipelines.evaluate.cells import CellSpec, cell_name, init_worker, read_result, run_cell
from bertkit.progress import Tracker

PLAN = "plan.json"
CELLS = "cells"
REPORT_JSON = "report.json"


@dataclass(frozen=True)
class EvaluateOptions:
    probe: bool = False
    jobs: int = 1
    devices: tuple[str, ...] = ()
    resume: str | None = None  # "last": an evaluation must be in the output; "auto": resume one if there is one
    overwrite: bool = False
    quiet: bool = False
    report_to: tuple[str, ...] = ()  # trackers: one parent run with the table; cells run here nest under it
    lrs: tuple[float, ...] = ()  # every task's rate grid in this mode, in place of the suite's; (): the suite's
    seeds: tuple[int, ...] = ()  # every task's seeds, in place of the suite's; (): the suite's
    tasks: tuple[str, ...] = ()  # the suite's tasks to run (in the suite's order); (): all of them


class EvaluationRecord(StrictModel):
    """What a tracker records of an evaluation: its parameters are the suite and mode, as a run's are its recipe."""

    kind: str = "evaluate"
    name: str
    mode: str
    suite: dict[str, Any]  # tasks by name, so each setting is one short parameter (suite.tasks.rte.lrs)
    models: dict[str, str]
    track: TrackConfig


def model_keys(models: list[str]) -> dict[str, str]:
    """A short directory name per model as given on the command line: m0-NAME, m1-NAME..., NAME its last part
    (a pretraining snapshot RUN/snapshots/step-N is RUN-step-N)."""
    keys = {}
    for i, spec in enumerate(models):
        parts = [p for p in re.split(r"[\\/]+", spec.rstrip("/\\")) if p not in ("", ".", "model")] or ["model"]
        snapshot = len(parts) > 2 and parts[-2] == "snapshots" and parts[-1].startswith("step-")
        name = f"{parts[-3]}-{parts[-1]}" if snapshot else parts[-1]
        keys[spec] = f"m{i}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)[:40]}"
    if len(keys) != len(models):
        raise BertkitError("a model is given twice; give each --model once")
    return keys


def _task_recipe(task: SuiteTask) -> str:
    return task.recipe or default_recipe("finetune", task.kind)


def _overrides(suite: Suite, task: SuiteTask, lr: float, seed: int, probe: bool) -> list[str]:
    _, _, epochs, extra = suite.grid(task, probe)
    out = [f"task.kind={task.kind}"]
    for key in ("text_field", "text_pair_field", "label_field"):
        if getattr(task, key) is not None:  # as a JSON string, which YAML reads back as it is ("#1 String")
            out.append(f"task.{key}={json.dumps(getattr(task, key))}")
    out.append(f"task.metric={task.rank_metric}")  # each cell keeps its best model by what the suite ranks by
    out += [f"optim.lr={lr!r}", f"train.seed={seed}"]
    if epochs is not None:
        out.append(f"train.epochs={epochs}")
    if probe:
        out.append("task.mode=feature")
    return [*out, *extra]


def _tracked(spec: CellSpec, report_to: tuple[str, ...]) -> CellSpec:
    """A cell run in this process reports to the trackers too, as a run nested under the evaluation's."""
    name = f"{spec.model}/{spec.task}/{spec.directory.name}"
    overrides = (*spec.overrides, f"track.report_to={','.join(report_to)}", f"track.run_name={json.dumps(name)}")
    return replace(spec, overrides=overrides)


def _data_path(data_dir: Path, relative: str, task: SuiteTask, what: str) -> Path:
    path = (data_dir / relative).expanduser()
    if not path.exists():
        raise BertkitError(
            f"task '{task.name}': {what} file not found: {path} (paths are relative to --data {data_dir})"
        )
    return path


def _check_task_data(task: SuiteTask, recipe: Any, files: dict[str, Path]) -> None:
    """Read each file as its cells will, so a missing column or a bad row fails now, not hours later."""
    from bertkit.tasks.kinds import task_kind

    metrics = []  # what the suite ranks and scores it by, an extra dev set's metrics by their own name
    for metric in (task.rank_metric, *task.score_metrics):
        for extra in task.extra_eval:
            metric = metric.removeprefix(f"{extra}_")
        metrics.append(metric)
    for what, path in files.items():
        try:
            task_kind(task.kind).check_data(recipe.task, path, what, tuple(metrics))
        except BertkitError as err:
            raise BertkitError(f"task '{task.name}' ({what}): {err}") from None


def _check_model(spec: str, model_dir: Path, suite: Suite, tasks: list[SuiteTask]) -> None:
    """The model loads, and its family serves every task kind of the suite."""
    from bertkit.modelio.modeldir import load_model_dir

    try:
        _, _, cfg, _, _ = load_model_dir(model_dir)
    except BertkitError as err:
        raise BertkitError(f"--model {spec}: {err}") from None
    for task in tasks:
        if cfg.family == "xlnet" and not SPECS[task.kind].xlnet:
            raise BertkitError(
                f"--model {spec} is an XLNet, which bertkit does not fine-tune for {task.kind} (task "
                f"'{task.name}' of suite '{suite.name}'); evaluate it on a suite without such tasks (--tasks)"
            )


def plan_cells(
    suite: Suite, tasks: list[SuiteTask], models: dict[str, Path], keys: dict[str, str], output: Path,
    data_dir: Path, probe: bool,
) -> dict[str, list[CellSpec]]:  # fmt: skip
    """Every cell by task, checked: files found and readable, recipes valid with every override."""

    sources = {t.warm_start for t in tasks if t.warm_start}
    cells: dict[str, list[CellSpec]] = {}
    for task in tasks:
        if task.train is None and not SPECS[task.kind].scores_as_is:
            as_is = " and ".join(kinds_that("scores_as_is"))
            raise BertkitError(f"task '{task.name}' has no train file; a {task.kind} task trains before it is scored "
                               f"(only {as_is} tasks score a model as it is)")  # fmt: skip
        if task.train is None and task.name in sources:
            raise BertkitError(f"a task warm-starts from '{task.name}', which trains nothing (it has no train file)")
        train = _data_path(data_dir, task.train, task, "train") if task.train is not None else None
        dev = _data_path(data_dir, task.eval, task, "eval")
        extra = {name: _data_path(data_dir, rel, task, f"extra_eval '{name}'") for name, rel in task.extra_eval.items()}
        lrs, seeds, _, _ = suite.grid(task, probe)
        if train is None:  # scored as it is: a rate changes nothing
            lrs = lrs[:1]
        try:
            recipe = load_recipe(_task_recipe(task), _overrides(suite, task, lrs[0], seeds[0], probe), kind="finetune")
        except BertkitError as err:
            raise BertkitError(f"task '{task.name}': {err}") from None
        _check_task_data(task, recipe, {**({"train": train} if train is not None else {}), "eval": dev, **extra})
        cells[task.name] = [
            CellSpec(
                model=keys[spec],
                task=task.name,
                lr=lr,
                seed=seed,
                directory=output / CELLS / keys[spec] / task.name / cell_name(lr, seed),
                recipe=_task_recipe(task),
                overrides=tuple(_overrides(suite, task, lr, seed, probe)),
                train=train,
                eval=dev,
                extra_eval=extra,
                keep_model=task.name in sources,
                required=tuple(dict.fromkeys((task.rank_metric, *task.score_metrics))),
                model_dir=None if task.warm_start else model_dir,
            )
            for spec, model_dir in models.items()
            for lr in lrs
            for seed in seeds
        ]
    return cells


def _waves(tasks: list[SuiteTask]) -> list[list[SuiteTask]]:
    """Tasks in the order their inputs exist: a warm-started task one wave after its source."""
    depth: dict[str, int] = {}
    for task in tasks:  # a source is always listed before the tasks that start from it (the suite checks it)
        depth[task.name] = depth[task.warm_start] + 1 if task.warm_start else 0
    return [[t for t in tasks if depth[t.name] == d] for d in range(max(depth.values()) + 1)]


# What a command-line option changed, in the plan beside the suite as its file has it (None: the option not given).
OPTION_KEYS = {"lrs": "--lrs", "seeds": "--seeds", "tasks": "--tasks"}
# How a resume's error names an evaluation started without the option.
WITHOUT_OPTION = {"lrs": "the suite's rates", "seeds": "the suite's seeds", "tasks": "all the suite's tasks"}


def weights_fingerprint(model_dir: Path) -> str:
    """Which weights a model directory holds: a SHA-256 over its safetensors files (names and bytes; the hub cache's
    links are followed). Weights trained again to other values in the same place get another, so a resume cannot mix
    their cells; the same weights written again (a deterministic run repeated) keep theirs."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(model_dir.glob("*.safetensors")):
        digest.update(path.name.encode() + b"\0")
        hash_file_into(digest, path)
    return digest.hexdigest()[:16]


def _plan_record(suite: Suite, models: dict[str, str], probe: bool, data_dir: Path, options: EvaluateOptions,
                 weights: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    """The suite as its file says, the options beside it, so that a resume names what differs, and each model's
    weights fingerprint (by its cell directory name)."""
    return {"suite": suite.model_dump(mode="json"), "models": models, "mode": "probe" if probe else "full",
            "data": str(data_dir), **{key: list(getattr(options, key)) or None for key in OPTION_KEYS},
            "weights": weights}  # fmt: skip


def _option_text(key: str, value: list[Any] | None) -> str:
    """How an evaluation was started, as its resume error says it: "--lrs 0.0001,0.0003", "all the suite's tasks"."""
    if not value:
        return f"{WITHOUT_OPTION[key]} (no {OPTION_KEYS[key]})"
    return f"{OPTION_KEYS[key]} {','.join(f'{v:g}' if key == 'lrs' else str(v) for v in value)}"


def _prepare_output(output: Path, plan: dict[str, Any], options: EvaluateOptions) -> None:
    if options.resume == "auto" and not (output / PLAN).is_file():
        options = replace(options, resume=None)
    if options.resume:
        if not (output / PLAN).is_file():
            raise BertkitError(f"--resume: {output} holds no evaluation to resume ({PLAN} is missing); drop --resume")
        before = read_json(output / PLAN, "evaluation plan")
        for key in ("suite", "models", "mode", "data", *OPTION_KEYS):
            if before.get(key) != plan[key]:  # a plan written before an option existed has none of it
                name = f"another {'--data' if key == 'data' else key}"
                if key in OPTION_KEYS:
                    name = _option_text(key, before.get(key))
                raise BertkitError(
                    f"--resume: {output} was started with {name}; resume with the same suite, models, mode, --data, "
                    "--lrs, --seeds and --tasks, or choose another --output (or --overwrite to start again)"
                )
        # The models matched above, so both plans fingerprint the same keys; a plan from before fingerprints has none.
        for key, fingerprint in (before.get("weights") or {}).items():
            if plan["weights"][key] != fingerprint:
                spec = next(spec for spec, name in plan["models"].items() if name == key)
                raise BertkitError(
                    f"--resume: the weights of --model {spec} changed since {output} was started (trained again?); "
                    "its finished cells scored the old ones: start again with --overwrite, or choose another --output"
                )
        (output / REPORT_JSON).unlink(missing_ok=True)  # the report is written anew from every cell at the end
        return
    check_output_dir(output, options.overwrite)
    if output.exists():
        shutil.rmtree(output)
    output.mkdir(parents=True)
    write_json_atomic(output / PLAN, plan)


def _run_wave(cells: list[CellSpec], options: EvaluateOptions, tracker: Tracker, done: Callable[[dict], None]) -> None:
    """Run `cells` one after the other, or in `--jobs` worker processes (each with a GPU of `--devices`)."""
    if not options.devices and (options.jobs <= 1 or len(cells) <= 1):
        for spec in cells:
            done(run_cell(spec))
        return
    if not cells:
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no inherited torch threads or CUDA state
    devices = None
    if options.devices:
        devices = context.Manager().Queue()
        for device in options.devices[: options.jobs]:
            devices.put(device)
    threads = max(1, (os.cpu_count() or 1) // options.jobs)
    try:
        with ProcessPoolExecutor(options.jobs, context, initializer=init_worker, initargs=(threads, devices)) as pool:
            for future in as_completed([pool.submit(run_cell, spec) for spec in cells]):
                done(future.result())
    except BrokenProcessPool:
        raise BertkitError(
            "a worker process died (out of memory?); the cells it finished are kept: run again with --resume, with "
            "fewer --jobs or a smaller train.batch_size"
        ) from None


def _with_warm_start(spec: CellSpec, task: SuiteTask, summaries: dict[str, dict[str, dict[str, Any]]],
                     cells: dict[str, list[CellSpec]]) -> CellSpec:  # fmt: skip
    """The cell with its model: the source task's best cell (chosen rate, best seed) for the same model."""
    entry = summaries[spec.model][task.warm_start or ""]
    if entry["lr"] is None:
        return replace(spec, warm_error=f"warm start: every cell of task '{task.warm_start}' failed")
    sign = -1.0 if lower_is_better(entry["metric"]) else 1.0
    best_seed = entry["seeds"][max(range(len(entry["seeds"])), key=lambda i: sign * entry["scores"][i])]
    source = next(c for c in cells[task.warm_start or ""] if c.model == spec.model and c.lr == entry["lr"]
                  and c.seed == best_seed)  # fmt: skip
    if not source.saved_model.is_dir():
        return replace(spec, warm_error=f"warm start: the weights of {source.directory} are missing (deleted?); "
                       "start the evaluation again with --overwrite")  # fmt: skip
    return replace(spec, model_dir=source.saved_model)


def evaluate(
    models: list[str],
    suite_spec: str,
    output: Path,
    data: Path | None = None,
    options: EvaluateOptions | None = None,
) -> dict[str, Any]:
    options = options or EvaluateOptions()
    if not models:
        raise BertkitError("give at least one --model to evaluate")
    if options.jobs < 1:
        raise BertkitError("--jobs must be at least 1")
    if options.lrs:
        check_rate_option(options.lrs)
    suite_as_given, suite_path = load_suite(suite_spec)
    suite = suite_as_given
    if options.tasks:  # in the suite's order, so that a resume naming them in another order matches the plan
        suite = suite.with_tasks(list(options.tasks))
        whole = len(suite.tasks) == len(suite_as_given.tasks)  # every task named: the suite as it is
        options = replace(options, tasks=() if whole else tuple(task.name for task in suite.tasks))
    if options.seeds:
        suite = suite.with_seeds(list(check_seed_option(options.seeds)))
    if options.lrs:
        suite = suite.with_rates(list(options.lrs), options.probe)
    if data is None:
        if suite_path.parent.resolve() == SUITE_DIR:
            raise BertkitError(
                f"suite '{suite.name}' is shipped with bertkit: --data DIR says where its task files are "
                f"(`bertkit suites show {suite.name}` lists them)"
            )
        data = suite_path.parent
    if not data.is_dir():
        raise BertkitError(f"--data {data} is not a directory")
    from bertkit.modelio.modeldir import resolve_model_path

    keys = model_keys(models)
    model_dirs = {}
    for spec in models:
        try:
            model_dirs[spec] = resolve_model_path(spec, hub=True)
        except BertkitError as err:
            raise BertkitError(f"--model {spec}: {err}") from None
    # --probe skips question answering (it fine-tunes) and bi-encoders (their vectors are what they learn)
    skipped = [t.name for t in suite.tasks if options.probe and not SPECS[t.kind].probe]
    for task in suite.tasks:  # a task that starts from a skipped one is skipped with it
        if task.warm_start in skipped:
            skipped.append(task.name)
    tasks = [t for t in suite.tasks if t.name not in skipped]
    if not tasks:
        if options.tasks:
            raise BertkitError(f"--tasks {','.join(options.tasks)}: --probe runs none of them (question answering "
                               "and bi-encoder tasks fine-tune)")  # fmt: skip
        raise BertkitError(
            f"suite '{suite.name}' has no task that --probe can run (question answering and bi-encoder tasks fine-tune)"
        )
    for spec, model_dir in model_dirs.items():
        _check_model(spec, model_dir, suite, tasks)
    cells = plan_cells(suite, tasks, model_dirs, keys, output, data, options.probe)
    from bertkit.engine import tracking

    try:
        settings = {**suite.model_dump(mode="json"), "tasks": {t.name: t.model_dump(mode="json") for t in suite.tasks}}
        record = EvaluationRecord(name=suite.name, mode="probe" if options.probe else "full", suite=settings,
                                  models=keys, track=TrackConfig(report_to=list(options.report_to)))  # fmt: skip
    except ValidationError:
        raise BertkitError(f"--report-to takes {', '.join(TRACKERS)}, not {', '.join(options.report_to)}") from None
    tracking.require(tracking.trackers_asked(record))
    # Everything is valid: only now does the output appear.
    weights = {keys[spec]: weights_fingerprint(model_dir) for spec, model_dir in model_dirs.items()}
    _prepare_output(output, _plan_record(suite_as_given, keys, options.probe, data, options, weights), options)
    with tracking.parent_run(output, record, "evaluate") as parent:
        every_task = [task.name for task in suite_as_given.tasks]
        report = _run_cells(suite, tasks, cells, keys, output, options, skipped, every_task)
        if parent is not None:
            row = {"step": 0}
            for spec, key in keys.items():
                entry = report["models"][spec]
                row[f"{key}/average"] = entry["average"]["mean"]
                row.update({f"{key}/{task}": value["score"]["mean"] for task, value in entry["tasks"].items()})
            parent.log({k: v for k, v in row.items() if v is not None})
            parent.finish(report, None)
    return report


def _run_cells(suite: Suite, tasks: list[SuiteTask], cells: dict[str, list[CellSpec]], keys: dict[str, str],
               output: Path, options: EvaluateOptions, skipped: list[str],
               every_task: list[str]) -> dict[str, Any]:  # fmt: skip
    """Every cell (those with a result already, on --resume, are read), then the report."""
    total = sum(len(c) for c in cells.values())
    results: dict[str, dict[str, dict[tuple[float, int], dict[str, Any]]]] = {k: {} for k in keys.values()}
    summaries: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in keys.values()}
    counts = {"done": 0, "failed": 0, "resumed": 0, "ran": 0}
    start = time.perf_counter()
    with Tracker("evaluate", total, options.quiet, unit="cells") as tracker:

        def record(result: dict[str, Any], ran: bool = True) -> None:
            results[result["model"]].setdefault(result["task"], {})[(result["lr"], result["seed"])] = result
            counts["done" if result["status"] == "done" else "failed"] += 1
            counts["ran" if ran else "resumed"] += 1
            tracker.advance(1, info=f"{result['task']} lr {result['lr']:g} seed {result['seed']}")

        for wave in _waves(tasks):
            todo = []
            for task in wave:
                for spec in cells[task.name]:
                    if task.warm_start:
                        spec = _with_warm_start(spec, task, summaries, cells)
                    if options.report_to and options.jobs <= 1:
                        spec = _tracked(spec, options.report_to)
                    previous = read_result(spec) if options.resume else None
                    if previous is not None:
                        record(previous, ran=False)
                    else:
                        todo.append(spec)
            _run_wave(todo, options, tracker, record)
            for task in wave:
                lrs, seeds, _, _ = suite.grid(task, options.probe)
                for key in keys.values():
                    summaries[key][task.name] = summarize_task(task, lrs, seeds, results[key].get(task.name, {}))
    report = {
        "suite": suite.name,
        "mode": "probe" if options.probe else "full",
        "models": {spec: summarize_model(suite, summaries[key]) for spec, key in keys.items()},
        "protocol": {
            "text": PROTOCOL,
            "ranked_by": "average",
            "mode": "frozen encoder, linear head (probe)" if options.probe else "full fine-tuning",
            "skipped_tasks": skipped,
            "rates_from": "--lrs" if options.lrs else "suite",  # every task's grid is --lrs, or as the suite has it
            "seeds_from": "--seeds" if options.seeds else "suite",
            "tasks_from": "--tasks" if options.tasks else "suite",
            "suite_tasks": every_task,  # all of the suite's tasks, of which --tasks runs a part
            "tasks": {t.name: _task_protocol(suite, t, options.probe) for t in tasks},
        },
        "cells": {"total": total, **counts},
        "seconds": round(time.perf_counter() - start, 1),
        "output": str(output),
    }
    from bertkit.pipelines.evaluate.report import write_report

    report["files"] = write_report(output, report, suite, tasks)
    write_json_atomic(output / REPORT_JSON, report)
    return report


def _task_protocol(suite: Suite, task: SuiteTask, probe: bool) -> dict[str, Any]:
    lrs, seeds, epochs, overrides = suite.grid(task, probe)
    return {
        "kind": task.kind,
        "head": (suite.probe_solver(task) if probe else "fine-tuned") if task.train is not None else "none",
        "metric": task.rank_metric,
        "score": task.score_metrics,
        "lrs": lrs,
        "seeds": seeds,
        "epochs": epochs,
        "recipe": _task_recipe(task),
        "set": overrides,
        "warm_start": task.warm_start,
    }

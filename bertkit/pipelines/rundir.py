"""The run directory shared by pretrain and finetune: resolved recipe, metrics, checkpoints, model."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from bertkit.engine.checkpoint import list_checkpoints
from bertkit.errors import BertkitError
from bertkit.fsutil import check_output_dir

# `--resume last`: continue from the newest checkpoint, which must exist. `--resume auto`: continue if there
# is one, else start from scratch (what a job script restarted after preemption wants).
RESUME_MODES = ("last", "auto")
RECIPE_FILE = "recipe.yaml"


def resume_mode(resume: bool | str | None, overwrite: bool) -> str | None:
    """Normalise `resume` (False/None: a new run; True: 'last', as the old boolean flag meant) and refuse
    values outside RESUME_MODES and the contradictory --resume --overwrite."""
    if resume is None or resume is False:
        return None
    mode = "last" if resume is True else str(resume)
    if mode not in RESUME_MODES:
        raise BertkitError(f"--resume takes {' or '.join(RESUME_MODES)}, not '{mode}'")
    if overwrite:
        raise BertkitError(
            "--resume and --overwrite contradict each other: --resume continues the run in the output directory, "
            "--overwrite deletes it; pass only one"
        )
    return mode


def join_job(recipe: Any, arguments: Mapping[str, Any], inputs: Mapping[str, Path | str | None]) -> None:
    """Under a distributed engine, before anything is read or written: join the process group and check that
    every rank runs the same job: bertkit version, resolved recipe, `arguments` (the command line's other
    values) and the contents of `inputs` (corpus, model, teacher, data files), bertkit/engine/preflight.py.
    A job whose nodes disagree stops on every rank with one line instead of training a divergent model."""
    from bertkit.engine import tracking

    tracking.note_job(recipe, inputs)  # a tracker that is not installed stops here, before any work
    engine = getattr(recipe, "engine", None)
    if engine is None or engine.backend == "single":
        return
    from bertkit.engine import dist
    from bertkit.engine.device import resolve_device
    from bertkit.engine.preflight import check_same_job

    dist.init_process_group(resolve_device(engine), engine.timeout)
    check_same_job(recipe, arguments, inputs)


def prepare_run_dir(
    output: Path,
    recipe: Any,
    overwrite: bool,
    resume: bool | str | None,
    resumable: Callable[[Path], bool] | None = None,
) -> bool:
    """Create the run directory, or decide to continue the run in it (see `resume_mode`); otherwise it must be
    new (or `overwrite` given, which deletes it first). Returns True when training continues from the newest
    checkpoint, the value to pass as `train(resume=...)`. `resumable(output)` says whether a run of several
    jobs (the task stage's phases) has anything to continue from; by default, `output/checkpoints`.
    Under a distributed engine rank 0 decides and every
    rank gets its decision (or raises its error), so all ranks agree on resume vs fresh."""
    mode = resume_mode(resume, overwrite)
    engine = getattr(recipe, "engine", None)
    if engine is None or engine.backend == "single":
        if engine is not None:
            from bertkit.engine.device import check_device_request

            check_device_request(engine)  # a GPU asked for where there is none: before the directory is made
        return _prepare_run_dir(output, recipe, overwrite, mode, resumable)
    from bertkit.engine import dist
    from bertkit.engine.device import resolve_device
    from bertkit.engine.preflight import check_run_dir_shared

    dist.init_process_group(resolve_device(engine), engine.timeout)
    outcome: tuple[bool, str | None] = (False, None)
    if dist.is_main():
        try:
            outcome = (_prepare_run_dir(output, recipe, overwrite, mode, resumable), None)
        except BertkitError as err:
            outcome = (False, str(err))
    resumed, error = dist.broadcast_object(outcome)
    if error:
        raise BertkitError(error)
    check_run_dir_shared(output)
    return resumed


def _prepare_run_dir(
    output: Path, recipe: Any, overwrite: bool, mode: str | None, resumable: Callable[[Path], bool] | None
) -> bool:
    import shutil

    resumed = False
    can_resume = resumable(output) if resumable is not None else bool(list_checkpoints(output / "checkpoints"))
    if mode is not None and can_resume:
        _check_same_kind(output, recipe)
        resumed = True
    elif mode == "last":
        raise BertkitError(
            f"--resume: {output} has no checkpoint to resume from (set train.checkpoint_every to write some, "
            "or use --resume auto to start from scratch when there is none)"
        )
    elif mode == "auto" and (output / RECIPE_FILE).is_file():
        # A run that died before its first checkpoint: start it again in place (the loop replaces its
        # metrics.jsonl). A finished run without checkpoints is a result, never silently retrained.
        _check_same_kind(output, recipe)
        if (output / "model").exists() or (output / "summary.json").exists():
            raise BertkitError(
                f"--resume auto: {output} holds a finished run with no checkpoint to continue from; "
                "pass --overwrite (without --resume) to replace it or choose another path"
            )
        shutil.rmtree(output / "tensorboard", ignore_errors=True)  # the dead attempt's curves, like its metrics
    else:
        check_output_dir(output, overwrite)
        if output.exists() and overwrite:
            shutil.rmtree(output)
    output.mkdir(parents=True, exist_ok=True)
    (output / RECIPE_FILE).write_text(yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False), "utf-8")
    # Rank 0 (the only caller here) opens the job's tracked run, or reopens the one this directory's id names.
    from bertkit.engine import dist, tracking

    tracking.start(output, recipe, resumed, dist.world_size())
    return resumed


def _check_same_kind(output: Path, recipe: Any) -> None:
    """A finetune must not continue (or restart) a pretraining run's directory, nor the reverse."""
    try:
        saved = yaml.safe_load((output / RECIPE_FILE).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return  # no readable recipe.yaml: nothing to compare; the checkpoint checks still apply
    kind = saved.get("kind") if isinstance(saved, dict) else None
    ours = getattr(recipe, "kind", None)
    if kind and ours and kind != ours:
        raise BertkitError(f"--resume: {output} is a {kind} run, not a {ours} run; choose another --output")

"""Experiment tracking: one run in MLflow and/or Weights & Biases per training job, from global rank 0.

The life of a tracked run, and where each part is called from:
- `note_job` (bertkit/pipelines/rundir.py `join_job`, before any work): refuses a tracker whose package is not
  installed, and keeps the job's inputs (corpus, model, teacher...) to fingerprint as parameters;
- `start` (`prepare_run_dir`, once the run directory is decided): opens the tracker's run, or reopens the one
  whose id the run directory keeps in tracking.json, so a `--resume` (or a requeued `--resume auto` job)
  continues the same run; `--overwrite` deletes the directory, and with it the id: a new run;
- `log_row` (the loop's `_write_row`, beside metrics.jsonl and TensorBoard): every metrics row, by global step;
- `finish` (bertkit/pipelines/summary.py `write_summary`): the summary the `--json` line prints, optionally the
  model; the run ends;
- `close_all` (the CLI's error handling): a run whose job failed or was interrupted is marked so.

A tracker is a guest of the training run: every call to it happens on a worker thread (a slow server never
slows a step), and the first error from one (server gone, disk full) is one warning, after which that tracker
is left out and training goes on; metrics.jsonl is written by the loop either way.

Where a tracker stores its runs stays its own configuration (MLFLOW_TRACKING_URI, WANDB_MODE, ...): bertkit
only passes what the recipe says (`track.experiment`, `track.run_name`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import queue
import resource
import shlex
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from bertkit.engine.trackers.base import Backend, RunInfo
from bertkit.errors import BertkitError

RUN_FILE = "tracking.json"  # the trackers' run ids, in the run directory
EXTRAS = {"mlflow": "mlflow", "wandb": "wandb"}  # remote tracker -> the bertkit extra that installs it
# How long the end of a run waits for a tracker to take what is still queued before giving up on it.
FLUSH_SECONDS = float(os.environ.get("BERTKIT_TRACK_FLUSH_SECONDS", "120"))


def trackers_asked(recipe: Any) -> list[str]:
    """The remote trackers (mlflow, wandb) the recipe's track.report_to asks for; TensorBoard is the loop's."""
    track = getattr(recipe, "track", None)
    return [name for name in (track.report_to if track else []) if name in EXTRAS]


def require(names: list[str]) -> None:
    """One line naming the extra for the first tracker that is not installed (checked before any work);
    `tensorboard` is the loop's event files (engine.tensorboard), which need the tensorboard package too."""
    for name in names:
        if importlib.util.find_spec(name) is None:
            raise BertkitError(
                f"--report-to {name} (track.report_to{', engine.tensorboard' if name == 'tensorboard' else ''}) "
                f'needs the {name} package, which is not installed: pip install "bertkit[{name}]"'
            )


def packages_asked(recipe: Any) -> list[str]:
    """Every tracker package the run writes to: TensorBoard's (engine.tensorboard) and the remote ones."""
    engine = getattr(recipe, "engine", None)
    return (["tensorboard"] if engine is not None and engine.tensorboard else []) + trackers_asked(recipe)


_job: dict[str, Any] = {}  # the inputs of the job this process runs (note_job)
_active: dict[Path, Reporter] = {}  # run directory -> its reporter (rank 0 only)
_parents: list[Reporter] = []  # open parent runs (compress): runs started meanwhile nest under the innermost


def note_job(recipe: Any, inputs: Mapping[str, Path | str | None]) -> None:
    require(packages_asked(recipe))
    _job["inputs"] = dict(inputs)


def start(run_dir: Path, recipe: Any, resumed: bool, world_size: int = 1) -> Reporter | None:
    """Open (or reopen) the tracked run of `run_dir`; call on rank 0 only. None when nothing is tracked."""
    names = trackers_asked(recipe)
    if not names:
        return None
    require(names)
    run_dir = run_dir.resolve()
    previous = _active.pop(run_dir, None)
    if previous is not None:
        previous.abort("FAILED")
    info = _run_info(run_dir, recipe, resumed, world_size)
    reporter = Reporter(run_dir, _open_backends(names, info))
    _active[run_dir] = reporter
    return reporter


@contextlib.contextmanager
def parent_run(run_dir: Path, recipe: Any, command: str) -> Iterator[Reporter | None]:
    """A parent run for the stages of one job (compress): every run started inside nests under it (MLflow's
    mlflow.parentRunId, W&B's group). The caller ends it with `finish(summary, model_dir)`."""
    names = trackers_asked(recipe)
    if not names:
        yield None
        return
    require(names)
    run_dir = run_dir.resolve()
    info = _run_info(run_dir, recipe, False, 1, command=command)
    reporter = Reporter(run_dir, _open_backends(names, info))
    _parents.append(reporter)
    try:
        yield reporter
    except BaseException as err:
        reporter.abort("KILLED" if isinstance(err, KeyboardInterrupt) else "FAILED")
        raise
    finally:
        _parents.remove(reporter)
        reporter.abort("FINISHED")  # no-op when the caller finished it with its summary


def log_row(metrics_dir: Path, row: dict[str, Any]) -> None:
    """A metrics row written to `metrics_dir`/metrics.jsonl, to the run tracking that directory or the run
    directory it is part of (task distillation's phases log under output/PHASE, as PHASE/KEY)."""
    metrics_dir = metrics_dir.resolve()
    for directory in (metrics_dir, *metrics_dir.parents):
        reporter = _active.get(directory)
        if reporter is not None:
            prefix = metrics_dir.relative_to(directory).as_posix()
            reporter.log(row, "" if prefix == "." else f"{prefix}/")
            return


def finish(run_dir: Path, summary: dict[str, Any]) -> None:
    reporter = _active.pop(run_dir.resolve(), None)
    if reporter is not None:
        model_dir = summary.get("model_dir")
        reporter.finish(summary, Path(model_dir) if model_dir else None)


def close_all(status: str) -> None:
    """End every open run with `status` (FAILED, KILLED): the job stopped before its summary."""
    for run_dir in list(_active):
        _active.pop(run_dir).abort(status)
    for reporter in reversed(_parents):
        reporter.abort(status)


def _command_line() -> str:
    argv = list(sys.argv)
    if argv and Path(argv[0]).name in ("bertkit", "__main__.py"):
        argv[0] = "bertkit"
    return shlex.join(argv)


def _command(recipe: Any) -> str:
    """The subcommand being run (pretrain, distill, finetune...), from the CLI when there is one."""
    with contextlib.suppress(ImportError, RuntimeError):
        import click

        context = click.get_current_context(silent=True)
        if context is not None and context.info_name:
            return str(context.info_name)
    return str(getattr(recipe, "kind", "train"))


def _run_info(run_dir: Path, recipe: Any, resumed: bool, world_size: int, command: str | None = None) -> RunInfo:
    from bertkit import __version__
    from bertkit.engine.preflight import fingerprint, flatten

    track = recipe.track
    params = {key: _text(value) for key, value in flatten(recipe.model_dump(mode="json")).items()}
    params["bertkit.version"] = __version__
    params["bertkit.command_line"] = _command_line()
    for name, path in _job.get("inputs", {}).items():
        if path is not None:
            params[f"input.{name.replace(' ', '_')}"] = fingerprint(path)
    engine = getattr(recipe, "engine", None)
    model = getattr(recipe, "model", None)
    tags = {
        "command": command or _command(recipe),
        "engine": engine.backend if engine is not None else "single",
        "world_size": str(world_size),
    }
    if model is not None and getattr(recipe, "kind", "") != "finetune":
        tags["family"] = model.family
    parent = _parents[-1].ids() if _parents else {}
    name = track.run_name or run_dir.name
    return RunInfo(run_dir, name, track.experiment, params, tags, resumed, track.log_model, parent)


def _text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


def saved_ids(run_dir: Path) -> dict[str, dict[str, str]]:
    try:
        data = json.loads((run_dir / RUN_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _open_backends(names: list[str], info: RunInfo) -> list[Backend]:
    """Open each tracker's run; one that cannot be reached is one warning and is left out."""
    saved = saved_ids(info.run_dir)
    backends: list[Backend] = []
    for name in names:
        try:
            if name == "mlflow":
                from bertkit.engine.trackers.mlflow import MlflowBackend

                backends.append(MlflowBackend(info, saved.get(name)))
            else:
                from bertkit.engine.trackers.wandb import WandbBackend

                backends.append(WandbBackend(info, saved.get(name)))
        except Exception as err:  # the tracker's own errors: a server, a file, a setting
            warn(name, err, "the run is not tracked there")
    if backends:
        from bertkit.fsutil import write_json_atomic

        write_json_atomic(info.run_dir / RUN_FILE, {**saved, **{b.name: b.ids() for b in backends}})
    return backends


def warn(name: str, err: BaseException, consequence: str) -> None:
    first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
    sys.stderr.write(f"warning: {name} tracking failed ({first}); {consequence}, training goes on\n")
    sys.stderr.flush()


def peak_memory_mib() -> float:
    """The peak memory of this process: the GPU's allocator when CUDA is in use, else the resident set."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux


class Reporter:
    """Rank 0's link to the trackers of one run: callers queue work, one worker thread does it in order."""

    def __init__(self, run_dir: Path, backends: list[Backend]) -> None:
        self.run_dir, self.backends = run_dir, backends
        self.failed: set[str] = set()
        self.closed = False
        self.sent: dict[str, int] = {}  # metric -> the last step queued for it
        self.queue: queue.Queue[tuple[Callable[[Backend], None], str] | None] = queue.Queue()
        self.thread = threading.Thread(target=self._work, name="bertkit-tracking", daemon=True)
        self.thread.start()

    def ids(self) -> dict[str, str]:
        return {backend.name: backend.ids()["run_id"] for backend in self.backends if backend.name not in self.failed}

    def _work(self) -> None:
        while (item := self.queue.get()) is not None:
            call, what = item
            for backend in self.backends:
                if backend.name in self.failed:
                    continue
                try:
                    call(backend)
                except Exception as err:  # any failure of a tracker is its own, never the training run's
                    self.failed.add(backend.name)
                    warn(backend.name, err, f"{what} and what follows are not tracked there")

    def log(self, row: dict[str, Any], prefix: str = "") -> None:
        if self.closed:
            return
        metrics = {
            f"{prefix}{key}": float(value)
            for key, value in row.items()
            if key != "step" and isinstance(value, int | float) and not isinstance(value, bool)
        }
        if "loss" in row:
            metrics[f"{prefix}peak_memory_mib"] = peak_memory_mib()
        step = int(row["step"])
        # Each key once per step: an evaluation's row may repeat a figure of the training row of its step
        # (tokens, time), which a tracker would otherwise hold twice at that step.
        metrics = {key: value for key, value in metrics.items() if step > self.sent.get(key, -1)}
        self.sent.update(dict.fromkeys(metrics, step))
        if not metrics:
            return
        self.queue.put((lambda backend: backend.log_metrics(step, metrics), f"step {step}"))

    def _close(self, call: Callable[[Backend], None], what: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.queue.put((call, what))
        self.queue.put(None)
        self.thread.join(FLUSH_SECONDS)
        if self.thread.is_alive():
            for backend in self.backends:
                if backend.name not in self.failed:
                    sys.stderr.write(
                        f"warning: {backend.name} tracking did not finish within {FLUSH_SECONDS:.0f} s; "
                        "its run may miss the last rows\n"
                    )

    def finish(self, summary: dict[str, Any], model_dir: Path | None) -> None:
        self._close(lambda backend: backend.finish(summary, model_dir), "the summary")

    def abort(self, status: str) -> None:
        self._close(lambda backend: backend.abort(status), "the run's end")

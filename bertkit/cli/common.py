"""What every subcommand shares: error handling, --json output, human-readable summaries."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from bertkit.errors import BertkitError

F = TypeVar("F", bound=Callable[..., Any])

JSON_HELP = "Print one JSON object (paths, counts, metrics) as the last line of stdout; progress goes to stderr."
QUIET_HELP = "No progress bars or status lines (accepted by every command, for uniform pipelines)."
OVERWRITE_HELP = "Replace the output directory if it exists."
# The values of the fixed-choice options every training command shares, as their metavars show them
# (tests/unit/test_engine_cli.py checks them against the schema's).
ENGINES = "single|ddp|fsdp|deepspeed"
TRACKERS = "tensorboard|mlflow|wandb"
ENGINE_HELP = (
    "Execution engine (engine.backend): single, or ddp / fsdp / deepspeed (ZeRO stage engine.deepspeed.zero_stage), "
    "launched with torchrun --nproc-per-node N (or the deepspeed launcher with --no_local_rank)."
)
REPORT_TO_HELP = (
    "Report the run to experiment trackers: tensorboard, mlflow, wandb (repeatable, or comma-separated; "
    "track.report_to). Their own environment variables say where: MLFLOW_TRACKING_URI, WANDB_PROJECT, WANDB_MODE..."
)
RESUME_HELP = (
    "Continue the run in --output: 'last' (the default of a bare --resume) from its newest checkpoint, which must "
    "exist; 'auto' from its newest checkpoint if there is one, else start from scratch (for job scripts restarted "
    "after preemption)."
)
BUDGET_HELP = (
    "Train for this much training time, data or compute (train.budget), e.g. 30m, 2h, 5Mtok, or 2e13flop / 20Tflop "
    "(training FLOPs as bertkit counts them, which load cannot skew): warm-up and decay are laid over "
    "it and the run ends on the deadline with a checkpoint; train.steps becomes an upper bound (distill --stage task: "
    "it only stops the phases)."
)


def engine_overrides(engine: str | None, budget: str | None) -> list[str]:
    """--engine/--budget are shorthands for --set engine.backend=... / --set train.budget=..."""
    return ([f"engine.backend={engine}"] if engine else []) + ([f"train.budget={budget}"] if budget else [])


def tracker_names(report_to: list[str]) -> list[str]:
    """--report-to mlflow --report-to wandb, or --report-to mlflow,wandb: ["mlflow", "wandb"]."""
    return [name.strip() for item in report_to for name in item.split(",") if name.strip()]


def report_overrides(report_to: list[str]) -> list[str]:
    """--report-to mlflow --report-to wandb (or mlflow,wandb) is --set track.report_to=mlflow,wandb."""
    names = tracker_names(report_to)
    return [f"track.report_to={','.join(names)}"] if names else []


def emit_main(result: dict[str, Any], as_json: bool, title: str) -> None:
    """`emit` on rank 0 only (under torchrun every rank runs the command), then leave the process group."""
    from bertkit.engine import dist

    if dist.is_main():
        emit(result, as_json, title)
    dist.destroy_process_group()


def check_seed(seed: int) -> int:
    """`--seed`, which numpy's generators take only as a whole number of 0 or more: one error line otherwise."""
    if seed < 0:
        raise BertkitError(f"--seed must be 0 or more, not {seed}")
    return seed


def fail(message: str, code: int = 2) -> None:
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(code)


def guarded(func: F) -> F:
    """Turn expected failures into one `error:` line and a non-zero exit, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except BaseException as err:
            _end_tracked_runs(err)
            raise
        # (the handlers below see the same exception: the tracked runs are closed first)

    @functools.wraps(func)
    def handled(*args: Any, **kwargs: Any) -> Any:
        try:
            return wrapper(*args, **kwargs)
        except BertkitError as err:
            fail(str(err), err.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except BrokenPipeError:
            # The reader of stdout stopped early (`bertkit recipes show X | head`): it has what it wanted, and
            # the work is done (stdout only gets the result). Leave quietly; stdout goes to devnull first so
            # that the interpreter's final flush cannot fail on the closed pipe again.
            _stdout_to_devnull()
            raise SystemExit(0) from None
        except OSError as err:  # full disk, permissions, a vanished file: the environment, not a bug
            _drop_stdout_it_cannot_write()
            fail(f"{err.strerror or err}{f': {err.filename}' if getattr(err, 'filename', None) else ''}")
        except MemoryError:
            fail("out of memory; lower the batch size or sequence length")
        except RuntimeError as err:
            if "torch" not in sys.modules:
                raise
            from bertkit.engine.dist import peer_failure

            if (message := peer_failure(err)) is None:
                raise
            fail(message)

    return handled  # type: ignore[return-value]


def _drop_stdout_it_cannot_write() -> None:
    """After an OSError: if stdout cannot take what it still holds (the disk it writes to is full), send it to
    devnull, so that the interpreter's final flush does not fail again after the error line."""
    try:
        sys.stdout.flush()
    except OSError:
        # (a stdout without a descriptor, a test's capture, is left as it is)
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
            _stdout_to_devnull()


def _stdout_to_devnull() -> None:
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _end_tracked_runs(err: BaseException) -> None:
    """A job that stops before its summary ends its tracked runs as KILLED (a signal) or FAILED."""
    tracking = sys.modules.get("bertkit.engine.tracking")  # imported only by a job that trains
    if tracking is None or isinstance(err, SystemExit | typer.Exit):
        return
    interrupted = isinstance(err, KeyboardInterrupt) or getattr(err, "exit_code", None) == 130
    tracking.close_all("KILLED" if interrupted else "FAILED")


def emit(result: dict[str, Any], as_json: bool, title: str) -> None:
    """Print the result: one JSON line for pipelines, or a small table for people."""
    if as_json:
        sys.stdout.write(json.dumps(result, default=str) + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for key, value in result.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        elif isinstance(value, list):
            value = ", ".join(map(str, value))
        table.add_row(key, str(value))
    Console().print(table)

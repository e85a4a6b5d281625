"""`bertkit plot RUN_DIR...`: a run's training curves, or held-out accuracy of several runs side by side, as a PNG."""

from __future__ import annotations

from pathlib import Path

import typer

from bertkit.cli.common import JSON_HELP, QUIET_HELP, emit, guarded
from bertkit.errors import BertkitError


@guarded
def plot_command(
    run_dirs: list[Path] = typer.Argument(
        ...,
        help="Run directories (with metrics.jsonl) from pretrain or finetune; or the output of `bertkit evaluate` on "
        "a pretraining run's snapshots, for its suite score along the run.",
    ),
    output: Path | None = typer.Option(
        None,
        "--output",
        "-o",
        help="PNG to write; default RUN_DIR/curves.png, or EVAL_DIR/curve.png (needed when comparing).",
    ),
    compare: bool = typer.Option(
        False,
        "--compare",
        help="Held-out accuracy against training time and tokens, one line per run (the default for several runs).",
    ),
    metric: str | None = typer.Option(
        None, "--metric", help="Evaluation key to compare (default eval_mlm_acc, or eval_plm_acc for XLNet)."
    ),
    target: float | None = typer.Option(None, "--target", help="Draw this accuracy; report when each run reached it."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the PNG if it exists."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Plot one run's loss, learning rate and tokens/s, compare the held-out accuracy of several runs over time, or
    draw an evaluation's suite score against the tokens and time at which each snapshot was taken."""
    from bertkit.engine.plot import plot_compare, plot_run

    if len(run_dirs) == 1 and (run_dirs[0] / "report.json").is_file() and (run_dirs[0] / "plan.json").is_file():
        # An evaluation (bertkit evaluate) of a pretraining run's snapshots: its suite score along the run.
        from bertkit.pipelines.evaluate.report import plot_suite_curve

        summary = plot_suite_curve(run_dirs[0], output or run_dirs[0] / "curve.png", overwrite)
        emit(summary, json_out, "plot written")
        return
    if compare or len(run_dirs) > 1:
        if output is None:
            raise BertkitError("comparing runs needs --output FILE.png (there is no one run directory to write into)")
        summary = plot_compare(run_dirs, output, overwrite, metric, target)
    else:
        summary = plot_run(run_dirs[0], output or run_dirs[0] / "curves.png", overwrite)
    emit(summary, json_out, "plot written")

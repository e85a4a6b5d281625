"""`bertkit plot RUN_DIR`: loss, learning rate and throughput curves of a run as one PNG."""

from __future__ import annotations

from pathlib import Path

import typer

from bertkit.cli.common import JSON_HELP, OVERWRITE_HELP, QUIET_HELP, emit, guarded


@guarded
def plot_command(
    run_dir: Path = typer.Argument(..., help="A run directory (with metrics.jsonl) from pretrain or finetune."),
    output: Path | None = typer.Option(None, "--output", "-o", help="PNG to write; default RUN_DIR/curves.png."),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Plot training loss (and eval loss), learning rate and tokens/s of a run to a PNG."""
    from bertkit.engine.plot import plot_run

    target = output or run_dir / "curves.png"
    summary = plot_run(run_dir, target, overwrite)
    emit(summary, json_out, "plot written")

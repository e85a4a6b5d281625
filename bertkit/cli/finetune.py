"""`bertkit finetune`."""

from __future__ import annotations

from pathlib import Path

import typer

from bertkit.cli.common import (
    BUDGET_HELP,
    ENGINE_HELP,
    JSON_HELP,
    OVERWRITE_HELP,
    QUIET_HELP,
    RESUME_HELP,
    emit_main,
    engine_overrides,
    guarded,
)
from bertkit.cli.pretrain import SET_HELP


@guarded
def finetune_command(
    model: Path = typer.Option(..., "--model", "-m", help="A bertkit model or run directory (from pretrain)."),
    train: Path = typer.Option(..., "--train", help="Labelled examples: CSV with a header, or JSON lines."),
    output: Path = typer.Option(..., "--output", "-o", help="Run directory to write."),
    eval: Path | None = typer.Option(None, "--eval", help="Held-out examples; default: task.eval_fraction of --train."),
    recipe: str = typer.Option("finetune-classification", "--recipe", "-r", help="Fine-tuning recipe name or path."),
    text_field: str | None = typer.Option(None, "--text-field", help="Column with the text (task.text_field)."),
    text_pair_field: str | None = typer.Option(
        None, "--text-pair-field", help="Column with the second text, for pairs."
    ),
    label_field: str | None = typer.Option(None, "--label-field", help="Column with the label (task.label_field)."),
    feature_based: bool = typer.Option(False, "--feature-based", help="Freeze the encoder; train only the head."),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    engine: str | None = typer.Option(None, "--engine", help=ENGINE_HELP),
    budget: str | None = typer.Option(None, "--budget", help=BUDGET_HELP),
    resume: str | None = typer.Option(None, "--resume", metavar="last|auto", help=RESUME_HELP),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Fine-tune a pretrained encoder for text classification (single texts or pairs)."""
    from bertkit.config.recipe import load_recipe
    from bertkit.pipelines.finetune import finetune
    from bertkit.pipelines.rundir import resume_mode

    resume_mode(resume, overwrite)  # a bad --resume fails before the examples are encoded
    overrides = list(set_) + engine_overrides(engine, budget)
    for key, value in (("text_field", text_field), ("text_pair_field", text_pair_field), ("label_field", label_field)):
        if value is not None:
            overrides.append(f"task.{key}={value}")
    if feature_based:
        overrides.append("task.mode=feature")
    loaded = load_recipe(recipe, overrides, kind="finetune")
    summary = finetune(loaded, model, train, output, eval, overwrite, resume, quiet)  # type: ignore[arg-type]
    emit_main(summary, json_out, "fine-tuning done")

"""`bertkit finetune`."""

from __future__ import annotations

from pathlib import Path

import typer

from bertkit.cli.common import (
    BUDGET_HELP,
    ENGINE_HELP,
    ENGINES,
    JSON_HELP,
    OVERWRITE_HELP,
    QUIET_HELP,
    REPORT_TO_HELP,
    RESUME_HELP,
    TRACKERS,
    emit_main,
    engine_overrides,
    guarded,
    report_overrides,
)
from bertkit.cli.pretrain import SET_HELP


@guarded
def finetune_command(
    model: Path = typer.Option(
        ...,
        "--model",
        "-m",
        help="A bertkit model or run directory (pretrain, distill), or a local Hugging Face checkpoint directory.",
    ),
    train: Path = typer.Option(
        ...,
        "--train",
        help="Labelled examples: CSV/TSV with a header, JSON lines, Parquet, or a datasets directory (save_to_disk).",
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Run directory to write."),
    eval: Path | None = typer.Option(None, "--eval", help="Held-out examples; default: task.eval_fraction of --train."),
    recipe: str | None = typer.Option(
        None,
        "--recipe",
        "-r",
        help="Fine-tuning recipe name or path; default: the standard recipe of --task, finetune-<task> (see "
        "`bertkit recipes show --for finetune --task <task>`).",
    ),
    text_field: str | None = typer.Option(None, "--text-field", help="Column with the text (task.text_field)."),
    text_pair_field: str | None = typer.Option(
        None, "--text-pair-field", help="Column with the second text, for pairs."
    ),
    label_field: str | None = typer.Option(None, "--label-field", help="Column with the label (task.label_field)."),
    split: str | None = typer.Option(None, "--split", help="Split of a DatasetDict --train directory (task.split)."),
    eval_split: str | None = typer.Option(
        None, "--eval-split", help="Split of a DatasetDict --eval directory (task.eval_split)."
    ),
    skip_bad_rows: bool = typer.Option(
        False, "--skip-bad-rows", help="Skip (and count) rows with a missing or empty text or label instead of failing."
    ),
    task: str | None = typer.Option(
        None,
        "--task",
        metavar="classification|multi-label|regression|token-classification|question-answering|retrieval|similarity",
        help="What to learn (task.kind); multi-label reads lists of labels (or 'a|b' strings, task.label_separator); "
        "token-classification reads CoNLL, CoNLL-U or JSON lines (tokens, tags); question-answering reads SQuAD "
        "JSON or JSON lines (question, context, answers); retrieval reads (query, positive[, negative]) pairs and "
        "scores a BEIR folder or a pairs file; similarity reads scored sentence pairs (both train a bi-encoder).",
    ),
    pool: str | None = typer.Option(None, "--pool", metavar="cls|mean", help="Sentence representation (task.pool)."),
    feature_based: bool = typer.Option(
        False,
        "--feature-based",
        help="Freeze the encoder and fit a linear head on its features by L-BFGS (a probe; "
        "task.head_solver=optimizer trains the head with the recipe's optimizer instead).",
    ),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    engine: str | None = typer.Option(None, "--engine", metavar=ENGINES, help=ENGINE_HELP),
    budget: str | None = typer.Option(None, "--budget", help=BUDGET_HELP),
    report_to: list[str] = typer.Option([], "--report-to", metavar=TRACKERS, help=REPORT_TO_HELP),
    resume: str | None = typer.Option(None, "--resume", metavar="last|auto", help=RESUME_HELP),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Fine-tune a pretrained encoder for text classification (one label or several per text) or regression
    (single texts or pairs), for token classification (NER, POS), or for extractive question answering (SQuAD)."""
    from bertkit.config.recipe import default_recipe, load_recipe
    from bertkit.pipelines.finetune.run import finetune
    from bertkit.pipelines.rundir import resume_mode

    resume_mode(resume, overwrite)  # a bad --resume fails before the examples are encoded
    overrides = list(set_) + engine_overrides(engine, budget) + report_overrides(report_to)
    options = {
        "text_field": text_field,
        "text_pair_field": text_pair_field,
        "label_field": label_field,
        "split": split,
        "eval_split": eval_split,
        "pool": pool,
        "kind": task,
    }
    for key, value in options.items():
        if value is not None:
            overrides.append(f"task.{key}={value}")
    if skip_bad_rows:
        overrides.append("task.skip_bad_rows=true")
    if feature_based:
        overrides.append("task.mode=feature")
    # Each task brings its own recipe (QA windows, NER batch size...); --recipe replaces it, --task then sets the kind.
    loaded = load_recipe(recipe or default_recipe("finetune", task), overrides, kind="finetune")
    summary = finetune(loaded, model, train, output, eval, overwrite, resume, quiet)  # type: ignore[arg-type]
    emit_main(summary.as_json(), json_out, "fine-tuning done")

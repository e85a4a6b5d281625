"""`bertkit compress`."""

from __future__ import annotations

from pathlib import Path

import typer

from bertkit.cli.common import (
    JSON_HELP,
    OVERWRITE_HELP,
    QUIET_HELP,
    REPORT_TO_HELP,
    TRACKERS,
    check_seed,
    emit,
    engine_overrides,
    guarded,
    report_overrides,
)
from bertkit.cli.pretrain import SET_HELP


@guarded
def compress_command(
    teacher: str = typer.Option(
        ...,
        "--teacher",
        "-t",
        help="A fine-tuned classifier: a run of `bertkit finetune`, or a Hugging Face "
        "*ForSequenceClassification checkpoint.",
    ),
    train: Path = typer.Option(
        ..., "--train", help="The labelled training data (CSV/TSV, JSON lines, Parquet, a datasets directory)."
    ),
    eval: Path = typer.Option(..., "--eval", help="Held-out labelled data: every row of the table is scored on it."),
    output: Path = typer.Option(..., "--output", "-o", help="Directory to write (OUT/model is the student)."),
    layers: int = typer.Option(2, "--layers", "-n", help="Student depth: this many teacher layers are copied."),
    student: Path | None = typer.Option(
        None, "--student", help="A generally distilled student (run of `bertkit distill`) instead of a copy."
    ),
    copies: int | None = typer.Option(
        None, "--copies", help="Augmented copies per example (default: about 20,000 examples in all, 1 to 20)."
    ),
    no_augment: bool = typer.Option(False, "--no-augment", help="Distil on the training data as it is."),
    candidates_from: str = typer.Option(
        "auto", "--candidates-from", metavar="auto|mlm|embeddings", help="Where augmentation's words come from."
    ),
    mlm_model: Path | None = typer.Option(
        None, "--mlm-model", help="An MLM on the teacher's tokenizer for augmentation."
    ),
    no_baseline: bool = typer.Option(False, "--no-baseline", help="Skip the gold-label fine-tuning baseline."),
    budget: str | None = typer.Option(
        None,
        "--budget",
        help="Bound the distillation stage, e.g. 20m or 5Mtok: it stops at the first step past it "
        "and keeps the model it has (train.budget of the distill-task recipe).",
    ),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP + " Applies to the distill-task recipe."),
    baseline_set: list[str] = typer.Option([], "--baseline-set", help="Dotted overrides of the baseline's recipe."),
    report_to: list[str] = typer.Option(
        [], "--report-to", metavar=TRACKERS, help=REPORT_TO_HELP + " Each stage is a run nested under one parent."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the augmentation."),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """From a fine-tuned classifier to a small fast one: copy N layers, augment the data, distil (TinyBERT's
    task stage), fine-tune the same copy on gold labels as the baseline, and print the table to decide by. A
    bi-encoder teacher (a retrieval model, a sentence-transformers directory) takes (query, positive) pairs as
    --train and a BEIR folder or pairs as --eval: its copy learns the teacher's vectors beside the ranking loss."""
    from bertkit.pipelines.compress import CompressOptions, compress

    opts = CompressOptions(layers=layers, student=student, augment=not no_augment, copies=copies,
                           candidates_from=candidates_from, mlm_model=mlm_model, baseline=not no_baseline,
                           overrides=list(set_) + engine_overrides(None, budget) + report_overrides(report_to),
                           baseline_overrides=list(baseline_set) + report_overrides(report_to),
                           seed=check_seed(seed))  # fmt: skip
    result = compress(teacher, train, eval, output, opts, overwrite=overwrite, quiet=quiet).as_json()
    if json_out:
        emit(result, True, "compressed")
        return
    print_table(result)


def print_table(result: dict) -> None:
    """The table to decide by: a classifier's (accuracy, sentences/s) or a bi-encoder's (nDCG@10, texts/s)."""
    from rich.console import Console
    from rich.table import Table

    info = result["inference"]
    if result.get("kind") == "bi-encoder":
        held_out = result["eval_set"]
        scored = f"{held_out['queries']} queries over {held_out['documents']} documents"
        speed, speed_label, score, score_label, digits = "texts_per_s", "texts/s", "ndcg@10", "nDCG@10", 4
    else:
        scored = f"{result['eval_examples']} held-out examples"
        speed, speed_label, score, score_label, digits = "sentences_per_s", "sent/s", "accuracy", "accuracy", 3
    table = Table(title=f"compress: {scored}; inference batch {info['batch_size']}, max length {info['max_length']}, "
                  f"{info['threads']} CPU threads, fp32")  # fmt: skip
    for column in ("model", "params", speed_label, "speed-up", score_label, "% of teacher"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for row in result["rows"]:
        share = "-" if row["percent_of_teacher"] is None else f"{row['percent_of_teacher']:.1f}%"
        table.add_row(row["model"], f"{row['parameters'] / 1e6:.1f}M", f"{row[speed]:,.0f}",
                      f"{row['speedup']:.2f}x", f"{row[score]:.{digits}f}", share)  # fmt: skip
    console = Console()
    console.print(table)
    stages = ", ".join(f"{k} {v:.0f} s" for k, v in result["stage_seconds"].items())
    console.print(f"student: {result['model_dir']}  ({stages}; {result['seconds']:.0f} s in all)")

"""`bertkit augment`."""

from __future__ import annotations

from pathlib import Path

import typer

from bertkit.cli.common import JSON_HELP, QUIET_HELP, check_seed, emit, guarded


@guarded
def augment_command(
    model: Path = typer.Option(
        ...,
        "--model",
        "-m",
        help="The teacher: a bertkit model or run directory, or a local Hugging Face checkpoint. Its MLM head "
        "proposes words when it has one; its word-embedding table gives neighbours.",
    ),
    candidates_from: str = typer.Option(
        "auto",
        "--candidates-from",
        metavar="auto|mlm|embeddings",
        help="mlm: the MLM's predictions in context (TinyBERT); embeddings: neighbours in the teacher's word-"
        "embedding table for every word; auto: mlm when --mlm-model is given or the teacher has an MLM head.",
    ),
    mlm_model: Path | None = typer.Option(
        None,
        "--mlm-model",
        help="An MLM model on the teacher's tokenizer that proposes the words (e.g. the "
        "pretrained checkpoint a fine-tuned teacher came from).",
    ),
    input: Path = typer.Option(
        ..., "--input", "-i", help="Task data: CSV/TSV, JSON lines, Parquet, a datasets directory, or text lines."
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", help="Augmented data, in the input's format (a datasets directory: any table format)."
    ),
    copies: int = typer.Option(20, "--copies", "-n", help="New examples drawn per example (duplicates dropped)."),
    prob: float = typer.Option(0.4, "--prob", "-p", help="Chance that each word is replaced, in (0, 1]."),
    candidates: int = typer.Option(15, "--candidates", "-k", help="Candidates per word (top-K MLM or neighbours)."),
    seed: int = typer.Option(0, "--seed", help="Random seed: the same seed gives the same output."),
    text_field: str = typer.Option("text", "--text-field", help="Column with the text."),
    text_pair_field: str | None = typer.Option(None, "--text-pair-field", help="Column with a second text."),
    label_field: str = typer.Option("label", "--label-field", help="Column with the label ('' for none)."),
    split: str | None = typer.Option(None, "--split", help="Split of a DatasetDict directory."),
    batch_size: int = typer.Option(64, "--batch-size", help="Masked words per teacher forward pass."),
    device: str = typer.Option("auto", "--device", metavar="auto|cpu|cuda", help="Where to run the teacher."),
    threads: int | None = typer.Option(None, "--threads", help="CPU threads for the teacher (default: torch's)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the output file if it exists."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """TinyBERT data augmentation: copies of each example with words (alphabetic, no stop words or
    negations) replaced by MLM predictions in context or by neighbours in the teacher's embedding table."""
    from bertkit.pipelines.augment import AugmentOptions, augment

    opts = AugmentOptions(
        copies=copies,
        prob=prob,
        candidates=candidates,
        seed=check_seed(seed),
        text_field=text_field,
        text_pair_field=text_pair_field or None,
        label_field=label_field or None,
        split=split,
        batch_size=batch_size,
        device=device,
        threads=threads,
        candidates_from=candidates_from,
        mlm_model=mlm_model,
    )
    result = augment(model, input, output, opts, overwrite=overwrite, quiet=quiet)
    emit(result, json_out, "augmented data written")

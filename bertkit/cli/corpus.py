"""`bertkit build-corpus` and `bertkit corpus inspect`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from bertkit.cli.common import JSON_HELP, OVERWRITE_HELP, QUIET_HELP, emit, guarded

if TYPE_CHECKING:
    from bertkit.corpus.build import BuildOptions

app = typer.Typer(
    help="Look inside built corpora, and merge the parts of a corpus built as several tasks.", no_args_is_help=True
)


@guarded
def build_corpus_command(
    input: list[str] = typer.Option(
        ...,
        "--input",
        "-i",
        help="Text files (.txt, .gz, .bz2, .zst), JSON lines (.jsonl, .json, .ndjson), CSV/TSV with a header row, "
        "Parquet (.parquet, .pq) or a datasets save_to_disk directory (every split); globs ok; s3:// (fsspec) URLs "
        "and URL globs too.",
    ),
    tokenizer: str = typer.Option(
        ...,
        "--tokenizer",
        "-t",
        help="Tokenizer directory (or its s3:// URL), or a model whose tokenizer to use: a bertkit run or model "
        "dir, a Hugging Face checkpoint dir or a hub name (continued pretraining: the --init-from model).",
    ),
    output: str = typer.Option(
        ..., "--output", "-o", help="Corpus directory to write, or an s3:// URL (built locally, uploaded whole)."
    ),
    format: str = typer.Option(
        "full-sentences",
        "--format",
        metavar="full-sentences|doc-sentences|segment-pair|sentence-pair|sop|single-segment|packed-documents",
        help="Packing: full-sentences, doc-sentences (RoBERTa), segment-pair, sentence-pair (BERT NSP), "
        "sop (ALBERT), single-segment (SpanBERT, ELECTRA), packed-documents (ModernBERT: several documents per "
        "row, attention within each).",
    ),
    layout: str = typer.Option(
        "bert",
        "--layout",
        metavar="bert|xlnet",
        help="Special tokens: bert ([CLS] A [SEP] B [SEP]) or xlnet (A [SEP] B [SEP] [CLS], for the xlnet-* recipes).",
    ),
    max_seq_len: int = typer.Option(128, "--max-seq-len", help="Tokens per sequence, specials included."),
    splitter: str = typer.Option(
        "rules",
        "--splitter",
        metavar="rules|pysbd|lines",
        help="Sentence splitter: rules (English, Korean), pysbd, lines.",
    ),
    text_field: str = typer.Option(
        "text",
        "--text-field",
        help="Field (column) holding the text in JSON lines, CSV/TSV, Parquet or datasets input.",
    ),
    masking: str = typer.Option(
        "dynamic",
        "--masking",
        metavar="dynamic|static",
        help="dynamic: masked by the loader, new each epoch; static: masked here.",
    ),
    mask_strategy: str = typer.Option(
        "token",
        "--mask-strategy",
        metavar="token|whole-word|ngram|span",
        help="token, whole-word, ngram (ALBERT), span (SpanBERT).",
    ),
    mask_prob: float = typer.Option(0.15, "--mask-prob", help="Fraction of maskable tokens to predict."),
    max_predictions: int = typer.Option(0, "--max-predictions", help="Cap on predictions per sequence (0: none)."),
    dupe_factor: int = typer.Option(
        1,
        "--dupe-factor",
        help="Static masking: copies of the text, each with its own masks and, in a pair format, its own pairs "
        "(BERT: 10).",
    ),
    short_seq_prob: float | None = typer.Option(
        None,
        "--short-seq-prob",
        help="Chance that a sequence aims at a shorter random length (BERT's): 0.1 for segment-pair unless set, 0 for "
        "full-sentences, doc-sentences and single-segment (set it to keep short inputs in a long-context corpus).",
    ),
    seed: int = typer.Option(12345, "--seed", help="Seed of packing and static masks."),
    workers: int = typer.Option(1, "--workers", "-w", help="Tokenizing processes; the output does not depend on it."),
    tasks: int | None = typer.Option(
        None,
        "--tasks",
        help="Build as this many independent tasks (a SLURM job array): --output is then a directory of parts "
        "that every task names, joined by `bertkit corpus merge`.",
    ),
    task_index: int | None = typer.Option(
        None, "--task-index", help="With --tasks: which task this is, 0 to N-1 (default: $SLURM_ARRAY_TASK_ID)."
    ),
    invalid_utf8: str = typer.Option(
        "error", "--invalid-utf8", metavar="error|replace", help="error, or replace bad bytes with U+FFFD."
    ),
    long_sentences: str = typer.Option(
        "split", "--long-sentences", metavar="split|error", help="split (counted) or error."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Documents to packed, memory-mapped token shards, in any BERT-family format and masking scheme."""
    from bertkit.corpus.build import BuildOptions, build_corpus
    from bertkit.corpus.pack import PAIR_FORMATS
    from bertkit.inputs.sources import expand_inputs
    from bertkit.progress import Tracker

    options = BuildOptions(
        format=format,
        layout=layout,
        max_seq_len=max_seq_len,
        splitter=splitter,
        text_field=text_field,
        masking=masking,
        mask_strategy=mask_strategy,
        mask_prob=mask_prob,
        max_predictions=max_predictions,
        dupe_factor=dupe_factor,
        # One option, two settings: segment-pair's chunks (BERT's, 0.1 unless set), the other formats' sequences (0).
        **({"short_seq_prob": short_seq_prob if short_seq_prob is not None else 0.1} if format in PAIR_FORMATS
           else {"short_seq_share": short_seq_prob or 0.0}),  # fmt: skip
        seed=seed,
        invalid_utf8=invalid_utf8,
        long_sentences=long_sentences,
    )
    options.validate()
    if tasks is not None or task_index is not None:
        _run_task(input, tokenizer, output, options, tasks, task_index, workers, overwrite, json_out, quiet)
        return
    total = sum(p.stat().st_size for p in expand_inputs(input))
    with Tracker("corpus", total=total, quiet=quiet, unit="bytes") as tracker:
        manifest = build_corpus(input, tokenizer, output, options, overwrite, tracker.advance, workers=workers)
    manifest.pop("checksums", None)
    emit(manifest, json_out, "corpus built")


def _run_task(
    inputs: list[str],
    tokenizer: str,
    parts: str,
    options: BuildOptions,
    tasks: int | None,
    task_index: int | None,
    workers: int,
    overwrite: bool,
    json_out: bool,
    quiet: bool,
) -> None:
    from bertkit.corpus.tasks import resolve_task_index, run_task
    from bertkit.errors import BertkitError
    from bertkit.progress import Tracker

    if tasks is None:
        raise BertkitError("--task-index needs --tasks N (the number of tasks in the array)")
    if overwrite:
        raise BertkitError(
            "--overwrite does not apply to --tasks: finished parts are kept and skipped; to start over, "
            f"delete {parts} first (with no task running)"
        )
    index = resolve_task_index(task_index, tasks)
    with Tracker(f"task {index}/{tasks}", total=None, quiet=quiet, unit="bytes") as tracker:
        result = run_task(
            inputs, tokenizer, Path(parts), options, tasks, index, tracker.advance, workers, tracker.set_total
        )
    title = f"task {index} of {tasks}: " + ("already done, skipped" if result["skipped"] else "part built")
    emit(result, json_out, title)


@app.command("merge")
@guarded
def merge_command(
    parts: Path = typer.Argument(..., help="Directory of parts written by build-corpus --tasks N."),
    output: str = typer.Option(..., "--output", "-o", help="Corpus directory to write, or an s3:// URL."),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Join the parts of `build-corpus --tasks N` into one corpus: the one `build-corpus` writes on one machine."""
    from bertkit.corpus.merge import merge_parts
    from bertkit.corpus.tasks import load_plan
    from bertkit.progress import Tracker

    total = sum(item["size"] for item in load_plan(parts).inputs) if parts.is_dir() else None
    with Tracker("merge", total=total, quiet=quiet, unit="bytes") as tracker:
        manifest = merge_parts(parts, output, overwrite, tracker.advance)
    manifest.pop("checksums", None)
    emit(manifest, json_out, "corpus merged")


@app.command("inspect")
@guarded
def inspect_command(
    corpus: Path = typer.Argument(..., help="Corpus directory written by build-corpus."),
    examples: int = typer.Option(2, "--examples", "-n", help="Sequences to decode, with their masks."),
    sample: int = typer.Option(2000, "--sample", help="Sequences to draw the mask statistics from."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Counts, length histogram, mask statistics and a few decoded examples, as the model will see them."""
    from bertkit.corpus.inspect import inspect_corpus

    result = inspect_corpus(corpus, examples, sample)
    if json_out:
        emit(result, True, "")
        return
    examples_out = result.pop("examples")
    emit(result, False, f"corpus {corpus}")
    from rich.console import Console
    from rich.text import Text

    console = Console()
    for item in examples_out:
        label = f"  {item['pair_label']}" if "pair_label" in item else ""
        console.rule(f"sequence {item['index']}{label}")
        # Text objects, not markup strings: "[MASK]" must print as itself, not as a style tag.
        console.print(Text.assemble(("text     ", "bold"), item["text"]))
        console.print(Text.assemble(("masked   ", "bold"), item["masked_input"]))
        console.print(Text.assemble(("targets  ", "bold"), " ".join(item["targets"])))

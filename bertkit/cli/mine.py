"""`bertkit mine-negatives`."""

from __future__ import annotations

from pathlib import Path

import typer

from bertkit.cli.common import JSON_HELP, OVERWRITE_HELP, QUIET_HELP, emit, guarded


@guarded
def mine_negatives_command(
    model: Path = typer.Option(..., "--model", "-m", help="The bi-encoder to mine with (a bertkit run, a "
                               "sentence-transformers or Hugging Face directory), usually the one being trained."),
    train: Path = typer.Option(..., "--train", help="The (query, positive) pairs to add negatives to."),
    output: Path = typer.Option(..., "--output", "-o", help="JSON lines: the pairs with a `negative` column."),
    negatives: int = typer.Option(1, "--negatives", help="Hard negatives per pair (a list when more than one)."),
    corpus: Path | None = typer.Option(None, "--corpus", help="More candidate passages: a BEIR folder, text lines or "
                                       "a table with a `text` column (default: the pairs' own positives)."),
    query_field: str = typer.Option("query", "--query-field", help="The pairs' query column."),
    positive_field: str = typer.Option("positive", "--positive-field", help="The pairs' positive column."),
    max_relative: float = typer.Option(0.95, "--max-relative", help="Skip a candidate the query scores above this "
                                       "share of its positive's score (near-duplicates, unlabelled answers)."),
    skip_top: int = typer.Option(0, "--skip-top", help="Pass over this many best-ranked candidates first."),
    max_seq_len: int | None = typer.Option(None, "--max-seq-len", help="Tokens per text (default: as the model "
                                           "was trained, else its positions)."),
    batch_size: int = typer.Option(64, "--batch-size", help="Texts per forward pass."),
    device: str = typer.Option("auto", "--device", metavar="auto|cpu|cuda", help="Where to run the model."),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:  # fmt: skip
    """Hard negatives for retrieval pairs, mined with a bi-encoder: each query's best-ranked passages that are not
    its positives nor too close to them."""
    from bertkit.pipelines.mine_negatives import mine_negatives

    result = mine_negatives(model, train, output, negatives, corpus, query_field, positive_field, max_relative,
                            skip_top, max_seq_len, batch_size, device, overwrite, quiet or json_out)  # fmt: skip
    emit(result, json_out, "negatives written")

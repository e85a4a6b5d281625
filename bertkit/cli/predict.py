"""`bertkit predict`."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from bertkit.cli.common import QUIET_HELP, emit, guarded
from bertkit.inputs.delimited import QUOTINGS

PREDICT_JSON_HELP = (
    "Print one JSON summary object as the last line of stdout; needs --output FILE, since with stdout output "
    "the predictions themselves are stdout's lines."
)


@guarded
def predict_command(
    model: Path = typer.Option(
        ...,
        "--model",
        "-m",
        help="A fine-tuned run or model directory (bertkit finetune), or its ONNX export (bertkit export --to onnx).",
    ),
    input: Path = typer.Option(
        ...,
        "--input",
        "-i",
        help="Text lines (one text per non-empty line; NER: split on whitespace), JSON lines, CSV/TSV or Parquet; "
        "question answering: SQuAD JSON or JSON lines (question, context).",
    ),
    output: str = typer.Option("-", "--output", "-o", help="JSON lines file to write; '-' (the default) is stdout."),
    batch_size: int = typer.Option(32, "--batch-size", help="Rows per forward pass."),
    text_field: str | None = typer.Option(
        None, "--text-field", help="Field with the text (default: the one the model was fine-tuned on; NER: tokens)."
    ),
    text_pair_field: str | None = typer.Option(
        None, "--text-pair-field", help="Field with the second text, for pair models (default: as fine-tuned)."
    ),
    max_seq_len: int | None = typer.Option(
        None, "--max-seq-len", help="Truncate to this many tokens (default: as fine-tuned)."
    ),
    device: str = typer.Option("auto", "--device", metavar="auto|cpu|cuda", help="Where to run the model."),
    threads: int = typer.Option(
        0, "--threads", help="CPU threads (PyTorch's, or ONNX Runtime's for an ONNX export); 0: the library's default."
    ),
    quoting: str | None = typer.Option(
        None,
        "--quoting",
        metavar="|".join(QUOTINGS),
        help="How a CSV/TSV input is quoted: csv (fields may be quoted) or none (a field is everything between "
        "separators, as in GLUE's TSV files). Default: a TSV input as the model's training files were read "
        "(task.quoting), a CSV input csv.",
    ),
    corpus: Path | None = typer.Option(
        None,
        "--corpus",
        help="A bi-encoder (retrieval, similarity, sentence-transformers): search this corpus (a BEIR folder, text "
        "lines or a table's text column) for each input row; one line per query with its --top-k hits.",
    ),
    top_k: int = typer.Option(10, "--top-k", help="With --corpus: hits per query."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the output file if it exists."),
    json_out: bool = typer.Option(False, "--json", help=PREDICT_JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Predictions of a fine-tuned model (PyTorch, or ONNX Runtime for an ONNX export), one JSON line per input
    row, in input order."""
    from bertkit.errors import BertkitError
    from bertkit.pipelines.predict.run import predict

    if device not in ("auto", "cpu", "cuda"):
        raise BertkitError(f"--device takes auto, cpu or cuda, not '{device}'")
    to_stdout = output == "-"
    if json_out and to_stdout:
        raise BertkitError("--json needs --output FILE: with stdout output the predictions are stdout's lines")
    if corpus is not None:
        from bertkit.pipelines.predict.search import search

        if text_pair_field is not None or quoting is not None:
            raise BertkitError("--text-pair-field and --quoting do not apply to --corpus: a search reads one text a "
                               "row")
        result = search(model, input, corpus, None if to_stdout else Path(output), top_k, text_field, max_seq_len,
                        batch_size, overwrite, device, quiet, threads)  # fmt: skip
    else:
        result = predict(
            model,
            input,
            None if to_stdout else Path(output),
            batch_size=batch_size,
            text_field=text_field,
            text_pair_field=text_pair_field,
            max_seq_len=max_seq_len,
            overwrite=overwrite,
            device=device,
            quiet=quiet,
            threads=threads,
            quoting=quoting,  # type: ignore[arg-type]  # checked by predict
        )
    if to_stdout:
        # stdout holds the predictions alone: the summary goes to stderr (unless --quiet).
        if not quiet:
            sys.stderr.write(f"predict done: {result['rows']} rows in {result['seconds']} s\n")
        return
    emit(result, json_out, "predictions written")

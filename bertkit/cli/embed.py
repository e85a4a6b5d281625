"""`bertkit embed`."""

from __future__ import annotations

from pathlib import Path

import typer

from bertkit.cli.common import JSON_HELP, QUIET_HELP, emit, guarded
from bertkit.inputs.delimited import QUOTINGS


@guarded
def embed_command(
    model: Path = typer.Option(
        ...,
        "--model",
        "-m",
        help="A bertkit model or run directory, a local Hugging Face checkpoint, or an encoder's ONNX export.",
    ),
    input: Path = typer.Option(
        ...,
        "--input",
        "-i",
        help="Text lines (one text per non-empty line), or CSV/TSV, JSON lines, Parquet, a datasets directory.",
    ),
    output: Path = typer.Option(..., "--output", "-o", help="X.npy (float32 rows) or X.parquet (text, embedding)."),
    pool: str | None = typer.Option(
        None,
        "--pool",
        metavar="mean|cls",
        help="Mean over non-padding tokens, or [CLS]; by default as the model was trained to pool (a bi-encoder, a "
        "sentence-transformers directory), else mean.",
    ),
    normalize: bool | None = typer.Option(
        None,
        "--normalize/--no-normalize",
        help="Scale each vector to unit length; by default as the model was trained (a bi-encoder, a "
        "sentence-transformers directory with a Normalize module), else not.",
    ),
    layer: int = typer.Option(-1, "--layer", help="Hidden layer to pool: -1 the last, 0 the embeddings' output."),
    max_seq_len: int | None = typer.Option(
        None,
        "--max-seq-len",
        help="Truncate texts to this many tokens; by default the window the model was trained with (a bi-encoder, a "
        "sentence-transformers directory), else its positions.",
    ),
    batch_size: int = typer.Option(32, "--batch-size", help="Texts per forward pass."),
    text_field: str = typer.Option("text", "--text-field", help="Column with the text, for table inputs."),
    split: str | None = typer.Option(None, "--split", help="Split of a DatasetDict directory."),
    skip_bad_rows: bool = typer.Option(False, "--skip-bad-rows", help="Skip (and count) rows without text."),
    quoting: str = typer.Option(
        "csv",
        "--quoting",
        metavar="|".join(QUOTINGS),
        help="How a CSV/TSV input is quoted: csv (fields may be quoted) or none (a field is everything between "
        "separators, as in GLUE's TSV files).",
    ),
    device: str = typer.Option("auto", "--device", metavar="auto|cpu|cuda", help="Where to run the model."),
    threads: int = typer.Option(
        0, "--threads", help="CPU threads (PyTorch's, or ONNX Runtime's for an ONNX export); 0: the library's default."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the output file if it exists."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Sentence embeddings of texts from a model directory, in input order."""
    from bertkit.pipelines.embed import embed

    if device not in ("auto", "cpu", "cuda"):
        from bertkit.errors import BertkitError

        raise BertkitError(f"--device takes auto, cpu or cuda, not '{device}'")
    result = embed(
        model,
        input,
        output,
        pool=pool,
        normalize=normalize,
        layer=layer,
        max_seq_len=max_seq_len,
        batch_size=batch_size,
        text_field=text_field,
        split=split,
        skip_bad_rows=skip_bad_rows,
        overwrite=overwrite,
        device=device,
        quiet=quiet,
        threads=threads,
        quoting=quoting,  # type: ignore[arg-type]  # checked by embed
    )
    emit(result, json_out, "embeddings written")

"""`bertkit tokenize train|encode`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from bertkit.cli.common import JSON_HELP, OVERWRITE_HELP, QUIET_HELP, emit, guarded

app = typer.Typer(help="Train and apply WordPiece and byte-level BPE tokenizers.", no_args_is_help=True)


@app.command("train")
@guarded
def train_command(
    input: list[Path] = typer.Option(
        ..., "--input", "-i", help="Text files (.txt, .gz, .bz2, .zst, .jsonl); globs ok."
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Tokenizer directory to write."),
    kind: str = typer.Option("wordpiece", "--kind", help="wordpiece (BERT/ELECTRA) or bbpe (RoBERTa)."),
    vocab_size: int = typer.Option(30522, "--vocab-size", help="Vocabulary size, special tokens included."),
    lowercase: bool = typer.Option(True, "--lowercase/--cased", help="WordPiece: lowercase the text."),
    strip_accents: bool = typer.Option(
        True, "--strip-accents/--keep-accents", help="WordPiece: strip accents (Hangul is kept intact)."
    ),
    min_frequency: int = typer.Option(2, "--min-frequency", help="Ignore pieces seen fewer times."),
    text_field: str = typer.Option("text", "--text-field", help="Field holding the text in JSON lines input."),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Train a tokenizer; writes tokenizer.json, the native vocab files and bertkit_tokenizer.json."""
    from bertkit.corpus.sources import expand_inputs
    from bertkit.progress import Tracker
    from bertkit.tokenizers.train import train_tokenizer

    total = sum(p.stat().st_size for p in expand_inputs(input))
    with Tracker("tokenizer", total=total, quiet=quiet, unit="bytes") as tracker:
        result = train_tokenizer(
            kind,
            input,
            output,
            vocab_size,
            lowercase,
            strip_accents,
            min_frequency,
            text_field,
            overwrite,
            on_progress=tracker.advance,
        )
    emit(result, json_out, "tokenizer trained")


@app.command("encode")
@guarded
def encode_command(
    tokenizer: Path = typer.Option(..., "--tokenizer", "-t", help="Tokenizer directory (bertkit or Hugging Face)."),
    input: Path | None = typer.Option(None, "--input", "-i", help="Text file, one text per line; default stdin."),
    tokens: bool = typer.Option(False, "--tokens", help="Also print the token strings."),
    special_tokens: bool = typer.Option(False, "--special-tokens", help="Add [CLS]/[SEP] (or <s>/</s>)."),
    batch_lines: int = typer.Option(4096, "--batch-lines", help="Lines encoded together (parallel inside)."),
) -> None:
    """Encode text line by line to JSON lines of ids: `cat text | bertkit tokenize encode -t DIR`."""
    from bertkit.tokenizers.base import load_tokenizer

    tok = load_tokenizer(tokenizer)
    source = open(input, encoding="utf-8", errors="replace") if input else sys.stdin  # noqa: SIM115
    out = sys.stdout

    def flush(lines: list[str]) -> None:
        encodings = tok.backend.encode_batch(lines, add_special_tokens=special_tokens)
        for enc in encodings:
            record = {"ids": enc.ids, "tokens": enc.tokens} if tokens else {"ids": enc.ids}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")

    batch: list[str] = []
    try:
        for line in source:
            batch.append(line.rstrip("\n"))
            if len(batch) >= batch_lines:
                flush(batch)
                batch = []
        if batch:
            flush(batch)
    finally:
        if input:
            source.close()

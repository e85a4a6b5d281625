"""`bertkit tokenize train|encode|inspect|extend`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from bertkit.cli.common import JSON_HELP, OVERWRITE_HELP, QUIET_HELP, check_seed, emit, guarded

app = typer.Typer(
    help="Train, apply and inspect WordPiece, byte-level BPE and SentencePiece tokenizers.", no_args_is_help=True
)

TOKENIZER_HELP = "Tokenizer directory: made by bertkit, or a Hugging Face one (tokenizer.json, vocab.txt, ...)."


@app.command("train")
@guarded
def train_command(
    input: list[Path] = typer.Option(
        ...,
        "--input",
        "-i",
        help="Text (.txt, .gz, .bz2, .zst), JSON lines (.jsonl), CSV/TSV with a header row, Parquet, or a datasets "
        "save_to_disk dir; globs ok.",
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Tokenizer directory to write."),
    kind: str = typer.Option(
        "wordpiece",
        "--kind",
        metavar="wordpiece|bbpe|sentencepiece-unigram|sentencepiece-bpe",
        help="wordpiece (BERT/ELECTRA), bbpe (RoBERTa), sentencepiece-unigram or sentencepiece-bpe (ALBERT/XLNet).",
    ),
    vocab_size: int = typer.Option(30522, "--vocab-size", help="Vocabulary size, special tokens included."),
    lowercase: Optional[bool] = typer.Option(
        None, "--lowercase/--cased", help="Lowercase the text (default: wordpiece lowercases, the others do not)."
    ),
    strip_accents: Optional[bool] = typer.Option(
        None, "--strip-accents/--keep-accents", help="WordPiece: strip accents (default: as --lowercase); Hangul stays."
    ),
    chinese_chars: bool = typer.Option(
        True, "--chinese-chars/--no-chinese-chars", help="WordPiece: split around every CJK ideograph, as BERT."
    ),
    min_frequency: int = typer.Option(2, "--min-frequency", help="WordPiece/BPE: ignore pieces seen fewer times."),
    limit_alphabet: Optional[int] = typer.Option(
        None, "--limit-alphabet", help="WordPiece: keep only the N most frequent characters."
    ),
    character_coverage: float = typer.Option(
        0.9995, "--character-coverage", help="SentencePiece: share of characters kept (rarer ones are unknown)."
    ),
    byte_fallback: bool = typer.Option(
        False, "--byte-fallback/--no-byte-fallback", help="SentencePiece: spell unknown characters as <0xNN> bytes."
    ),
    max_sentences: int = typer.Option(
        2_000_000, "--max-sentences", help="SentencePiece: lines sampled (uniformly, from all input) into memory."
    ),
    threads: int = typer.Option(0, "--threads", help="Worker threads (0: all cores)."),
    seed: int = typer.Option(0, "--seed", help="SentencePiece: seed of the sentence sampling."),
    text_field: str = typer.Option(
        "text", "--text-field", help="Field/column holding the text (JSON lines, CSV/TSV, Parquet, datasets)."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Train a tokenizer; writes tokenizer.json, the native files (vocab.txt; vocab.json+merges.txt; spm.model)
    and bertkit_tokenizer.json."""
    from bertkit.inputs.sources import expand_inputs, input_size, is_plain_text
    from bertkit.progress import Tracker
    from bertkit.tokenizers.train import TrainOptions, train_tokenizer

    check_seed(seed)
    paths = expand_inputs(input)
    # Compressed and columnar inputs hold more text than their size on disk: show a rate, not a percentage.
    total = input_size(paths) if all(is_plain_text(p) for p in paths) else None
    options = TrainOptions(
        lowercase=lowercase,
        strip_accents=strip_accents,
        chinese_chars=chinese_chars,
        min_frequency=min_frequency,
        limit_alphabet=limit_alphabet,
        character_coverage=character_coverage,
        byte_fallback=byte_fallback,
        max_sentences=max_sentences,
        threads=threads,
        seed=seed,
    )
    with Tracker("reading text", total=total, quiet=quiet, unit="bytes") as tracker:
        result = train_tokenizer(
            kind,
            [str(p) for p in paths],
            output,
            vocab_size,
            text_field=text_field,
            overwrite=overwrite,
            on_progress=tracker.advance,
            options=options,
        )
    _note_replaced_lines(result["invalid_utf8_lines"], quiet)
    emit(result, json_out, "tokenizer trained")


def _text_lines(input: Path | None, counter: dict[str, int]):
    """Lines of a file or stdin, read as bytes so that invalid UTF-8 is replaced and counted, never fatal."""
    from bertkit.errors import BertkitError

    if input is not None and not input.is_file():
        raise BertkitError(f"input file not found: {input}")
    source = open(input, "rb") if input is not None else sys.stdin.buffer  # noqa: SIM115
    try:
        for raw in source:
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                counter["invalid_utf8_lines"] += 1
                line = raw.decode("utf-8", errors="replace")
            yield line.rstrip("\r\n")
    finally:
        if input is not None:
            source.close()


@app.command("encode")
@guarded
def encode_command(
    tokenizer: Path = typer.Option(..., "--tokenizer", "-t", help=TOKENIZER_HELP),
    input: Optional[Path] = typer.Option(None, "--input", "-i", help="Text file, one text per line; default stdin."),
    tokens: bool = typer.Option(False, "--tokens", help="Also print the token strings."),
    special_tokens: bool = typer.Option(False, "--special-tokens", help="Add [CLS]/[SEP] (or <s>/</s>)."),
    batch_lines: int = typer.Option(8192, "--batch-lines", help="Lines encoded together (in parallel)."),
    json_out: bool = typer.Option(False, "--json", help="After the id lines, print one summary JSON object."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Encode text line by line to JSON lines of ids: `cat text | bertkit tokenize encode -t DIR`."""
    from bertkit.errors import BertkitError
    from bertkit.tokenizers.base import load_tokenizer

    if batch_lines < 1:
        raise BertkitError(f"--batch-lines must be at least 1, not {batch_lines}")
    tok = load_tokenizer(tokenizer)
    counter = {"lines": 0, "tokens": 0, "invalid_utf8_lines": 0}
    out = sys.stdout  # one write per batch: the per-line cost is building the row strings
    backend = tok.backend

    def flush(lines: list[str]) -> None:
        if tokens:
            encodings = backend.encode_batch(lines, add_special_tokens=special_tokens)
            rows = [json.dumps({"ids": e.ids, "tokens": e.tokens}, ensure_ascii=False) for e in encodings]
        else:
            # Ids only: no offsets to compute, and ints need no JSON escaping.
            encodings = backend.encode_batch_fast(lines, add_special_tokens=special_tokens)
            rows = ['{"ids": [' + ", ".join(map(str, e.ids)) + "]}" for e in encodings]
        counter["lines"] += len(lines)
        counter["tokens"] += sum(len(e.ids) for e in encodings)
        out.write("\n".join(rows) + "\n")

    batch: list[str] = []
    for line in _text_lines(input, counter):
        batch.append(line)
        if len(batch) >= batch_lines:
            flush(batch)
            batch = []
    if batch:
        flush(batch)
    out.flush()
    _note_replaced_lines(counter["invalid_utf8_lines"], quiet)
    if json_out:
        out.write(json.dumps(counter) + "\n")
        out.flush()


@app.command("inspect")
@guarded
def inspect_command(
    tokenizer: Path = typer.Option(..., "--tokenizer", "-t", help=TOKENIZER_HELP),
    input: Optional[Path] = typer.Option(
        None, "--input", "-i", help="Sample text, one text per line, for fertility and unknown rate ('-': stdin)."
    ),
    max_lines: int = typer.Option(100_000, "--max-lines", help="Read at most this many sample lines."),
    top: int = typer.Option(10, "--top", help="How many of the most split words to list."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Vocabulary size and special tokens; on sample text, fertility (tokens per word), the unknown-token rate
    and the most split words."""
    import itertools

    from bertkit.tokenizers.base import load_tokenizer
    from bertkit.tokenizers.stats import sample_statistics, vocabulary_summary

    tok = load_tokenizer(tokenizer)
    result = vocabulary_summary(tok)
    if input is not None:
        counter = {"invalid_utf8_lines": 0}
        lines = _text_lines(None if str(input) == "-" else input, counter)
        sample = (line for line in itertools.islice(lines, max_lines) if line.strip())
        result.update(sample_statistics(tok, sample, top))
        result["invalid_utf8_lines"] = counter["invalid_utf8_lines"]
    if json_out:
        emit(result, True, "tokenizer")
        return
    _print_inspection(result)


@app.command("extend")
@guarded
def extend_command(
    tokenizer: str = typer.Option(
        ...,
        "--tokenizer",
        "-t",
        help="The tokenizer to extend: a tokenizer directory, or a model's (bertkit run or model dir, Hugging Face "
        "checkpoint dir, hub name).",
    ),
    input: list[str] = typer.Option(
        ...,
        "--input",
        "-i",
        help="Domain text to choose words from: text, JSON lines, CSV/TSV, Parquet or a datasets dir; globs ok.",
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Tokenizer directory to write."),
    add: int = typer.Option(0, "--add", "-n", help="How many words to add: those the tokenizer splits worst."),
    words: Optional[Path] = typer.Option(
        None, "--words", help="Add exactly these words (a file, one per line) instead of choosing them."
    ),
    min_frequency: int = typer.Option(2, "--min-frequency", help="Only words seen at least this often."),
    text_field: str = typer.Option(
        "text", "--text-field", help="Field/column holding the text (JSON lines, CSV/TSV, Parquet, datasets)."
    ),
    max_lines: int = typer.Option(1_000_000, "--max-lines", help="Read at most this many lines of the input."),
    invalid_utf8: str = typer.Option(
        "error", "--invalid-utf8", metavar="error|replace", help="error, or replace bad bytes with U+FFFD."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Add the domain words a tokenizer splits worst (frequency x pieces saved) as single tokens, for continued
    pretraining with `pretrain --init-from MODEL` on a corpus built with the result; reports each word and the
    fertility (tokens per word) of the input before and after."""
    from bertkit.pipelines.extend_vocab import extend_vocabulary

    result = extend_vocabulary(tokenizer, input, output, add, words, min_frequency, text_field, max_lines, overwrite,
                               quiet, invalid_utf8)  # fmt: skip
    _note_replaced_lines(result["invalid_utf8_lines"], quiet)
    if json_out or quiet:
        emit(result, json_out, "tokenizer extended")
        return
    _print_extension(result)


def _print_extension(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"{result['added']} words added to {result['base']}", title_justify="left")
    for column in ("id", "word", "frequency", "pieces before", "tokens saved"):
        table.add_column(column)
    for row in result["words"]:
        table.add_row(str(row["id"]), row["word"], str(row["frequency"]), " ".join(row["pieces"]),
                      str(row["tokens_saved"]))  # fmt: skip
    console.print(table)
    before, after = result["fertility"]["before"], result["fertility"]["after"]
    console.print(
        f"vocabulary {result['vocab_size']['before']} -> {result['vocab_size']['after']}; on {result['lines']} input "
        f"lines, fertility {before} -> {after} tokens per word ({result['tokens']['before']} -> "
        f"{result['tokens']['after']} tokens); written to {result['output']}"
    )


def _print_inspection(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="tokenizer", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for key in ("path", "kind", "vocab_size"):
        table.add_row(key, str(result[key]))
    specials = result["special_tokens"]
    table.add_row("special tokens", ", ".join(f"{role}={v['token']} ({v['id']})" for role, v in specials.items()))
    for key in ("sample_lines", "sample_words", "sample_tokens", "fertility", "unknown_rate", "split_word_rate"):
        if key in result:
            table.add_row(key, str(result[key]))
    console.print(table)
    if result.get("most_split_words"):
        words = Table(title="most split words", title_justify="left")
        for column in ("word", "tokens", "pieces"):
            words.add_column(column)
        for row in result["most_split_words"]:
            words.add_row(row["word"], str(row["tokens"]), " ".join(row["pieces"]))
        console.print(words)


def _note_replaced_lines(count: int, quiet: bool) -> None:
    """The one line that says how many input lines held bytes that are not UTF-8, read as U+FFFD."""
    if count and not quiet:
        sys.stderr.write(f"note: {count} line(s) had invalid UTF-8, replaced with U+FFFD\n")

"""`bertkit build-corpus` and `bertkit corpus inspect`."""

from __future__ import annotations

from pathlib import Path

import typer

from bertkit.cli.common import JSON_HELP, OVERWRITE_HELP, QUIET_HELP, emit, guarded

app = typer.Typer(help="Look inside built corpora.", no_args_is_help=True)


@guarded
def build_corpus_command(
    input: list[Path] = typer.Option(
        ..., "--input", "-i", help="Text files (.txt, .gz, .bz2, .zst, .jsonl); globs ok."
    ),
    tokenizer: Path = typer.Option(..., "--tokenizer", "-t", help="Tokenizer directory."),
    output: Path = typer.Option(..., "--output", "-o", help="Corpus directory to write."),
    format: str = typer.Option("full-sentences", "--format", help="Packing: full-sentences (RoBERTa)."),
    max_seq_len: int = typer.Option(128, "--max-seq-len", help="Tokens per sequence, [CLS]/[SEP] included."),
    splitter: str = typer.Option("rules", "--splitter", help="Sentence splitter: rules or lines."),
    text_field: str = typer.Option("text", "--text-field", help="Field holding the text in JSON lines input."),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Documents to packed, memory-mapped token shards, masked dynamically when served."""
    from bertkit.corpus.build import BuildOptions, build_corpus
    from bertkit.corpus.sources import expand_inputs
    from bertkit.errors import BertkitError
    from bertkit.progress import Tracker

    if format != "full-sentences":
        raise BertkitError(f"unknown --format '{format}'; available: full-sentences")
    options = BuildOptions(max_seq_len=max_seq_len, splitter=splitter, text_field=text_field)
    total = sum(p.stat().st_size for p in expand_inputs(input))
    with Tracker("corpus", total=total, quiet=quiet, unit="bytes") as tracker:
        manifest = build_corpus(input, tokenizer, output, options, overwrite, on_progress=tracker.advance)
    manifest.pop("checksums", None)
    emit(manifest, json_out, "corpus built")


@app.command("inspect")
@guarded
def inspect_command(
    corpus: Path = typer.Argument(..., help="Corpus directory written by build-corpus."),
    examples: int = typer.Option(2, "--examples", "-n", help="Sequences to decode, with their masks."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Counts, length histogram and a few decoded examples with the masks the model would see."""
    import numpy as np

    from bertkit.corpus.build import TOKENIZER_SUBDIR
    from bertkit.corpus.loader import MLMBatches
    from bertkit.corpus.masking import MaskingSpec
    from bertkit.corpus.shards import Corpus
    from bertkit.tokenizers.base import load_tokenizer

    data = Corpus(corpus)
    tok = load_tokenizer(corpus / TOKENIZER_SUBDIR)
    lengths = data.lengths()
    edges = np.unique(np.linspace(0, int(lengths.max()), 9).round().astype(int))
    counts, _ = np.histogram(lengths, bins=edges)
    spec = MaskingSpec(0.15, 0.8, 0.1, tok.mask_id, tok.special_ids, tok.vocab_size)
    batches = MLMBatches(data, np.arange(len(data)), 1, spec, tok.pad_id, seed=0, shuffle=False)
    shown = []
    for index in range(min(examples, len(data))):
        ids, positions, labels = batches.masked(0, index)
        shown.append(
            {
                "index": index,
                "text": tok.decode(data[index].tolist(), skip_special_tokens=False),
                "masked_input": tok.decode(ids.tolist(), skip_special_tokens=False),
                "targets": [tok.id_to_token(int(t)) for t in labels],
            }
        )
    result = {
        "corpus": str(corpus),
        "sequences": len(data),
        "tokens": int(lengths.sum()),
        "mean_length": round(float(lengths.mean()), 1),
        "max_length": int(lengths.max()),
        "length_histogram": {
            f"{int(a)}-{int(b)}": int(c) for a, b, c in zip(edges[:-1], edges[1:], counts, strict=True)
        },
        "options": data.manifest["options"],
        "stats": data.manifest["stats"],
        "examples": shown,
    }
    if json_out:
        emit(result, True, "")
        return
    examples_out = result.pop("examples")
    emit(result, False, f"corpus {corpus}")
    from rich.console import Console
    from rich.text import Text

    console = Console()
    for item in examples_out:
        console.rule(f"sequence {item['index']}")
        # Text objects, not markup strings: "[MASK]" must print as itself, not as a style tag.
        console.print(Text.assemble(("text     ", "bold"), item["text"]))
        console.print(Text.assemble(("masked   ", "bold"), item["masked_input"]))
        console.print(Text.assemble(("targets  ", "bold"), " ".join(item["targets"])))

"""`bertkit build-corpus` as a library call: documents -> sentences -> token ids -> packed shards."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from bertkit.corpus.pack import PackStats, pack_full_sentences
from bertkit.corpus.sentences import get_splitter
from bertkit.corpus.shards import ShardWriter
from bertkit.corpus.sources import ReadStats, expand_inputs, iter_documents
from bertkit.errors import BertkitError
from bertkit.fsutil import atomic_output_dir
from bertkit.tokenizers.base import Tokenizer, load_tokenizer

TOKENIZER_SUBDIR = "tokenizer"
# Documents tokenized together: large enough for `tokenizers` to use every core, small enough to bound memory.
DOCS_PER_BATCH = 256


@dataclass(frozen=True)
class BuildOptions:
    format: Literal["full-sentences"] = "full-sentences"
    max_seq_len: int = 128
    splitter: str = "rules"
    text_field: str = "text"
    masking: Literal["dynamic"] = "dynamic"


def _tokenized_documents(
    documents: Iterator[list[str]], tokenizer: Tokenizer, split: Callable[[str], list[str]]
) -> Iterator[list[list[int]]]:
    batch: list[list[str]] = []

    def encode(batch: list[list[str]]) -> Iterator[list[list[int]]]:
        flat = [sentence for doc in batch for sentence in doc]
        ids = tokenizer.encode_batch(flat)
        start = 0
        for doc in batch:
            yield ids[start : start + len(doc)]
            start += len(doc)

    for document in documents:
        sentences = [s for paragraph in document for s in split(paragraph)]
        if sentences:
            batch.append(sentences)
        if len(batch) >= DOCS_PER_BATCH:
            yield from encode(batch)
            batch = []
    if batch:
        yield from encode(batch)


def build_corpus(
    inputs: list[str] | list[Path],
    tokenizer_dir: Path,
    output: Path,
    options: BuildOptions = BuildOptions(),
    overwrite: bool = False,
    on_progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Build a corpus directory; returns its manifest plus the read/pack statistics."""
    if options.max_seq_len < 8:
        raise BertkitError(f"--max-seq-len {options.max_seq_len} is too short; use at least 8")
    paths = expand_inputs(inputs)
    tokenizer = load_tokenizer(tokenizer_dir)
    split = get_splitter(options.splitter)
    read_stats, pack_stats = ReadStats(), PackStats()
    started = time.perf_counter()
    with atomic_output_dir(output, overwrite) as tmp:
        writer = ShardWriter(tmp, tokenizer.vocab_size)
        documents = iter_documents(paths, read_stats, options.text_field)
        sequences = pack_full_sentences(
            _tokenized_documents(documents, tokenizer, split),
            options.max_seq_len,
            tokenizer.cls_id,
            tokenizer.sep_id,
            pack_stats,
        )
        last_bytes = 0
        for sequence in sequences:
            writer.add(sequence)
            if on_progress and read_stats.bytes != last_bytes:
                on_progress(read_stats.bytes - last_bytes)
                last_bytes = read_stats.bytes
        if writer.num_sequences == 0:
            raise BertkitError(f"no text found in {', '.join(map(str, paths))}: the corpus would be empty")
        tokenizer.save(tmp / TOKENIZER_SUBDIR)
        manifest = writer.close(
            {
                "options": asdict(options),
                "tokenizer": {
                    "fingerprint": tokenizer.fingerprint(),
                    "kind": tokenizer.kind,
                    "vocab_size": tokenizer.vocab_size,
                },
                "inputs": [str(p) for p in paths],
                "stats": {
                    "documents": read_stats.documents,
                    "lines": read_stats.lines,
                    "bytes": read_stats.bytes,
                    "invalid_utf8_lines": read_stats.invalid_utf8_lines,
                    "split_sentences": pack_stats.split_sentences,
                    "padding_fraction": round(pack_stats.padding_fraction, 4),
                },
            }
        )
    manifest["seconds"] = round(time.perf_counter() - started, 2)
    manifest["output"] = str(output)
    return manifest

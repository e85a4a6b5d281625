"""`bertkit build-corpus` as a library call: documents -> sentences -> token ids -> packed, masked shards.

The main process reads documents and packs; sentence splitting and tokenization run in `workers`
processes on fixed-size blocks of documents whose results are consumed in order, at most a few blocks
ahead. So memory is bounded by a few blocks whatever the corpus size, and the output is byte-identical
whatever the worker count: the blocks, the packing RNG and the static-mask RNG never depend on it.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.corpus.masking import STRATEGIES, MaskingSpec, mask_tokens
from bertkit.corpus.pack import FORMATS, LAYOUTS, PAIR_FORMATS, Document, Packed, Packer, PackStats
from bertkit.corpus.remote import build_to_url
from bertkit.corpus.sentences import get_splitter
from bertkit.corpus.shards import MANIFEST, ShardWriter
from bertkit.errors import BertkitError
from bertkit.fsutil import atomic_output_dir, read_json, remove_dead_tmp_dirs
from bertkit.inputs.remote import is_url
from bertkit.inputs.sources import INVALID_UTF8, ReadStats, expand_inputs, iter_documents
from bertkit.modelio.layout import tokenizer_source
from bertkit.tokenizers.base import Tokenizer, load_tokenizer

TOKENIZER_SUBDIR = "tokenizer"
# A block (the unit of work of a worker, and NSP's pool of "other documents") closes at this many documents
# or characters, whichever comes first: it depends on the input only, never on the worker count.
DOCS_PER_BLOCK = 256
CHARS_PER_BLOCK = 1 << 20


# What --masking and --long-sentences take (FORMATS, LAYOUTS and STRATEGIES: pack.py, masking.py; INVALID_UTF8:
# inputs/sources.py).
MASKINGS = ("dynamic", "static")
LONG_SENTENCES = ("split", "error")


@dataclass(frozen=True)
class BuildOptions:
    format: str = "full-sentences"
    layout: str = "bert"  # where the special tokens go: bert [CLS] A [SEP] B [SEP], xlnet A [SEP] B [SEP] [CLS]
    max_seq_len: int = 128
    splitter: str = "rules"
    text_field: str = "text"
    masking: str = "dynamic"  # or "static": masks drawn here, dupe_factor copies
    mask_strategy: str = "token"
    mask_prob: float = 0.15
    mask_fraction: float = 0.8
    random_fraction: float = 0.1
    max_predictions: int = 0  # 0: no cap
    dupe_factor: int = 1  # static masks: copies, each its own masks (and pairs, for a pair format) (BERT: 10)
    short_seq_prob: float = 0.1  # segment-pair: the chance a chunk aims at a shorter random length (BERT's)
    # full-sentences, doc-sentences, single-segment: the chance a sequence aims at a shorter random length, so that a
    # long-context corpus keeps short inputs (`--short-seq-prob` on those formats; 0: every sequence aims at the
    # whole length, as these formats always packed).
    short_seq_share: float = 0.0
    seed: int = 12345
    invalid_utf8: str = "error"  # or "replace"
    long_sentences: str = "split"  # or "error"

    def validate(self) -> None:
        checks = [
            (self.format in FORMATS, f"unknown --format '{self.format}'; choose one of {', '.join(FORMATS)}"),
            (
                self.layout in LAYOUTS,
                f"unknown --layout '{self.layout}'; choose bert ([CLS] A [SEP] B [SEP]) "
                "or xlnet (A [SEP] B [SEP] [CLS])",
            ),
            (
                not (self.format == "packed-documents" and self.layout == "xlnet"),
                "--format packed-documents keeps documents apart with attention XLNet's two-stream attention does "
                "not read; use --layout bert (or another --format for XLNet)",
            ),
            (self.max_seq_len >= 8, f"--max-seq-len {self.max_seq_len} is too short; use at least 8"),
            (self.masking in MASKINGS, f"--masking must be static or dynamic, not '{self.masking}'"),
            (
                self.mask_strategy in STRATEGIES,
                f"unknown --mask-strategy '{self.mask_strategy}'; choose one of {', '.join(STRATEGIES)}",
            ),
            (0.0 < self.mask_prob < 1.0, f"--mask-prob must be between 0 and 1, not {self.mask_prob}"),
            (self.max_predictions >= 0, "--max-predictions must be 0 (no cap) or positive"),
            (self.dupe_factor >= 1, "--dupe-factor must be at least 1"),
            (self.dupe_factor == 1 or self.masking == "static", "--dupe-factor only makes sense with --masking static"),
            (0.0 <= self.short_seq_prob <= 1.0, "--short-seq-prob must be between 0 and 1"),
            (0.0 <= self.short_seq_share <= 1.0, "--short-seq-prob must be between 0 and 1"),
            (
                not (self.short_seq_share and self.format == "packed-documents"),
                "--format packed-documents already places short pieces several to a row; drop --short-seq-prob",
            ),
            (
                not (self.short_seq_share and self.format in PAIR_FORMATS),
                f"short_seq_share applies to full-sentences, doc-sentences and single-segment; {self.format} takes "
                "short_seq_prob",
            ),
            (self.invalid_utf8 in INVALID_UTF8, "--invalid-utf8 must be error or replace"),
            (self.long_sentences in LONG_SENTENCES, "--long-sentences must be split or error"),
            (self.seed >= 0, f"--seed must be 0 or more, not {self.seed}"),
        ]
        for ok, message in checks:
            if not ok:
                raise BertkitError(message)

    def masking_spec(self, tokenizer: Tokenizer) -> MaskingSpec:
        return MaskingSpec(
            self.mask_prob,
            self.mask_fraction,
            self.random_fraction,
            tokenizer.mask_id,
            tokenizer.special_ids,
            tokenizer.vocab_size,
            strategy=self.mask_strategy,
            max_predictions=self.max_predictions,
        )


# -- tokenization, in this process or in workers -------------------------------------------------------
_worker: dict[str, Any] = {}


def _init_worker(tokenizer_dir: str, splitter: str, parallel: bool) -> None:
    if not parallel:
        # Several worker processes already use the cores; nested thread pools would only contend.
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _worker["tokenizer"] = load_tokenizer(tokenizer_dir)
    _worker["split"] = get_splitter(splitter)


def _tokenize_block(block: list[list[str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split and tokenize a block of documents: flat ids, word-start flags, sentence lengths, sentences per doc."""
    split, tokenizer = _worker["split"], _worker["tokenizer"]
    sentences: list[str] = []
    per_doc = np.zeros(len(block), np.int64)
    for d, document in enumerate(block):
        for paragraph in document:
            pieces = split(paragraph)
            sentences.extend(pieces)
            per_doc[d] += len(pieces)
    encodings = tokenizer.backend.encode_batch(sentences, add_special_tokens=False) if sentences else []
    lengths = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
    total = int(lengths.sum())
    ids = np.fromiter((i for e in encodings for i in e.ids), np.int64, total)
    word_ids = np.fromiter((-1 if w is None else w for e in encodings for w in e.word_ids), np.int64, total)
    # A token starts a word when its word index changes (the tokenizer's own pre-tokenization boundaries,
    # the same for WordPiece, byte-level BPE and SentencePiece) and at every sentence start.
    starts = np.ones(total, np.uint8)
    if total > 1:
        starts[1:] = (word_ids[1:] != word_ids[:-1]) | (word_ids[1:] < 0)
    sentence_starts = np.cumsum(lengths)[:-1]
    starts[sentence_starts[sentence_starts < total]] = 1
    return ids, starts, lengths, per_doc


def as_documents(result: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> list[Document]:
    ids, starts, lengths, per_doc = result
    bounds = np.cumsum(lengths)[:-1]
    sentences = (
        list(zip(np.split(ids, bounds), np.split(starts.astype(bool), bounds), strict=True)) if len(lengths) else []
    )
    documents, at = [], 0
    for count in per_doc:
        documents.append([s for s in sentences[at : at + int(count)] if len(s[0])])
        at += int(count)
    return documents


TokenizedBlock = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def tokenize_blocks(
    blocks: Iterable[list[list[str]]], tokenizer_dir: Path, splitter: str, workers: int
) -> Iterator[tuple[list[list[str]], TokenizedBlock]]:
    """(block, its flat tokenization) in input order. Each document's result depends on that document only,
    not on the block around it, which is what lets `--tasks` tokenize slices of the input apart."""
    if workers <= 1:
        _init_worker(str(tokenizer_dir), splitter, parallel=True)
        for block in blocks:
            yield block, _tokenize_block(block)
        return
    context = multiprocessing.get_context("spawn")  # no fork of a threaded parent (progress bar, Rust pools)
    with context.Pool(workers, initializer=_init_worker, initargs=(str(tokenizer_dir), splitter, False)) as pool:
        pending: deque = deque()
        for block in blocks:
            pending.append((block, pool.apply_async(_tokenize_block, (block,))))
            if len(pending) >= 2 * workers:  # bounded read-ahead, results taken in submission order
                done, result = pending.popleft()
                yield done, result.get()
        while pending:
            done, result = pending.popleft()
            yield done, result.get()


def _tokenized_blocks(
    blocks: Iterable[list[list[str]]], tokenizer_dir: Path, splitter: str, workers: int
) -> Iterator[list[Document]]:
    for _, result in tokenize_blocks(blocks, tokenizer_dir, splitter, workers):
        yield as_documents(result)


def block_is_full(documents: int, chars: int) -> bool:
    """Where a block closes: shared by the build and by `corpus merge`, which regroups documents the same way."""
    return documents >= DOCS_PER_BLOCK or chars >= CHARS_PER_BLOCK


def document_chars(document: list[str]) -> int:
    return sum(len(line) for line in document)


def document_blocks(documents: Iterator[list[str]], stats: ReadStats, paths: list[Path], policy: str):
    block: list[list[str]] = []
    chars = 0
    for document in documents:
        if stats.invalid_utf8_lines and policy == "error":
            current = paths[min(stats.files, len(paths)) - 1]
            raise BertkitError(
                f"{current} is not valid UTF-8 (first bad line among its first {stats.lines} lines read); "
                "fix the file or pass --invalid-utf8 replace to replace bad bytes with U+FFFD"
            )
        block.append(document)
        chars += document_chars(document)
        if block_is_full(len(block), chars):
            yield block
            block, chars = [], 0
    if block:
        yield block


# -- restartability ---------------------------------------------------------------------------------------
def copies_packed_apart(options: BuildOptions) -> bool:
    """Static copies of a pair format are each packed afresh: their own chunk lengths, segment pairs and labels."""
    return options.masking == "static" and options.dupe_factor > 1 and options.format in PAIR_FORMATS


def build_key(paths: list[Path], tokenizer: Tokenizer, options: BuildOptions) -> str:
    """What makes two builds the same corpus: inputs (name, size, mtime), tokenizer and options."""
    files = [(str(p), p.stat().st_size, int(p.stat().st_mtime)) for p in paths]
    recorded = asdict(options)
    if not recorded["short_seq_share"]:  # added later: left out at its default, so earlier builds keep their key
        del recorded["short_seq_share"]
    parts: list[Any] = [files, tokenizer.fingerprint(), recorded]
    if copies_packed_apart(options):  # not the corpus of copies sharing one packing that earlier builds made
        parts.append("copies packed apart")
    blob = json.dumps(parts, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def check_existing(output: Path, key: str, overwrite: bool) -> None:
    if overwrite or not (output / MANIFEST).is_file():
        return
    existing = read_json(output / MANIFEST, "corpus manifest")
    if existing.get("build_key") != key:
        raise BertkitError(
            f"output {output} already holds a different corpus (format {existing.get('options', {}).get('format')}, "
            f"tokenizer {existing.get('tokenizer', {}).get('fingerprint')}); pass --overwrite to replace it "
            "or choose another --output"
        )
    raise BertkitError(
        f"output {output} already holds this very corpus (same inputs, tokenizer and options); "
        "use it as is, or pass --overwrite to rebuild it"
    )


# -- the build --------------------------------------------------------------------------------------------
def build_corpus(
    inputs: list[str] | list[Path],
    tokenizer_dir: Path | str,
    output: Path | str,
    options: BuildOptions = BuildOptions(),
    overwrite: bool = False,
    on_progress: Callable[[int], None] | None = None,
    workers: int = 1,
) -> dict[str, Any]:
    """Build a corpus directory (or an s3:// / fsspec URL: built locally, uploaded whole); returns its manifest
    (statistics included) plus timing."""
    options.validate()
    if workers < 1:
        raise BertkitError("--workers must be at least 1")
    if is_url(output):
        paths = expand_inputs(inputs)  # a missing input fails before anything is staged
        return build_to_url(
            lambda local: build_corpus(paths, tokenizer_dir, local, options, False, on_progress, workers),
            str(output),
            overwrite,
        )
    output = Path(output)
    paths = expand_inputs(inputs)
    tokenizer_dir = tokenizer_source(tokenizer_dir)  # a directory, its URL, or a model's (run, checkpoint, hub)
    tokenizer = load_tokenizer(tokenizer_dir)
    get_splitter(options.splitter)  # fail now on an unknown or missing splitter, not in a worker
    key = build_key(paths, tokenizer, options)
    check_existing(output, key, overwrite)
    stale = remove_dead_tmp_dirs(output)
    read_stats = ReadStats()
    started = time.perf_counter()
    with atomic_output_dir(output, overwrite) as tmp:
        documents = iter_documents(paths, read_stats, options.text_field)
        blocks = document_blocks(documents, read_stats, paths, options.invalid_utf8)
        tokenized = _tokenized_blocks(blocks, tokenizer_dir, options.splitter, workers)
        manifest = write_corpus(tmp, tokenized, tokenizer, options, read_stats, key, paths, on_progress)
    manifest["seconds"] = round(time.perf_counter() - started, 2)
    manifest["output"] = str(output)
    manifest["workers"] = workers
    if stale:
        manifest["removed_stale_builds"] = stale
    return manifest


def _packed_by_each(tokenized: Iterable[list[Document]], packers: list[Packer]) -> Iterator[tuple[int, Packed]]:
    """(packer index, sequence): each block through every packer in turn, so memory stays at a block."""
    for block in tokenized:
        for n, packer in enumerate(packers):
            for packed in packer.pack_block(block):
                yield n, packed
    for n, packer in enumerate(packers):
        for packed in packer.finish():
            yield n, packed


def write_corpus(
    tmp: Path,
    tokenized: Iterable[list[Document]],
    tokenizer: Tokenizer,
    options: BuildOptions,
    read_stats: ReadStats,
    key: str,
    inputs: list[Path] | list[str],
    on_progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Pack, mask and write tokenized blocks into the directory `tmp`; returns the manifest it wrote.

    The one place that turns documents into corpus files, for `build-corpus` and for `corpus merge` alike:
    `read_stats` is filled by whoever reads the documents, as `tokenized` is consumed."""
    pair_format = options.format in PAIR_FORMATS
    static = options.masking == "static"
    spec = options.masking_spec(tokenizer)
    candidates = spec.random_candidates()
    pack_stats = PackStats()
    documents_packed = options.format == "packed-documents"
    writer = ShardWriter(tmp, tokenizer.vocab_size, pair_format, static, documents=documents_packed)
    # BERT's create_pretraining_data runs over the documents once a copy: every copy draws its own chunk lengths,
    # segment pairs and NSP labels, not only its own masks. The pair formats do the same; the other formats
    # draw nothing but, with short_seq_share, their sequences' lengths, and their copies are one packing masked
    # `dupe_factor` times.
    repacked = copies_packed_apart(options)
    packers = [
        Packer(
            options.format,
            options.max_seq_len,
            tokenizer.cls_id,
            tokenizer.sep_id,
            np.random.default_rng([options.seed, 0x9AC4, *([copy] if copy else [])]),
            options.short_seq_prob if options.format in PAIR_FORMATS else options.short_seq_share,
            pack_stats if copy == 0 else PackStats(),  # the manifest's statistics: one packing of the input
            options.layout,
        )
        for copy in range(options.dupe_factor if repacked else 1)
    ]
    # Static copies a packed sequence is masked into: its packer's own copy, or every copy of the one packing.
    masks_per_sequence = (1 if repacked else options.dupe_factor) if static else 0
    counts = [0] * len(packers)  # sequences packed so far by each packer: each sequence's static-mask stream
    last_bytes = 0
    for n, packed in _packed_by_each(tokenized, packers):
        if options.long_sentences == "error" and pack_stats.split_sentences:
            raise BertkitError(
                f"a sentence is longer than --max-seq-len {options.max_seq_len} (around document "
                f"{read_stats.documents}); raise --max-seq-len, split the line, or pass --long-sentences split"
            )
        starts = packed.word_starts.astype(np.uint8)
        if not static:
            writer.add(packed.ids, starts, packed.b_start, packed.label, doc_starts=packed.doc_starts)
        for copy in range(n, n + masks_per_sequence):
            rng = np.random.default_rng([options.seed, 0x57A7, counts[n], copy])
            masked = mask_tokens(packed.ids, packed.word_starts, spec, rng, candidates)
            mask = (masked.positions, masked.labels, masked.spans)
            writer.add(masked.ids, starts, packed.b_start, packed.label, mask, packed.doc_starts)
        counts[n] += 1
        if on_progress and read_stats.bytes != last_bytes:
            on_progress(read_stats.bytes - last_bytes)
            last_bytes = read_stats.bytes
    if writer.num_sequences == 0:
        raise BertkitError(f"no text found in {', '.join(map(str, inputs))}: the corpus would be empty")
    tokenizer.save(tmp / TOKENIZER_SUBDIR)
    manifest = writer.close(
        {
            "build_key": key,
            "format": options.format,
            "options": asdict(options),
            "masking": {
                "mode": options.masking,
                "strategy": options.mask_strategy,
                "prob": options.mask_prob,
                "mask_fraction": options.mask_fraction,
                "random_fraction": options.random_fraction,
                "max_predictions": options.max_predictions,
                "copies": options.dupe_factor if static else 1,
                "copies_packed_apart": repacked,  # each copy its own segment pairs (a pair format's static copies)
            },
            "tokenizer": {
                "fingerprint": tokenizer.fingerprint(),
                "kind": tokenizer.kind,
                "vocab_size": tokenizer.vocab_size,
            },
            "inputs": [str(p) for p in inputs],
            "stats": {
                "files": read_stats.files,
                "documents": read_stats.documents,
                "lines": read_stats.lines,
                "bytes": read_stats.bytes,
                "invalid_utf8_lines": read_stats.invalid_utf8_lines,
                **pack_stats.report(),
            },
        }
    )
    return manifest

"""Memory-mapped corpus files: token shard, word-start flags, sequence index, static masks, manifest.

Layout of a corpus directory:
  tokens.bin        all sequences back to back (specials included), uint16 when the vocabulary fits, else uint32;
                    for a statically masked corpus these are the corrupted ids the model sees
  word_starts.bin   uint8 per token: 1 where a word starts (tokenizer word boundaries), for whole-word,
                    n-gram and span masking at serving time
  offsets.npy       int64, len(sequences) + 1; sequence i is tokens[offsets[i]:offsets[i+1]]
  pairs.npy         int32 (sequences, 2): first token of segment B (0: one segment) and the NSP/SOP label
                    (0 actual next / in order, 1 random / swapped, -1 none); only for pair formats
  doc_starts.bin, doc_offsets.npy
                    packed-documents only: int32 first token of every document within its sequence, and
                    int64 len(sequences) + 1 offsets into it (sequence i's documents start at
                    doc_starts[doc_offsets[i]:doc_offsets[i+1]]); attention stays within each document
  masks.bin, mask_labels.bin, mask_offsets.npy, spans.bin, span_offsets.npy
                    static masking only: masked positions (int32) and original ids per sequence, and the
                    masked units as [start, end) pairs (SpanBERT's spans, for the span boundary objective)
  manifest.json     format, tokenizer fingerprint, options, counts and sha256 of every file above
Everything is written streaming (bounded memory) and read through memory maps, so a corpus larger than
memory costs only the pages actually touched.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.errors import BertkitError
from bertkit.fsutil import hash_file_into, read_json, write_json_atomic

MANIFEST = "manifest.json"
TOKENS = "tokens.bin"
WORD_STARTS = "word_starts.bin"
OFFSETS = "offsets.npy"
PAIRS = "pairs.npy"
MASKS, MASK_LABELS, MASK_OFFSETS = "masks.bin", "mask_labels.bin", "mask_offsets.npy"
SPANS, SPAN_OFFSETS = "spans.bin", "span_offsets.npy"
DOC_STARTS, DOC_OFFSETS = "doc_starts.bin", "doc_offsets.npy"
CORPUS_VERSION = 2


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.uint32)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    hash_file_into(digest, path)
    return digest.hexdigest()


class _Stream:
    """Append-only binary column, buffered; `to_npy` turns the raw file into a .npy once its length is known."""

    def __init__(self, path: Path, dtype: np.dtype | type, flush_items: int = 1 << 20) -> None:
        self.path, self.dtype = path, np.dtype(dtype)
        self._handle = open(path, "wb")  # noqa: SIM115 (closed in close())
        self._buffer: list[np.ndarray] = []
        self._buffered = 0
        self.count = 0
        self._flush_items = flush_items

    def add(self, values: np.ndarray) -> None:
        array = np.ascontiguousarray(values, dtype=self.dtype)
        self._buffer.append(array)
        self._buffered += array.size
        self.count += array.size
        # Also bound the number of pending arrays: one small array per sequence costs ~100 bytes of
        # Python object overhead, which would otherwise grow with the corpus until the item limit.
        if self._buffered >= self._flush_items or len(self._buffer) >= 4096:
            self.flush()

    def flush(self) -> None:
        if self._buffer:
            self._handle.write(np.concatenate(self._buffer).tobytes())
            self._buffer, self._buffered = [], 0

    def close(self) -> None:
        self.flush()
        self._handle.close()

    def to_npy(self, target: Path, columns: int = 1) -> None:
        """Write `target` as a .npy of shape (count,) or (count // columns, columns), copying in blocks."""
        self.close()
        shape = (self.count,) if columns == 1 else (self.count // columns, columns)
        with open(target, "wb") as out, open(self.path, "rb") as raw:
            np.lib.format.write_array_header_1_0(
                out, {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": shape}
            )
            for block in iter(lambda: raw.read(1 << 22), b""):
                out.write(block)
        os.remove(self.path)


class ShardWriter:
    """Stream sequences (with word starts, pair info and static masks) into a corpus directory."""

    def __init__(
        self,
        directory: Path,
        vocab_size: int,
        pairs: bool = False,
        static_masks: bool = False,
        documents: bool = False,
    ) -> None:
        self.directory = directory
        self.dtype = token_dtype(vocab_size)
        self.pairs, self.static_masks, self.documents = pairs, static_masks, documents
        if documents:
            self._doc_starts = _Stream(directory / DOC_STARTS, np.int32)
            self._doc_offsets = _Stream(directory / ".doc_offsets.raw", np.int64)
            self._doc_offsets.add(np.zeros(1, np.int64))
        self._tokens = _Stream(directory / TOKENS, self.dtype)
        self._starts = _Stream(directory / WORD_STARTS, np.uint8)
        self._offsets = _Stream(directory / ".offsets.raw", np.int64)
        self._offsets.add(np.zeros(1, np.int64))
        self._pairs = _Stream(directory / ".pairs.raw", np.int32) if pairs else None
        if static_masks:
            self._masks = _Stream(directory / MASKS, np.int32)
            self._mask_labels = _Stream(directory / MASK_LABELS, self.dtype)
            self._mask_offsets = _Stream(directory / ".mask_offsets.raw", np.int64)
            self._mask_offsets.add(np.zeros(1, np.int64))
            self._spans = _Stream(directory / SPANS, np.int32)
            self._span_offsets = _Stream(directory / ".span_offsets.raw", np.int64)
            self._span_offsets.add(np.zeros(1, np.int64))
        self.num_sequences = 0

    def add(
        self,
        ids: np.ndarray,
        word_starts: np.ndarray,
        b_start: int = 0,
        label: int = -1,
        mask: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        doc_starts: np.ndarray | None = None,
    ) -> None:
        """Append one sequence; `mask` = (positions, original ids, spans) for a statically masked corpus;
        `doc_starts` = the first token of each document in it, for a corpus of packed documents."""
        if self.documents:
            if doc_starts is None:
                raise ValueError("a corpus of packed documents needs the document starts of every sequence")
            self._doc_starts.add(doc_starts)
            self._doc_offsets.add(np.array([self._doc_starts.count], np.int64))
        self._tokens.add(ids)
        self._starts.add(word_starts)
        self._offsets.add(np.array([self._tokens.count], np.int64))
        if self._pairs is not None:
            self._pairs.add(np.array([b_start, label], np.int32))
        if self.static_masks:
            if mask is None:
                raise ValueError("a statically masked corpus needs the mask of every sequence")
            positions, labels, spans = mask
            self._masks.add(positions)
            self._mask_labels.add(labels)
            self._mask_offsets.add(np.array([self._masks.count], np.int64))
            self._spans.add(np.asarray(spans).reshape(-1))
            self._span_offsets.add(np.array([self._spans.count // 2], np.int64))
        self.num_sequences += 1

    def close(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self._tokens.close()
        self._starts.close()
        self._offsets.to_npy(self.directory / OFFSETS)
        files = [TOKENS, WORD_STARTS, OFFSETS]
        if self._pairs is not None:
            self._pairs.to_npy(self.directory / PAIRS, columns=2)
            files.append(PAIRS)
        if self.static_masks:
            self._masks.close()
            self._mask_labels.close()
            self._spans.close()
            self._mask_offsets.to_npy(self.directory / MASK_OFFSETS)
            self._span_offsets.to_npy(self.directory / SPAN_OFFSETS)
            files += [MASKS, MASK_LABELS, MASK_OFFSETS, SPANS, SPAN_OFFSETS]
        if self.documents:
            self._doc_starts.close()
            self._doc_offsets.to_npy(self.directory / DOC_OFFSETS)
            files += [DOC_STARTS, DOC_OFFSETS]
        full = {
            "bertkit_corpus": CORPUS_VERSION,
            **manifest,
            "dtype": self.dtype.name,
            "num_sequences": self.num_sequences,
            "num_tokens": self._tokens.count,
            "has_pairs": self.pairs,
            "static_masks": self.static_masks,
            "has_documents": self.documents,
            "checksums": {name: sha256_file(self.directory / name) for name in files},
        }
        write_json_atomic(self.directory / MANIFEST, full)
        return full


def _memmap(path: Path, dtype: np.dtype | type) -> np.ndarray:
    return np.memmap(path, dtype=dtype, mode="r") if path.stat().st_size else np.zeros(0, dtype)


class Corpus:
    """Random access to the sequences of a corpus directory, without loading it into memory."""

    def __init__(self, directory: Path | str) -> None:
        directory = Path(directory)
        if not directory.is_dir():
            raise BertkitError(f"corpus directory not found: {directory}")
        if not (directory / MANIFEST).is_file():
            raise BertkitError(
                f"{directory} is not a bertkit corpus (no {MANIFEST}); build one with `bertkit build-corpus`"
            )
        self.directory = directory
        self.manifest: dict[str, Any] = read_json(directory / MANIFEST, "corpus manifest")
        if self.manifest.get("bertkit_corpus") != CORPUS_VERSION:
            raise BertkitError(f"{directory} was written by an incompatible bertkit version; rebuild it")
        self.has_pairs = bool(self.manifest.get("has_pairs"))
        self.static_masks = bool(self.manifest.get("static_masks"))
        self.has_documents = bool(self.manifest.get("has_documents"))
        try:
            dtype = np.dtype(self.manifest["dtype"])
            self.offsets = np.load(directory / OFFSETS, allow_pickle=False, mmap_mode="r")
            self.tokens = _memmap(directory / TOKENS, dtype)
            self.starts = _memmap(directory / WORD_STARTS, np.uint8)
            self.pairs = np.load(directory / PAIRS, allow_pickle=False, mmap_mode="r") if self.has_pairs else None
            if self.static_masks:
                self.masks = _memmap(directory / MASKS, np.int32)
                self.mask_labels = _memmap(directory / MASK_LABELS, dtype)
                self.mask_offsets = np.load(directory / MASK_OFFSETS, allow_pickle=False, mmap_mode="r")
                self.spans = _memmap(directory / SPANS, np.int32).reshape(-1, 2)
                self.span_offsets = np.load(directory / SPAN_OFFSETS, allow_pickle=False, mmap_mode="r")
            if self.has_documents:
                self.doc_starts = _memmap(directory / DOC_STARTS, np.int32)
                self.doc_offsets = np.load(directory / DOC_OFFSETS, allow_pickle=False, mmap_mode="r")
        except (OSError, ValueError, KeyError) as err:
            raise BertkitError(f"corpus {directory} is damaged ({err}); rebuild it") from None
        total = int(self.offsets[-1])
        if (
            len(self.offsets) != self.manifest["num_sequences"] + 1
            or self.tokens.size != total
            or self.starts.size != total
            or (self.pairs is not None and len(self.pairs) != len(self))
            or (self.has_documents and len(self.doc_offsets) != len(self.offsets))
        ):
            raise BertkitError(f"corpus {directory} is damaged: its index does not match its token file; rebuild it")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> np.ndarray:
        """The ids the model sees (already corrupted in a statically masked corpus)."""
        return np.asarray(self.tokens[self.offsets[index] : self.offsets[index + 1]])

    def word_starts(self, index: int) -> np.ndarray:
        return np.asarray(self.starts[self.offsets[index] : self.offsets[index + 1]]).astype(bool)

    def pair(self, index: int) -> tuple[int, int]:
        """(first token of segment B, pair label); (0, -1) for single-segment corpora."""
        if self.pairs is None:
            return 0, -1
        return int(self.pairs[index, 0]), int(self.pairs[index, 1])

    def document_starts(self, index: int) -> np.ndarray:
        """First token of each document packed into sequence `index` ([0] for a corpus of one per sequence)."""
        if not self.has_documents:
            return np.zeros(1, np.int64)
        return np.asarray(self.doc_starts[self.doc_offsets[index] : self.doc_offsets[index + 1]]).astype(np.int64)

    def static_mask(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Stored (positions, original ids, [start, end) spans) of a statically masked sequence."""
        if not self.static_masks:
            raise ValueError("this corpus is masked dynamically: masks are drawn by the loader")
        a, b = int(self.mask_offsets[index]), int(self.mask_offsets[index + 1])
        c, d = int(self.span_offsets[index]), int(self.span_offsets[index + 1])
        return (
            np.asarray(self.masks[a:b]).astype(np.int64),
            np.asarray(self.mask_labels[a:b]).astype(np.int64),
            np.asarray(self.spans[c:d]).astype(np.int64),
        )

    def original(self, index: int) -> np.ndarray:
        """The uncorrupted ids (static masks undone)."""
        ids = self[index].astype(np.int64)
        if self.static_masks:
            positions, labels, _ = self.static_mask(index)
            ids[positions] = labels
        return ids

    def lengths(self) -> np.ndarray:
        return np.diff(np.asarray(self.offsets))

"""Memory-mapped token shards: one flat token file, an offsets index, and a manifest.

Layout of a corpus directory:
  tokens.bin     all sequences back to back, uint16 when the vocabulary fits, else uint32
  offsets.npy    int64 array of len(sequences) + 1; sequence i is tokens[offsets[i]:offsets[i+1]]
  manifest.json  format, tokenizer fingerprint, options, counts and sha256 of the two files above
Reading maps the file, so a corpus larger than memory costs only the pages actually touched.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.errors import BertkitError
from bertkit.fsutil import read_json, write_json_atomic

MANIFEST = "manifest.json"
TOKENS = "tokens.bin"
OFFSETS = "offsets.npy"
CORPUS_VERSION = 1


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.uint32)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class ShardWriter:
    """Append sequences to `tokens.bin` in a buffered way; `close` writes offsets and the manifest."""

    def __init__(self, directory: Path, vocab_size: int, flush_tokens: int = 1 << 20) -> None:
        self.directory = directory
        self.dtype = token_dtype(vocab_size)
        self._handle = open(directory / TOKENS, "wb")  # noqa: SIM115 (closed in close())
        self._buffer: list[np.ndarray] = []
        self._buffered = 0
        self._flush_tokens = flush_tokens
        self._offsets: list[int] = [0]

    def add(self, sequence: list[int]) -> None:
        array = np.asarray(sequence, dtype=self.dtype)
        self._buffer.append(array)
        self._buffered += array.size
        self._offsets.append(self._offsets[-1] + array.size)
        if self._buffered >= self._flush_tokens:
            self._flush()

    def _flush(self) -> None:
        if self._buffer:
            self._handle.write(np.concatenate(self._buffer).tobytes())
            self._buffer, self._buffered = [], 0

    @property
    def num_sequences(self) -> int:
        return len(self._offsets) - 1

    def close(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self._flush()
        self._handle.close()
        np.save(self.directory / OFFSETS, np.asarray(self._offsets, dtype=np.int64))
        full = {
            "bertkit_corpus": CORPUS_VERSION,
            **manifest,
            "dtype": self.dtype.name,
            "num_sequences": self.num_sequences,
            "num_tokens": self._offsets[-1],
            "checksums": {name: sha256_file(self.directory / name) for name in (TOKENS, OFFSETS)},
        }
        write_json_atomic(self.directory / MANIFEST, full)
        return full


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
        try:
            self.offsets = np.load(directory / OFFSETS, allow_pickle=False)
            dtype = np.dtype(self.manifest["dtype"])
            self.tokens = (
                np.memmap(directory / TOKENS, dtype=dtype, mode="r") if self.offsets[-1] else np.zeros(0, dtype)
            )
        except (OSError, ValueError, KeyError) as err:
            raise BertkitError(f"corpus {directory} is damaged ({err}); rebuild it") from None
        if len(self.offsets) != self.manifest["num_sequences"] + 1 or self.tokens.size != self.offsets[-1]:
            raise BertkitError(f"corpus {directory} is damaged: its index does not match its token file; rebuild it")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> np.ndarray:
        return np.asarray(self.tokens[self.offsets[index] : self.offsets[index + 1]])

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

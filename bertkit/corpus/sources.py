"""Read documents from plain text (optionally .gz/.bz2/.zst) or JSON lines, streaming, with bounded memory.

Plain text convention (BERT's `create_pretraining_data.py`): one sentence or paragraph per line, documents
separated by blank lines. Invalid UTF-8 is replaced, counted and reported, never a crash.
"""

from __future__ import annotations

import bz2
import glob
import gzip
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from bertkit.errors import BertkitError


@dataclass
class ReadStats:
    files: int = 0
    lines: int = 0
    documents: int = 0
    bytes: int = 0
    invalid_utf8_lines: int = 0


def expand_inputs(inputs: list[str] | list[Path]) -> list[Path]:
    """Expand globs, keep order, and fail early (before any output exists) on a missing file."""
    paths: list[Path] = []
    for item in inputs:
        text = str(item)
        matches = sorted(glob.glob(text)) if any(ch in text for ch in "*?[") else [text]
        if not matches:
            raise BertkitError(f"no input file matches '{text}'")
        for match in matches:
            path = Path(match)
            if not path.is_file():
                raise BertkitError(f"input file not found: {path}")
            paths.append(path)
    if not paths:
        raise BertkitError("no input files given")
    return paths


def open_binary(path: Path) -> BinaryIO:
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if name.endswith(".bz2"):
        return bz2.open(path, "rb")  # type: ignore[return-value]
    if name.endswith(".zst"):
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(open(path, "rb"))  # type: ignore[return-value]
    return open(path, "rb")


def _decode(raw: bytes, stats: ReadStats) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.invalid_utf8_lines += 1
        return raw.decode("utf-8", errors="replace")


def _is_jsonl(path: Path) -> bool:
    stem = path.name.lower()
    for suffix in (".gz", ".bz2", ".zst"):
        stem = stem.removesuffix(suffix)
    return stem.endswith((".jsonl", ".json", ".ndjson"))


def iter_documents(paths: list[Path], stats: ReadStats | None = None, text_field: str = "text") -> Iterator[list[str]]:
    """Yield documents as lists of non-empty lines (sentences or paragraphs)."""
    stats = stats if stats is not None else ReadStats()
    for path in paths:
        stats.files += 1
        jsonl = _is_jsonl(path)
        try:
            with open_binary(path) as handle:
                document: list[str] = []
                for lineno, raw in enumerate(io.BufferedReader(handle), start=1):  # type: ignore[arg-type]
                    stats.bytes += len(raw)
                    stats.lines += 1
                    line = _decode(raw, stats).strip()
                    if jsonl:
                        if not line:
                            continue
                        text = _json_text(line, text_field, path, lineno)
                        paragraphs = [p.strip() for p in text.split("\n") if p.strip()]
                        if paragraphs:
                            stats.documents += 1
                            yield paragraphs
                        continue
                    if line:
                        document.append(line)
                    elif document:
                        stats.documents += 1
                        yield document
                        document = []
                if document:
                    stats.documents += 1
                    yield document
        except (OSError, EOFError) as err:
            raise BertkitError(f"cannot read {path}: {err}") from None


def _json_text(line: str, field: str, path: Path, lineno: int) -> str:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise BertkitError(f"{path}:{lineno} is not valid JSON ({err.msg}); is this a JSON lines file?") from None
    if not isinstance(record, dict) or field not in record:
        raise BertkitError(f"{path}:{lineno} has no field '{field}'; choose the text field with --text-field")
    value = record[field]
    return value if isinstance(value, str) else str(value)


def iter_lines(paths: list[Path], stats: ReadStats | None = None, text_field: str = "text") -> Iterator[str]:
    """Every non-empty line of every document, for tokenizer training."""
    for document in iter_documents(paths, stats, text_field):
        yield from document

"""Read documents streaming, with bounded memory, from plain text or JSON lines (optionally .gz/.bz2/.zst),
Parquet files (one row group at a time) and Hugging Face `datasets` directories written by `save_to_disk`.

Plain text convention (BERT's `create_pretraining_data.py`): one sentence or paragraph per line, documents
separated by blank lines. In JSON lines, CSV/TSV (a header row, then one record per row), Parquet and datasets,
each record's text field is one document, its lines the paragraphs: a task's training file is its own corpus.
Invalid UTF-8 is replaced, counted and reported, never a crash.
"""

from __future__ import annotations

import bz2
import csv
import glob
import gzip
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from bertkit.errors import BertkitError
from bertkit.inputs.delimited import checked_header, delimited_reader, require_columns
from bertkit.inputs.formats import delimiter, file_format, is_dataset_dir

# What --invalid-utf8 takes: refuse a file with bytes that are not UTF-8, or read them as U+FFFD (ReadStats counts
# the lines).
INVALID_UTF8 = ("error", "replace")


@dataclass
class ReadStats:
    files: int = 0
    lines: int = 0
    documents: int = 0
    bytes: int = 0
    invalid_utf8_lines: int = 0


# Rows taken from a Parquet row group or an Arrow record batch at a time: bounded memory on any table.
_ARROW_BATCH_ROWS = 4096


def _dataset_splits(path: Path) -> list[Path]:
    """A DatasetDict directory stands for all its splits, in the order it lists them."""
    if not (path / "dataset_dict.json").is_file():
        return [path]
    try:
        splits = json.loads((path / "dataset_dict.json").read_text("utf-8"))["splits"]
    except (OSError, ValueError, KeyError, TypeError):
        raise BertkitError(f"{path / 'dataset_dict.json'} is not a valid datasets split list") from None
    return [path / str(split) for split in splits]


def expand_inputs(inputs: list[str] | list[Path]) -> list[Path]:
    """Expand globs, keep order, and fail early (before any output exists) on a missing file. URLs give
    `RemoteFile`s, which read like Paths."""
    from bertkit.inputs.remote import RemoteFile, expand_url, is_url

    paths: list[Path] = []
    for item in inputs:
        if isinstance(item, RemoteFile):  # already expanded
            paths.append(item)  # type: ignore[arg-type]
            continue
        text = str(item)
        if is_url(item):
            # An s3:// (fsspec) URL or URL glob: files read streaming from the bucket (bertkit/inputs/remote.py).
            paths.extend(expand_url(text))  # type: ignore[arg-type]
            continue
        matches = sorted(glob.glob(text)) if any(ch in text for ch in "*?[") else [text]
        if not matches:
            raise BertkitError(f"no input file matches '{text}'")
        for match in matches:
            path = Path(match)
            if is_dataset_dir(path):
                paths.extend(_dataset_splits(path))
                continue
            if path.is_dir():
                raise BertkitError(
                    f"input {path} is a directory; give its files (a glob such as '{path}/*.txt' works) "
                    "or a datasets directory written by save_to_disk"
                )
            if not path.is_file():
                raise BertkitError(f"input file not found: {path}")
            paths.append(path)
    if not paths:
        raise BertkitError("no input files given")
    return paths


def input_size(paths: list[Path]) -> int:
    """Bytes on disk of all inputs (a datasets directory counts its Arrow files)."""
    total = 0
    for path in paths:
        files = path.glob("*.arrow") if path.is_dir() else [path]
        total += sum(f.stat().st_size for f in files)
    return total


def is_plain_text(path: Path) -> bool:
    """Inputs whose size on disk is the size of the text read from them (for progress bars)."""
    return path.is_file() and not path.name.lower().endswith((".gz", ".bz2", ".zst", ".parquet", ".pq"))


def _source(path: Path) -> Path | BinaryIO:
    """What gzip/bz2 open: a local path (which they close themselves), or a remote file's stream."""
    return path if isinstance(path, Path) else path.open("rb")


def open_binary(path: Path) -> BinaryIO:
    name = path.name.lower()
    # path.open: a local file, or a RemoteFile streaming from object storage; decompressed on the fly.
    if name.endswith(".gz"):
        return gzip.open(_source(path), "rb")  # type: ignore[return-value]
    if name.endswith(".bz2"):
        return bz2.open(_source(path), "rb")  # type: ignore[return-value]
    if name.endswith(".zst"):
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(path.open("rb"))  # type: ignore[return-value]
    return path.open("rb")


def read_text(path: Path) -> str:
    """A whole (optionally compressed) file as text, BOM removed; bytes that are not UTF-8 become lone
    surrogates, for the reader to report with the row that holds them."""
    try:
        with open_binary(path) as handle:
            raw = handle.read()
    except (OSError, EOFError) as err:
        raise BertkitError(f"cannot read {path}: {err}") from None
    return raw.decode("utf-8", errors="surrogateescape").removeprefix("\ufeff")


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """Lines ending at \\n, \\r\\n or \\r only, as text-mode files read them: str.splitlines() also breaks at
    U+0085, U+2028, form feeds and the like, which real web text holds inside a word or a JSON string, and
    would cut that line in two."""
    lines = _LINE_BREAK.split(text)
    return lines[:-1] if lines and not lines[-1] else lines


def _decode(raw: bytes, stats: ReadStats) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.invalid_utf8_lines += 1
        return raw.decode("utf-8", errors="replace")


def _iter_delimited_documents(path: Path, delimiter: str, stats: ReadStats, text_field: str) -> Iterator[list[str]]:
    """Each row's `text_field` column of a CSV/TSV file with a header row, as one document. Lines are decoded
    one at a time (bad UTF-8 counted as in text files); a quoted field may span lines."""

    def lines() -> Iterator[str]:
        with open_binary(path) as handle:
            for raw in io.BufferedReader(handle):  # type: ignore[arg-type]
                stats.bytes += len(raw)
                stats.lines += 1
                yield _decode(raw, stats)

    # TSV is read as written: tabs separate fields, quotes are text (GLUE's files hold unbalanced ones). CSV
    # fields may be quoted, a quoted field spanning lines.
    reader = delimited_reader(lines(), delimiter, "none" if delimiter == "\t" else "csv")
    try:
        header = checked_header(path, next(reader, []))
        require_columns(path, header, [text_field], "choose the text column with --text-field")
        column = header.index(text_field)
        for row in reader:
            if len(row) <= column:
                continue
            paragraphs = [p.strip() for p in row[column].split("\n") if p.strip()]
            if paragraphs:
                stats.documents += 1
                yield paragraphs
    except csv.Error as err:
        raise BertkitError(f"{path} line {reader.line_num} is not valid {'TSV' if delimiter == chr(9) else 'CSV'}: "
                           f"{err}") from None  # fmt: skip
    except (OSError, EOFError) as err:
        raise BertkitError(f"cannot read {path}: {err}") from None


def iter_documents(paths: list[Path], stats: ReadStats | None = None, text_field: str = "text") -> Iterator[list[str]]:
    """Yield documents as lists of non-empty lines (sentences or paragraphs)."""
    stats = stats if stats is not None else ReadStats()
    for path in paths:
        stats.files += 1
        if path.is_dir() or (path.is_file() and file_format(path) == "parquet"):
            yield from _iter_table_documents(path, stats, text_field)
            continue
        if separator := delimiter(path):
            yield from _iter_delimited_documents(path, separator, stats, text_field)
            continue
        jsonl = file_format(path) == "jsonl"
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


def _arrow_batches(path: Path, text_field: str):
    """Record batches holding only the text column: a Parquet file row group by row group, or the Arrow
    stream files of a datasets directory (memory-mapped, so the OS pages them in and out)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def check(schema) -> None:
        if text_field not in schema.names:
            raise BertkitError(
                f"{path} has no column '{text_field}' (columns: {', '.join(schema.names)}); "
                "choose the text column with --text-field"
            )

    try:
        if path.is_file():
            parquet = pq.ParquetFile(path if isinstance(path, Path) else path.open("rb"))
            check(parquet.schema_arrow)
            yield from parquet.iter_batches(batch_size=_ARROW_BATCH_ROWS, columns=[text_field])
            return
        state = json.loads((path / "state.json").read_text("utf-8"))
        for entry in state.get("_data_files", []):
            with pa.memory_map(str(path / entry["filename"])) as source:
                reader = pa.ipc.open_stream(source)
                check(reader.schema)
                for batch in reader:
                    yield batch.select([text_field])
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as err:
        raise BertkitError(f"cannot read {path}: {err}") from None


def _iter_table_documents(path: Path, stats: ReadStats, text_field: str) -> Iterator[list[str]]:
    for batch in _arrow_batches(path, text_field):
        for value in batch.column(0).to_pylist():
            stats.lines += 1
            if value is None:
                continue
            if isinstance(value, bytes):  # a binary column: decode like a text file's line
                stats.bytes += len(value)
                text = _decode(value, stats)
            else:
                text = value if isinstance(value, str) else str(value)
                stats.bytes += len(text.encode("utf-8", errors="replace"))
            paragraphs = [p.strip() for p in text.split("\n") if p.strip()]
            if paragraphs:
                stats.documents += 1
                yield paragraphs


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

"""CSV and TSV rows read the same way by every command: the reader, the header's column names and the error for a
column a file lacks.

Two quotings: `csv`, where a field may be quoted (a quoted field can hold separators, line breaks and doubled
quotes), and `none`, where a field is everything between two separators, quotes included, as GLUE's TSV files
are written (some of their fields start with a quote they never close)."""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from bertkit.errors import BertkitError

Quoting = Literal["csv", "none"]
QUOTINGS: tuple[Quoting, ...] = ("csv", "none")


def delimited_reader(lines: Iterable[str], delimiter: str, quoting: Quoting) -> Any:
    """A strict `csv.reader` over `lines` (opened with newline="", so quoted line breaks reach it), without the csv
    module's 128 KB limit on a field: a document to read or classify can be longer."""
    _allow_long_fields()
    options: dict[str, Any] = {"quoting": csv.QUOTE_NONE} if quoting == "none" else {}
    return csv.reader(lines, delimiter=delimiter, strict=True, **options)


def header_names(row: list[str]) -> list[str]:
    """A header row's column names, without surrounding spaces or a byte-order mark."""
    return [name.strip().removeprefix("\ufeff") for name in row]


def require_columns(path: Path, header: list[str], names: Iterable[str], fix: str) -> None:
    """One error line for the first of `names` that `header` lacks, listing the file's columns; `fix` says how to
    choose another."""
    for name in names:
        if name not in header:
            raise BertkitError(f"{path} has no column '{name}' (columns: {', '.join(header[:20])}); {fix}")


def _allow_long_fields() -> None:
    limit = sys.maxsize  # the largest the platform takes
    while True:
        try:
            csv.field_size_limit(limit)
            return
        except OverflowError:
            limit //= 2

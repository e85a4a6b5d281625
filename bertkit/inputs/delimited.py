"""CSV and TSV rows read the same way by every command: the reader, the header's column names and the error for a
column a file lacks.

Two quotings: `csv`, where a field may be quoted (a quoted field can hold separators, line breaks and doubled
quotes), and `none`, where a field is everything between two separators, quotes included, as GLUE's TSV files
are written (some of their fields start with a quote they never close)."""

from __future__ import annotations

import csv
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from bertkit.errors import BertkitError

Quoting = Literal["csv", "none"]
# What a header read from bytes that are not UTF-8 holds: NULs (UTF-16: never readable line by line as UTF-8) or
# surrogate-escaped undecodable bytes (where the reader keeps them). A reader that replaces bad bytes with U+FFFD
# under the user's --invalid-utf8 replace goes on with the columns it can name.
_NOT_UTF8_TEXT = re.compile("[\x00\udc80-\udcff]")
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


def checked_header(path: Path, row: list[str]) -> list[str]:
    """`header_names`, or one error line for a header that is not UTF-8 text (a UTF-16 or Latin-1 file), which
    would otherwise be reported as missing its columns."""
    names = header_names(row)
    if any(_NOT_UTF8_TEXT.search(name) for name in names):
        raise BertkitError(
            f"{path} line 1: the header is not UTF-8 text (NUL bytes or undecodable bytes: a UTF-16 or Latin-1 "
            "file?); re-encode the file as UTF-8, e.g. iconv -f utf-16 -t utf-8 IN > OUT"
        )
    return names


def checked_quoting(value: str) -> Quoting:
    """`value` as a quoting, or one error line naming the ones there are."""
    if value not in QUOTINGS:
        raise BertkitError(f"--quoting takes {' or '.join(QUOTINGS)}, not '{value}'")
    return value  # type: ignore[return-value]


def require_columns(path: Path, header: list[str], names: Iterable[str], fix: str) -> None:
    """One error line for the first of `names` that `header` lacks, listing the file's columns; `fix` says how to
    choose another."""
    for name in names:
        if name not in header:
            raise BertkitError(f"{path} has no column '{name}' (columns: {', '.join(header[:20])}); {fix}")


def delimited_rows(
    path: Path,
    lines: Iterable[str],
    delimiter: str,
    quoting: Quoting,
    *,
    unquoted_by: str,
    columns: list[str] | None = None,
) -> tuple[Iterator[tuple[str, dict[str, str] | str]], list[str]]:
    """(rows, header) of the CSV/TSV `lines` of `path` (a text stream opened with newline="": line ends, and line breaks
    inside quoted fields, are the csv module's to read). `columns` names the columns of a file without a header row
    (then row 1 is data). Each row is (where, its fields by column), or (where, what is wrong with it) for a row
    whose field count is not the header's, for the caller to raise or skip; a row that does not parse is an error
    whose advice ends with `unquoted_by`, how the caller's user reads the file with quoting "none"."""
    unquoted = quoting == "none"
    # QUOTE_NONE: a quote is a plain character. Under CSV quoting a field that starts with an unbalanced quote
    # (`"Then the captain was gone.`, as GLUE has) swallows the separators and lines up to the next quote.
    reader = delimited_reader(lines, delimiter, quoting)
    kind = "TSV" if delimiter == "\t" else "CSV"
    if columns is not None:
        header = list(columns)
        first_row = 0  # no header row: the first line is row 1
    else:
        try:
            header = next(reader, None)
        except csv.Error as err:
            raise BertkitError(f"{path} line 1: cannot parse the header as {kind} ({err})") from None
        if header is None:
            raise BertkitError(f"{path} is empty; give a {kind} file with a header line and examples")
        header = checked_header(path, header)
        first_row = 1  # the header is row 1, as in a spreadsheet
    against = "task.columns names" if columns is not None else "the header has"
    hint = "a tab inside a field?" if unquoted or delimiter == "\t" else "an unquoted comma?"

    def rows():
        number = first_row
        while True:
            start = reader.line_num + 1
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as err:
                quotes = (
                    "" if unquoted else "; check its quotes (a quote inside a quoted field is written twice), "
                    f"or {unquoted_by} if the file is not quoted (GLUE's TSV files)"
                )
                raise BertkitError(
                    f"{path} row {number + 1} (line {start}): cannot parse as {kind} ({err}){quotes}"
                ) from None
            if not fields:  # a blank line
                continue
            number += 1
            where = f"row {number} (line {start})"
            if columns is not None and number == 1 and [f.strip() for f in fields] == header:
                # The file has a header after all: reading it as data would make "label" a class.
                raise BertkitError(
                    f"{path} line {start} is a header ({', '.join(header)}), but task.columns says the file has "
                    "none; leave task.columns unset for a file with a header"
                )
            if len(fields) != len(header):
                yield where, f"has {len(fields)} fields, {against} {len(header)} ({hint})"
                continue
            yield where, dict(zip(header, fields, strict=True))

    return rows(), header


def _allow_long_fields() -> None:
    limit = sys.maxsize  # the largest the platform takes
    while True:
        try:
            csv.field_size_limit(limit)
            return
        except OverflowError:
            limit //= 2

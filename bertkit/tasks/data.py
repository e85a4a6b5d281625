"""Reading labelled task data (and texts to embed): CSV/TSV, JSON lines, Parquet, `datasets` directories.

CSV goes through a real CSV parser, never line splitting: a quoted field may hold commas, quotes ("")
and newlines, as spreadsheets write them. A UTF-8 byte-order mark and `\\r\\n` line ends are accepted.
`quoting="none"` reads files that are not quoted at all (GLUE's TSV files): a field is everything between
separators, quotes included. `columns` names the columns of a file without a header row (GLUE's CoLA).
Every row is checked: a missing or empty text or label (or a row with more or fewer fields than the
header, or bytes that are not UTF-8) is an error that names the file and row, unless `skip_bad_rows`
says to skip and count such rows. What is read is reported (`TaskData.report`), so nothing is dropped
silently.
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.config.schema import TaskConfig
from bertkit.config.task_kinds import SPECS
from bertkit.errors import BertkitError
from bertkit.inputs.delimited import Quoting, delimited_rows
from bertkit.inputs.formats import file_format
from bertkit.inputs.sources import read_text, split_lines

SKIP_HINT = "fix the file, or pass --skip-bad-rows to skip (and count) such rows"
# Bytes that are not UTF-8, decoded with errors="surrogateescape", become lone surrogates U+DC80-U+DCFF:
# so a bad byte is found in the row that holds it, not just at a byte offset.
_UNDECODABLE = re.compile("[\udc80-\udcff]")


@dataclass
class TaskData:
    """Columns of the usable rows, and what happened to the others."""

    path: Path
    texts: list[str]
    pairs: list[str] | None
    # strings (classification), floats (regression), lists of strings (multi-label), None without a label field
    labels: list[Any] | None
    rows_read: int = 0
    skipped: int = 0
    skipped_rows: list[str] = field(default_factory=list)  # the first few, as "row N: why"

    def __len__(self) -> int:
        return len(self.texts)

    def label_counts(self) -> dict[str, int]:
        if self.labels is None:
            return {}
        counts: Counter[str] = Counter()
        for label in self.labels:
            counts.update(label if isinstance(label, list) else [str(label)])
        return dict(sorted(counts.items()))

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": str(self.path), "rows_read": self.rows_read, "rows_skipped": self.skipped}
        if self.skipped_rows:
            out["skipped_examples"] = self.skipped_rows[:3]
        return out


def read_task_file(path: Path, task: TaskConfig, split: str | None) -> TaskData:
    return read_task_data(
        path,
        task.text_field,
        task.label_field,
        task.text_pair_field,
        split,
        task.skip_bad_rows,
        SPECS[task.kind].label_type,
        *([task.label_separator] if task.reads("label_separator") else []),
        columns=task.columns,
        quoting=task.quoting,
    )


def read_task_data(
    path: Path,
    text_field: str = "text",
    label_field: str | None = "label",
    text_pair_field: str | None = None,
    split: str | None = None,
    skip_bad_rows: bool = False,
    label_type: str = "str",
    label_separator: str = "|",
    *,
    columns: list[str] | None = None,
    quoting: Quoting = "csv",
    unquoted_by: str = "set task.quoting to none",
) -> TaskData:
    """Read `path` (CSV/TSV with a header, JSON lines, Parquet, a `datasets` directory) into columns.

    CSV/TSV only: `columns` names the columns of a file without a header row (its first row is data);
    `quoting` "none" takes a field as everything between separators, quotes included (GLUE's TSV files),
    "csv" parses quoted fields as spreadsheets write them; `unquoted_by` is how the caller's user asks for "none".

    `label_type` "float" parses labels as numbers (regression); "str" keeps them as strings (a number
    in JSON or Parquet becomes its decimal text, a datasets ClassLabel its class name); "list" reads a row's
    labels (multi-label) from a JSON/Parquet list, or from a string joined by `label_separator` (CSV/TSV):
    stripped, duplicates dropped, first occurrence first. An empty list `[]` is a row without labels; an empty
    string or an empty part (`a||b`) is a bad row."""
    path, kind = _existing_task_file(path)
    if kind != "dataset" and split is not None:
        raise BertkitError(f"--split {split} applies to datasets directories; {path} is a {kind} file")
    if columns is not None and kind not in ("csv", "tsv", "text"):
        # JSON lines, Parquet and datasets name their fields in every row / their schema: nothing to name.
        raise BertkitError(
            f"task.columns applies to CSV/TSV files without a header; {path} is a {kind} file: drop task.columns"
        )
    named = columns is not None  # the column names come from task.columns, not from the file
    fields = [text_field] + ([text_pair_field] if text_pair_field else []) + ([label_field] if label_field else [])
    if kind in ("csv", "tsv", "text"):
        rows, columns = csv_rows(path, "\t" if kind == "tsv" else ",", columns=columns, quoting=quoting,
                                  unquoted_by=unquoted_by)  # fmt: skip
    elif kind == "jsonl":
        rows, columns = jsonl_rows(path), None
    else:
        rows, columns = _table_rows(path, fields, split, label_field)
    data = TaskData(path, [], [] if text_pair_field else None, [] if label_field else None)
    checked_columns = columns is None  # JSON lines have no header: their first row stands for it
    for where, row in rows:
        data.rows_read += 1
        if not checked_columns:
            _check_columns(path, columns or [], text_field, text_pair_field, label_field, named)
            checked_columns = True
        if columns is None and data.rows_read == 1 and isinstance(row, dict):
            _check_columns(path, list(row), text_field, text_pair_field, label_field)
        problem, values = _check_row(row, text_field, text_pair_field, label_field, label_type, label_separator)
        if problem is not None:
            if not skip_bad_rows:
                raise BertkitError(f"{path} {where}: {problem}; {SKIP_HINT}")
            data.skipped += 1
            if len(data.skipped_rows) < 10:
                data.skipped_rows.append(f"{where}: {problem}")
            continue
        text, pair, label = values
        data.texts.append(text)
        if data.pairs is not None:
            data.pairs.append(pair)
        if data.labels is not None:
            data.labels.append(label)
    if not checked_columns:
        _check_columns(path, columns or [], text_field, text_pair_field, label_field, named)
    if data.rows_read == 0:
        raise BertkitError(f"{path} holds no rows (an empty file, or a header alone); give a file with examples")
    if not data.texts:
        raise BertkitError(
            f"{path}: all {data.rows_read} rows were bad and skipped (first: {data.skipped_rows[0]}); "
            "check --text-field/--label-field"
        )
    return data


def _existing_task_file(path: Path) -> tuple[Path, str]:
    """(path, its format): one line when it is missing, or a directory that is not a datasets directory."""
    path = Path(path)
    if not path.exists():
        raise BertkitError(f"task file not found: {path}")
    kind = file_format(path)
    if kind == "conllu":
        raise BertkitError(f"{path} is a CoNLL-U file of tagged words; a token-classification task reads it "
                           "(task.kind=token-classification), a table reader does not")  # fmt: skip
    if path.is_dir() and kind != "dataset":
        raise BertkitError(f"{path} is a directory but not a datasets directory written by save_to_disk")
    return path, kind


def read_rows(
    path: Path, fields: list[str], split: str | None = None, quoting: Quoting = "csv"
) -> tuple[Iterator[tuple[str, Any]], list[str] | None]:
    """(rows, columns) of a CSV/TSV file with a header, JSON lines, Parquet or a `datasets` directory: each row is
    (where, its fields) or (where, what is wrong with it); columns are None for JSON lines, whose rows name their
    own fields. `fields` are the columns a Parquet or datasets reader loads. For readers of other row shapes than
    `read_task_data`'s (retrieval pairs)."""
    path, kind = _existing_task_file(path)
    if kind in ("csv", "tsv", "text"):
        return csv_rows(path, "\t" if kind == "tsv" else ",", quoting=quoting)
    if kind == "jsonl":
        return jsonl_rows(path), None
    return _table_rows(path, fields, split, None)


def _check_columns(
    path: Path,
    columns: list[str],
    text_field: str,
    text_pair_field: str | None,
    label_field: str | None,
    named: bool = False,
) -> None:
    options = ((text_field, "--text-field"), (text_pair_field, "--text-pair-field"), (label_field, "--label-field"))
    for name, option in options:
        if name is not None and name not in columns:
            shown = ", ".join(repr(c) for c in columns[:20])
            source = "columns named by task.columns" if named else "columns"
            raise BertkitError(f"{path} has no column '{name}' ({source}: {shown}); choose the column with {option}")


def _value_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="surrogateescape")
    return value if isinstance(value, str) else str(value)


def _check_row(
    row: Any,
    text_field: str,
    text_pair_field: str | None,
    label_field: str | None,
    label_type: str,
    label_separator: str = "|",
) -> tuple[str | None, tuple[str, str | None, Any]]:
    """(problem, values): problem is None for a usable row."""
    none = ("", None, None)
    if isinstance(row, str):  # a row-level problem found while parsing (bad JSON, wrong field count)
        return row, none
    if not isinstance(row, dict):
        return f"is a JSON {type(row).__name__}, not an object with fields", none
    values: dict[str, str] = {}
    label_list: list[str] | None = None
    for name, what in ((text_field, "text"), (text_pair_field, "second text"), (label_field, "label")):
        if name is None:
            continue
        if name == label_field and label_type == "list":
            problem, label_list = _label_list(row.get(name), name, label_separator)
            if problem is not None:
                return problem, none
            continue
        if isinstance(row.get(name), list | tuple | dict):
            kind = "an object" if isinstance(row.get(name), dict) else "a list"
            hint = "; for several labels a row use --task multi-label" if name == label_field else ""
            return f"{what} (column '{name}') is {kind}, not one value{hint}", none
        value = _value_text(row.get(name))
        if value is not None and _UNDECODABLE.search(value):
            return (
                f"column '{name}' is not UTF-8 text; re-encode the file as UTF-8 "
                "(e.g. iconv -f latin1 -t utf-8 IN > OUT)",
                none,
            )
        if value is None or not value.strip():
            state = "missing" if value is None else "empty"
            return f"{state} {what} (column '{name}')", none
        values[name] = value
    label: Any = label_list
    if label_field is not None and label_list is None:
        label = values[label_field].strip()
        if label_type == "float":
            try:
                label = float(label)
            except ValueError:
                return f"label {label!r} (column '{label_field}') is not a number", none
            if label != label or label in (float("inf"), float("-inf")):
                return f"label {label} (column '{label_field}') is not a finite number", none
    pair = values[text_pair_field] if text_pair_field else None
    return None, (values[text_field], pair, label)


def _label_list(value: Any, name: str, separator: str) -> tuple[str | None, list[str] | None]:
    """(problem, labels) of a multi-label cell: a list of labels, or one string joined by `separator`."""
    if isinstance(value, (list, tuple)):
        parts = [_value_text(v) for v in value]
        if any(p is None or not p.strip() for p in parts):
            return f"an empty or missing label in the list (column '{name}')", None
    else:
        text = _value_text(value)
        if text is None or not text.strip():
            return f"{'missing' if text is None else 'empty'} labels (column '{name}')", None
        parts = text.split(separator)
        if any(not p.strip() for p in parts):
            return f"labels {text!r} (column '{name}') have an empty part between '{separator}' separators", None
    if any(_UNDECODABLE.search(p or "") for p in parts):
        return f"column '{name}' is not UTF-8 text; re-encode the file as UTF-8", None
    return None, list(dict.fromkeys(p.strip() for p in parts if p is not None))


def csv_rows(
    path: Path,
    delimiter: str,
    *,
    columns: list[str] | None = None,
    quoting: Quoting = "csv",
    unquoted_by: str = "set task.quoting to none",
) -> tuple[Any, list[str]]:
    """(rows, header) of a CSV/TSV file (inputs/delimited.py's `delimited_rows`, which refuses a header that is not
    UTF-8: read_text keeps undecodable bytes as lone surrogates)."""
    return delimited_rows(path, io.StringIO(read_text(path), newline=""), delimiter, quoting,
                          columns=columns, unquoted_by=unquoted_by)  # fmt: skip


def jsonl_rows(path: Path):
    text = read_text(path)
    for lineno, line in enumerate(split_lines(text), 1):
        if not line.strip():
            continue
        where = f"line {lineno}"
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as err:
            yield where, f"is not valid JSON ({err.msg}); is this a JSON lines file?"


def _table_rows(path: Path, fields: list[str], split: str | None, label_field: str | None) -> tuple[Any, list[str]]:
    """Rows of a Parquet file or a datasets directory (one split), reading only the needed columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    class_names: list[str] | None = None
    try:
        if path.is_file():
            schema = pq.read_schema(path)
            columns = list(schema.names)
            wanted = [f for f in fields if f in columns]
            table = pq.read_table(path, columns=wanted)
        else:
            directory = _dataset_split(path, split)
            state = json.loads((directory / "state.json").read_text("utf-8"))
            batches: list[Any] = []
            columns = []
            for entry in state.get("_data_files", []):
                with pa.memory_map(str(directory / entry["filename"])) as source:
                    reader = pa.ipc.open_stream(source)
                    columns = list(reader.schema.names)
                    wanted = [f for f in fields if f in columns]
                    batches.extend(batch.select(wanted) for batch in reader)
            table = pa.Table.from_batches(batches) if batches else None
            class_names = _class_names(directory, label_field)
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as err:
        raise BertkitError(f"cannot read {path}: {str(err).splitlines()[0]}") from None
    pair_field = next((f for f in fields[1:] if f != label_field), None)
    _check_columns(path, columns, fields[0], pair_field, label_field)
    data = {} if table is None else {name: table.column(name).to_pylist() for name in table.column_names}
    if class_names is not None and label_field in data:
        names = class_names

        def name_of(v: Any) -> Any:
            if isinstance(v, list):  # a Sequence of ClassLabel (multi-label)
                return [name_of(x) for x in v]
            return names[v] if isinstance(v, int) and 0 <= v < len(names) else v

        data[label_field] = [name_of(v) for v in data[label_field]]
    count = 0 if table is None else table.num_rows

    def rows():
        for index in range(count):
            yield f"row {index + 1}", {name: values[index] for name, values in data.items()}

    return rows(), columns


def _dataset_split(path: Path, split: str | None) -> Path:
    """The split directory of a DatasetDict (which needs --split unless it has one split), or the Dataset."""
    if not (path / "dataset_dict.json").is_file():
        if split is not None:
            raise BertkitError(f"{path} is a single datasets split; drop --split {split}")
        return path
    try:
        splits = [str(s) for s in json.loads((path / "dataset_dict.json").read_text("utf-8"))["splits"]]
    except (OSError, ValueError, KeyError, TypeError):
        raise BertkitError(f"{path / 'dataset_dict.json'} is not a valid datasets split list") from None
    if split is None:
        if len(splits) == 1:
            return path / splits[0]
        raise BertkitError(f"{path} holds the splits {', '.join(splits)}; choose one with --split")
    if split not in splits:
        raise BertkitError(f"{path} has no split '{split}' (splits: {', '.join(splits)}); fix --split")
    return path / split


def _class_names(directory: Path, label_field: str | None) -> list[str] | None:
    """A ClassLabel feature's names, so integer labels read as the class names the dataset gives them."""
    if label_field is None:
        return None
    for name in ("dataset_info.json", "state.json"):
        try:
            info = json.loads((directory / name).read_text("utf-8"))
        except (OSError, ValueError):
            continue
        feature = (info.get("features") or {}).get(label_field) if isinstance(info, dict) else None
        if isinstance(feature, dict) and feature.get("_type") in ("Sequence", "List", "LargeList"):
            feature = feature.get("feature")  # multi-label: a list of ClassLabel
        if isinstance(feature, dict) and feature.get("_type") == "ClassLabel" and feature.get("names"):
            return [str(n) for n in feature["names"]]
    return None


def read_texts(
    path: Path,
    text_field: str = "text",
    split: str | None = None,
    skip_bad_rows: bool = False,
    quoting: Quoting = "csv",
) -> TaskData:
    """Texts to embed: one per non-empty line of a text file, or the text column of a task file (a CSV/TSV file
    read with `quoting`, which the caller's --quoting sets)."""
    path = Path(path)
    if file_format(path) != "text":
        return read_task_data(path, text_field, None, None, split, skip_bad_rows, quoting=quoting,
                              unquoted_by="pass --quoting none")  # fmt: skip
    if not path.is_file():
        raise BertkitError(f"input file not found: {path}")
    data = TaskData(path, [], None, None)
    for lineno, line in enumerate(split_lines(read_text(path)), 1):
        if not line.strip():
            continue
        data.rows_read += 1
        if _UNDECODABLE.search(line):
            problem = "is not UTF-8 text; re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8 IN > OUT)"
            if not skip_bad_rows:
                raise BertkitError(f"{path} line {lineno}: {problem}; or pass --skip-bad-rows to skip such lines")
            data.skipped += 1
            if len(data.skipped_rows) < 10:
                data.skipped_rows.append(f"line {lineno}: {problem}")
            continue
        data.texts.append(line.strip())
    if not data.texts:
        raise BertkitError(f"{path} holds no text (no non-empty line); give a file with one text per line")
    return data

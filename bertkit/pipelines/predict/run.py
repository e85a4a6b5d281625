"""`bertkit predict`: a fine-tuned run and an input file in, one JSON line of predictions per input row out,
in input order.

The input streams: rows are read in chunks of `CHUNK_BATCHES` batches, each chunk is sorted by length so
batches pad little, predicted, and written back in input order before the next chunk is read, so memory
does not grow with the input. A file output is written under a temporary name and renamed at the end;
with stdout (`--output -`, the default) predictions go out chunk by chunk.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from bertkit.corpus.loader import pad_batch
from bertkit.errors import BertkitError
from bertkit.inputs.delimited import QUOTINGS, Quoting, checked_quoting, delimited_rows, require_columns
from bertkit.inputs.formats import file_format
from bertkit.modelio.modeldir import window_length
from bertkit.pipelines.predict.common import InferenceModel, jsonl_sink, load_task_model, torch_threads
from bertkit.pipelines.predict.qa import predict_qa
from bertkit.progress import Tracker
from bertkit.tasks.kinds import task_kind
from bertkit.tasks.kinds.base import PredictRequest, RunModel

CHUNK_BATCHES = 32  # batches read, predicted and written at a time


class _CountingReader(io.RawIOBase):
    """The input file's bytes, counting how many were read (the progress bar's position)."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle, self.position = handle, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.handle.read(len(buffer))
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)


def _open_text(path: Path, counter: _CountingReader) -> IO[str]:
    import bz2
    import gzip

    name = path.name.lower()
    raw: IO[bytes] = io.BufferedReader(counter)
    if name.endswith(".gz"):
        raw = gzip.open(raw, "rb")  # type: ignore[assignment]  # noqa: SIM115
    elif name.endswith(".bz2"):
        raw = bz2.open(raw, "rb")  # type: ignore[assignment]  # noqa: SIM115
    elif name.endswith(".zst"):
        import zstandard

        raw = zstandard.ZstdDecompressor().stream_reader(raw)  # type: ignore[assignment]
    return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="strict", newline="")


def _rows(path: Path, kind: str, handle: IO[str], fields: list[str], quoting: Quoting) -> Iterator[tuple[str, Any]]:
    """(where, row) pairs: a dict of fields for tables and JSON lines, the raw line for text files."""
    if kind == "text":
        for number, line in enumerate(handle, 1):
            line = line.rstrip("\r\n")
            if line.strip():
                yield f"line {number}", line
    elif kind == "jsonl":
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise BertkitError(f"{path} line {number} is not valid JSON ({err.msg}); fix the line") from None
            if not isinstance(row, dict):
                raise BertkitError(f"{path} line {number} is a JSON {type(row).__name__}, not an object with fields")
            yield f"line {number}", row
    elif kind in ("csv", "tsv"):
        yield from _delimited_rows(path, kind, handle, fields, quoting)
    else:
        raise BertkitError(f"{path}: predict reads text lines, JSON lines, CSV/TSV or Parquet, not {kind}")


def _delimited_rows(
    path: Path, kind: str, handle: IO[str], fields: list[str], quoting: Quoting
) -> Iterator[tuple[str, Any]]:
    rows, header = delimited_rows(path, handle, "\t" if kind == "tsv" else ",", quoting,
                                  unquoted_by="read it with --quoting none")  # fmt: skip
    fix = "choose it with --text-field" + ("; if the header is quoted, read the file with --quoting csv"
                                           if quoting == "none" else "")  # fmt: skip
    require_columns(path, header, fields, fix)
    for where, row in rows:
        if isinstance(row, str):  # a row whose field count is not the header's
            raise BertkitError(f"{path} {where}: {row}")
        yield where, row


def _parquet_rows(path: Path, fields: list[str]) -> Iterator[tuple[str, Any]]:
    import pyarrow.parquet as pq

    table = pq.ParquetFile(path)
    missing = [f for f in fields if f not in table.schema_arrow.names]
    if missing:
        raise BertkitError(f"{path} has no column '{missing[0]}'; choose it with --text-field")
    number = 0
    for batch in table.iter_batches(columns=fields, batch_size=4096):  # one row group at a time
        columns = {name: batch.column(name).to_pylist() for name in fields}
        for index in range(batch.num_rows):
            number += 1
            yield f"row {number}", {name: values[index] for name, values in columns.items()}


def predict(
    model_path: Path,
    input_path: Path,
    output: Path | None = None,
    batch_size: int = 32,
    text_field: str | None = None,
    text_pair_field: str | None = None,
    max_seq_len: int | None = None,
    overwrite: bool = False,
    device: str = "auto",
    quiet: bool = False,
    threads: int = 0,
    quoting: Quoting | None = None,
) -> dict[str, Any]:
    """`model_path` is a fine-tuned bertkit run (run in PyTorch on `device`) or its ONNX export (run in ONNX
    Runtime); `threads` sets the CPU threads of either (0: the library's default). `quoting` reads a CSV/TSV input
    (None: as the model's training file was read, its task.quoting)."""
    if quoting is not None:
        quoting = checked_quoting(quoting)
    with torch_threads(threads):
        return _predict(model_path, input_path, output, batch_size, text_field, text_pair_field, max_seq_len,
                        overwrite, device, quiet, threads, quoting)  # fmt: skip


def _predict(
    model_path: Path,
    input_path: Path,
    output: Path | None,
    batch_size: int,
    text_field: str | None,
    text_pair_field: str | None,
    max_seq_len: int | None,
    overwrite: bool,
    device: str,
    quiet: bool,
    threads: int,
    quoting: Quoting | None,
) -> dict[str, Any]:
    if batch_size < 1:
        raise BertkitError(f"--batch-size must be at least 1, not {batch_size}")
    to_stdout = output is None or str(output) == "-"
    if not to_stdout:
        assert output is not None
        if output.is_dir():
            raise BertkitError(f"--output {output} is a directory; give a file name (JSON lines)")
        if output.exists() and not overwrite:
            raise BertkitError(f"output {output} already exists; pass --overwrite to replace it or choose another path")
    input_path = Path(input_path)
    if not input_path.is_file():
        raise BertkitError(f"input file not found: {input_path}")
    loaded = load_task_model(model_path, device, threads)
    kind = task_kind(loaded.meta["architecture"])
    if kind.predicts_from == "questions":
        return predict_qa(loaded, input_path, output, batch_size, max_seq_len, quiet)
    task = loaded.meta.get("task") or {}
    max_len = window_length(loaded.cfg, task, max_seq_len)
    if max_len < 3:
        raise BertkitError(f"--max-seq-len must be at least 3, not {max_seq_len}")
    form = file_format(input_path)
    if quoting is None:  # a TSV input is read as the model's training files were (GLUE's are not quoted)
        recorded = task.get("quoting")
        quoting = recorded if form == "tsv" and recorded in QUOTINGS else "csv"
    if form == "dataset":
        raise BertkitError(f"{input_path}: predict reads files; export the split to JSON lines or Parquet first")
    request = PredictRequest(loaded.meta, loaded.tokenizer, max_len, loaded.cfg.type_vocab_size, input_path,
                             form == "text", text_field, text_pair_field)  # fmt: skip
    predictor = kind.predictor(request)
    run = _batched(loaded, batch_size)
    started = time.perf_counter()
    rows_done = 0
    chunk_rows = batch_size * CHUNK_BATCHES
    raw = open(input_path, "rb")  # noqa: SIM115 (closed in the finally below)
    counter = _CountingReader(raw)
    try:
        with jsonl_sink(output) as sink:
            if form == "parquet":
                rows_iter = _parquet_rows(input_path, predictor.fields)
            else:
                fields = predictor.fields if form != "text" else []
                rows_iter = _rows(input_path, form, _open_text(input_path, counter), fields, quoting)
            size = input_path.stat().st_size
            with Tracker("predict", total=size or None, quiet=quiet, unit="bytes") as tracker:
                shown = 0
                while True:
                    chunk = []
                    try:
                        for row in rows_iter:
                            chunk.append(row)
                            if len(chunk) >= chunk_rows:
                                break
                    except UnicodeDecodeError:
                        raise BertkitError(
                            f"{input_path} is not UTF-8 text (after row {rows_done + len(chunk)}); "
                            "re-encode it as UTF-8"
                        ) from None
                    if not chunk:
                        break
                    for record in predictor.records(chunk, run):
                        sink.write(json.dumps(record, ensure_ascii=False) + "\n")
                    sink.flush()
                    rows_done += len(chunk)
                    position = size if form == "parquet" else counter.position
                    tracker.advance(position - shown, info=f"{rows_done} rows")
                    shown = position
            if rows_done == 0:
                raise BertkitError(f"{input_path} holds no rows to predict (an empty file, or a header alone)")
    finally:
        raw.close()
    seconds = time.perf_counter() - started
    return {
        "output": "-" if to_stdout else str(output),
        "model": str(loaded.model_dir),
        "backend": loaded.backend,
        "task": kind.architecture,
        "rows": rows_done,
        "labels": list(loaded.meta.get("labels") or []),
        "max_seq_len": max_len,
        "seconds": round(seconds, 2),
        "rows_per_s": round(rows_done / seconds, 1) if seconds > 0 else None,
    }


def _batched(loaded: InferenceModel, batch_size: int) -> RunModel:
    """The model over rows of token ids, in batches of similar length (little padding), back in input order."""

    def run(input_ids: list[np.ndarray], types: list[np.ndarray] | None) -> list[np.ndarray]:
        order = np.argsort([len(ids) for ids in input_ids], kind="stable")
        results: list[np.ndarray] = [np.empty(0)] * len(input_ids)
        pad, target = loaded.tokenizer.pad_id, loaded.device
        with torch.no_grad():
            for start in range(0, len(order), batch_size):
                rows = [int(i) for i in order[start : start + batch_size]]
                ids, mask = pad_batch([input_ids[i] for i in rows], pad)
                type_ids = pad_batch([types[i] for i in rows], 0)[0].to(target) if types is not None else None
                logits = loaded.model(ids.to(target), mask.to(target), type_ids)["logits"].float().cpu().numpy()
                for j, i in enumerate(rows):
                    results[i] = logits[j]
        return results

    return run

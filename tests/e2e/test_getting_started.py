"""The getting-started guide (docs/getting-started.md) runs as written, so the docs cannot drift from the CLI.

Its ```bash blocks run in order in one empty directory, each with `bash -e -o pipefail`, with the venv's
`bertkit` and `python` first on PATH. A block preceded by `<!-- guide-test: skip -->` (set-up: clone, make) never
runs; one preceded by `<!-- guide-test: slow -->` (distil, compress) runs only in the slow suite (`make bench`); no
later block needs what a slow one writes.
Data: the guide's own first step, `bertkit quickstart --data-only`, which writes Python's documentation, movie
plots and Rotten Tomatoes reviews from packages on disk (bertkit/data/samples.py names the sources).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"
BLOCK = re.compile(r"(?:<!-- guide-test: (?P<mark>skip|slow) -->\n)?```bash\n(?P<body>.*?)```", re.S)


def guide_blocks() -> list[tuple[str | None, str]]:
    return [(m["mark"], m["body"]) for m in BLOCK.finditer(GUIDE.read_text(encoding="utf-8"))]


def test_the_guide_marks_only_setup_as_skipped() -> None:
    """The skip mark is for installing, not a way to hide a command that fails."""
    blocks = guide_blocks()
    assert len(blocks) >= 8
    skipped = [body for mark, body in blocks if mark == "skip"]
    assert skipped and all(re.search(r"\bmake (quickstart|test)\b", body) for body in skipped)
    assert any(mark == "slow" for mark, _ in blocks) and sum(mark is None for mark, _ in blocks) >= 6


@pytest.mark.parametrize("include_slow", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_getting_started_runs_as_written(tmp_path: Path, include_slow: bool) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "120"}
    ran = 0
    for mark, body in guide_blocks():
        if mark == "skip" or (mark == "slow" and not include_slow):
            continue
        result = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", body], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, f"guide block failed:\n{body}\n--- stderr ---\n{result.stderr[-3000:]}"
        ran += 1
    assert ran >= 7
    runs = tmp_path / "runs" / "gs"
    # What the guide says each step leaves behind.
    for path in ("tokenizer/vocab.txt", "corpus/manifest.json", "pretrain/model", "finetune/model", "hf/config.json"):
        assert (runs / path).exists(), path
    predictions = (runs / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(predictions) == 1000  # one line per held-out review
    if include_slow:
        assert len((runs / "onnx-predictions.jsonl").read_text(encoding="utf-8").splitlines()) == 1000
        assert (runs / "distill" / "model").is_dir() and (runs / "compress" / "model").is_dir()

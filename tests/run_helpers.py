"""Reading what a training run wrote, for tests that compare runs.

Importable from every test directory because pytest puts this folder (it holds the root conftest.py)
on sys.path.
"""

from __future__ import annotations

import json
from pathlib import Path


def loss_curve(run_dir: Path) -> list[tuple[int, float]]:
    """The (step, loss) of every training row in the run's metrics.jsonl (evaluation rows have no "loss")."""
    rows = map(json.loads, (run_dir / "metrics.jsonl").read_text("utf-8").splitlines())
    return [(row["step"], row["loss"]) for row in rows if "loss" in row]

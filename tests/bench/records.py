"""Benchmark records: one JSON file per finished run under `results/`, never edited by hand.

A record holds what reruns it (`command`), where and when it ran (`commit`, `date`, `machine`), its `settings`, and
its `figures`: bertkit's and each baseline's from the same run, each a value with its unit. The results pages
(README, docs/results.md) are generated from these files by `results_pages.py`, so no page quotes a figure that no
run produced. A run that fails before `write_record` writes nothing; the file is written under a temporary name
and renamed, so a killed run leaves no half-written record.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(os.environ.get("BERTKIT_RESULTS_DIR") or ROOT / "results")
REQUIRED = ("bench", "command", "commit", "date", "machine", "settings", "figures")
MACHINE_KEYS = ("cpu", "cores", "gpu", "gpu_count", "torch", "cuda", "precision")


def figure(value: float, unit: str, side: str = "bertkit", note: str = "") -> dict[str, Any]:
    """One figure of a record: its value, unit, which side produced it (bertkit or a baseline's name)."""
    entry: dict[str, Any] = {"value": value, "unit": unit, "side": side}
    if note:
        entry["note"] = note
    return entry


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(precision: str) -> dict[str, Any]:
    """The machine as the record states it: CPU model and cores, GPU name and count, torch and CUDA, precision."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "gpu": torch.cuda.get_device_name(0) if gpus else None,
        "gpu_count": gpus,
        "torch": torch.__version__,
        "cuda": torch.version.cuda if gpus else None,
        "precision": precision,
    }


def commit() -> str:
    """The commit the run measured, with `+dirty` when the work tree had uncommitted changes to bertkit/ or tests/."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "bertkit", "tests"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty else "")


def write_record(
    bench: str,
    command: str,
    settings: dict[str, Any],
    figures: dict[str, dict[str, Any]],
    precision: str,
    folder: Path | None = None,
    dry_run: bool = False,
) -> Path:
    """Write one finished run's record under `folder` (default `results/<bench>/`); its path."""
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    record = {
        "bench": bench,
        "command": command,
        "commit": commit(),
        "date": now.isoformat(),
        "machine": machine(precision),
        "dry_run": dry_run,
        "settings": settings,
        "figures": figures,
    }
    problems = check_record(record)
    if problems:
        raise ValueError(f"record of {bench} is incomplete: {'; '.join(problems)}")
    folder = Path(folder) if folder is not None else RESULTS / bench
    folder.mkdir(parents=True, exist_ok=True)
    kind = record["machine"]["gpu"] or record["machine"]["cpu"]
    slug = re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-")[:40]
    path = folder / f"{bench}-{now.strftime('%Y%m%dT%H%M%SZ')}-{slug}{'-dry-run' if dry_run else ''}.json"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def check_record(record: dict[str, Any]) -> list[str]:
    """What a record lacks: each required field, the machine's keys, and a value and unit for every figure."""
    # Every field must be there and non-empty, but a bench may have no settings to state.
    problems = [f"no {key}" for key in REQUIRED if key not in record or (not record[key] and key != "settings")]
    problems += [f"machine has no {key}" for key in MACHINE_KEYS if key not in (record.get("machine") or {})]
    for name, entry in (record.get("figures") or {}).items():
        if not isinstance(entry, dict) or not isinstance(entry.get("value"), (int, float)) or not entry.get("unit"):
            problems.append(f"figure {name} needs a number 'value' and a 'unit'")
    return problems


def load_records(folder: Path | None = None) -> list[dict[str, Any]]:
    """Every record under `folder` (default `results/`), each with its `path` relative to
    the folder above it (the repository root for `results/`)."""
    folder = Path(folder) if folder is not None else RESULTS
    records = []
    for path in sorted(folder.rglob("*.json")):
        record = json.loads(path.read_text("utf-8"))
        record["path"] = str(path.relative_to(folder.parent))
        records.append(record)
    return records

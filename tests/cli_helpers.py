"""Running the bertkit CLI in-process from tests: a JSON result, or the single error line.

Importable from every test directory because pytest puts this folder (it holds the root conftest.py)
on sys.path.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.pipelines.summary import RunSummary, read_summary

runner = CliRunner()


def run_json(*args: str, input: str | bytes | None = None) -> dict:
    """Run a command with --json --quiet; it must succeed, and its last stdout line is the result."""
    result = runner.invoke(app, [*args, "--json", "--quiet"], input=input)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_once(kind: type[RunSummary], output: Path, *args: str) -> dict:
    """A training command's summary: read back when `output` holds the run finished (its summary.json written),
    else the command run to `output` (benches that keep their runs in a work folder)."""
    if (output / "summary.json").is_file():
        return read_summary(output, kind).as_json()
    return run_json(*args, "-o", str(output))


def error_line(result) -> str:
    """A failed invocation must exit 2 with exactly one `error:` line on stderr and no traceback."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()  # blank lines count: stderr holds the error line and nothing else
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def run_error(*args: str) -> str:
    return error_line(runner.invoke(app, list(args)))


def split_reviews(sentiment_csv: Path, folder: Path, train: int) -> dict[str, Path]:
    """A text,label CSV split into folder/train.csv (its first `train` rows) and folder/eval.csv (the rest)."""
    with open(sentiment_csv, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    out = {}
    for name, part in (("train", rows[:train]), ("eval", rows[train:])):
        out[name] = folder / f"{name}.csv"
        with open(out[name], "w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, ["text", "label"])
            writer.writeheader()
            writer.writerows(part)
    return out

"""The results pages and the records behind them (tests/bench/records.py, tests/bench/results_pages.py).

- Every record under results/ states what reruns it, the commit, the date and the machine, and each figure a value
  and a unit.
- The README's results block and docs/results.md are what the records give (regenerated here and compared), so a
  page cannot quote a figure that no record holds; and every number in their tables is found in a record.
- Their shape: the README table at most 6 rows, no cell over 25 words, each table under one sentence naming its
  machine; docs/results.md at most 300 lines; no page under docs/ over 600 lines.
- A record that lacks a field is refused when written, and nothing is left behind.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from records import RESULTS, check_record, figure, load_records, write_record  # noqa: E402
from results_pages import END, README, RECORDS_PAGE, RESULTS_PAGE, START, render  # noqa: E402


def test_every_record_is_complete() -> None:
    for record in load_records():
        assert check_record(record) == [], record["path"]
        assert record["commit"] != "unknown" and record["command"].strip()


def test_pages_are_what_the_records_give() -> None:
    for path, text in zip((README, RESULTS_PAGE, RECORDS_PAGE), render(), strict=True):
        assert path.read_text("utf-8") == text, f"{path.name} differs: run python tests/bench/results_pages.py"


def _table_rows(text: str) -> list[list[str]]:
    rows = [line for line in text.splitlines() if line.startswith("|") and not set(line) <= set("|-")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def _numbers(text: str) -> set[float]:
    return {float(n.replace(",", "")) for n in re.findall(r"(?<![\w.])\d[\d,]*(?:\.\d+)?", text)}


def _record_numbers() -> set[float]:
    found: set[float] = set()
    for record in load_records():
        if record.get("dry_run"):
            continue
        for entry in record["figures"].values():
            x = entry["value"]
            found |= {round(x, d) for d in range(4)} | {float(round(x))}
        found |= {float(v) for v in record["settings"].values() if isinstance(v, (int, float))}
    return found


def test_every_table_figure_is_a_records() -> None:
    """Each number in a results table's bertkit, baseline and ratio cells is a record's figure as shown (rounded),
    or the difference of two (a gap in points)."""
    known = _record_numbers()
    readme = README.read_text("utf-8")
    block = readme[readme.index(START) : readme.index(END)]
    for text in (block, RESULTS_PAGE.read_text("utf-8")):
        for row in _table_rows(text)[1:]:
            if row[0] in ("what", "model", "recipe"):
                continue
            for cell in row[1:4]:
                for n in _numbers(cell.replace("±", " ")):
                    gaps = {round(abs(a - b), 1) for a in known for b in known} if n not in known else set()
                    assert n in known or n in gaps, f"{n} in '{cell}' is in no record"


def test_page_shapes() -> None:
    readme = README.read_text("utf-8")
    block = readme[readme.index(START) : readme.index(END)]
    rows = [r for r in _table_rows(block) if r[0] != "what"]
    assert len(rows) <= 6
    for row in rows:
        assert all(len(cell.split()) <= 25 for cell in row), row
    for table_start in [m.start() for m in re.finditer(r"\n\| what \|", block)]:
        sentence = block[:table_start].rstrip().splitlines()[-1]
        assert sentence.startswith("Measured on ") and re.search(r"\d{4}-\d\d-\d\d", sentence)
    assert len(RESULTS_PAGE.read_text("utf-8").splitlines()) <= 300
    for page in (ROOT / "docs").rglob("*.md"):
        assert len(page.read_text("utf-8").splitlines()) <= 600, page


def test_an_incomplete_record_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="figure speed needs a number 'value' and a 'unit'"):
        write_record("demo", "make demo", {}, {"speed": {"value": "fast", "unit": ""}}, "fp32", tmp_path)
    with pytest.raises(ValueError, match="no command"):
        write_record("demo", "", {}, {"speed": figure(1.0, "tokens/s")}, "fp32", tmp_path)
    assert list(tmp_path.iterdir()) == []
    path = write_record("demo", "make demo", {"n": 1}, {"speed": figure(1.0, "tokens/s")}, "fp32", tmp_path)
    assert check_record(load_records(tmp_path)[0]) == [] and path.parent == tmp_path
    assert RESULTS.name == "results"


def test_a_run_off_a_default_setting_is_not_the_headline() -> None:
    """A bench run with a setting off its default (results_pages.DEFAULTS) is quoted beside the headline, never as
    it: the tables take the newest run at the defaults, older runs without the setting counting as defaults; the
    newest run of each combination of settings off the defaults is quoted, named by what differs."""
    from results_pages import newest, newest_variants, variant_words

    tuned = {"distill_loss": "mse", "teacher": "all-MiniLM-L6-v2 fine-tuned on the pairs"}
    runs = [{"bench": "compress-retrieval", "date": "2026-01-01", "settings": {}},
            {"bench": "compress-retrieval", "date": "2026-01-02", "settings": tuned},
            {"bench": "compress-retrieval", "date": "2026-01-03", "settings": {"distill_loss": "kl"}},
            {"bench": "compress-retrieval", "date": "2026-01-04", "settings": {"distill_loss": "kl", "teacher": "X"}},
            {"bench": "compress-retrieval", "date": "2026-01-05", "settings": {"distill_loss": "kl"}}]  # fmt: skip
    assert newest(runs)["compress-retrieval"]["date"] == "2026-01-02"  # type: ignore[arg-type]
    variants = newest_variants(runs)["compress-retrieval"]  # type: ignore[arg-type]
    assert [r["date"] for r in variants] == ["2026-01-04", "2026-01-05"]
    assert variant_words(variants[0]) == "`--set task.distill_loss=kl` and the teacher X"  # type: ignore[arg-type]
    assert newest_variants(runs[:2]) == {}  # type: ignore[arg-type]
    weighted = {**tuned, "distill_weight": 4.0}
    assert variant_words({"bench": "compress-retrieval", "settings": weighted}) == "`--set task.distill_weight=4`"

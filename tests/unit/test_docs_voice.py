"""The README and the documentation speak to a user about the software: nothing about how the project was made
(its tracker, work periods, who had which machine, what an earlier version of a page said). Such history goes in
CHANGELOG.md. The phrases that give it away are listed beside this test (history_phrases.txt)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PHRASES = Path(__file__).with_name("history_phrases.txt")


def patterns() -> list[re.Pattern[str]]:
    lines = [line.strip() for line in PHRASES.read_text("utf-8").splitlines()]
    return [re.compile(line, re.IGNORECASE) for line in lines if line and not line.startswith("#")]


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_pages_speak_of_the_software_not_of_its_making() -> None:
    found = []
    for page in pages():
        for number, line in enumerate(page.read_text("utf-8").splitlines(), 1):
            if any(p.search(line) for p in patterns()):
                found.append(f"{page.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, "project history in user pages (move it to CHANGELOG.md):\n" + "\n".join(found)


def test_the_phrase_list_catches_what_it_is_for() -> None:
    """Each kind of history the list is for is caught, and plain prose about the software is not."""
    history = [
        "the issue's target is 50% MFU",
        "It has not been run yet: no GPU was available.",
        "An earlier version of this page said the Trainer had not left it: that was wrong.",
        "measured in this session on 2 cores",
        "see issue 38",
    ]
    plain = [
        "A tracker's run id is kept in RUN_DIR/tracking.json.",
        "Bad input is one error line and exit code 2.",
        "Measured on a 2-core AMD EPYC, 2026-11-25: `python tests/bench/ttq.py --minutes 55`.",
    ]
    assert all(any(p.search(text) for p in patterns()) for text in history)
    assert not any(p.search(text) for p in patterns() for text in plain)

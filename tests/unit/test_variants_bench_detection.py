"""The variants bench's held-out replaced-token detection for ELECTRA (tests/bench/variants.py): the ranking
measure against scipy's Mann-Whitney statistic, and the corruption and scoring through the transformers exports of
a real ELECTRA run (electra-tiny on Python's documentation)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import run_json

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "variants.py"


@pytest.fixture(scope="module")
def variants():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("variants_bench_detection", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ranking_is_the_mann_whitney_auc(variants) -> None:
    from scipy.stats import mannwhitneyu

    # scikit-learn's roc_auc_score example: 0.75.
    assert variants.ranking(torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([0, 0, 1, 1])) == {
        "auc": 0.75, "acc": 0.5, "guess": 0.5,
    }  # fmt: skip
    rng = np.random.default_rng(0)
    replaced = rng.random(5000) < 0.14
    scores = np.round(rng.normal(size=5000) + 0.8 * replaced, 1) - 1.0  # rounded: many ties
    got = variants.ranking(torch.from_numpy(scores), torch.from_numpy(replaced))
    statistic = mannwhitneyu(scores[replaced], scores[~replaced]).statistic
    assert got["auc"] == pytest.approx(statistic / (replaced.sum() * (~replaced).sum()), abs=1e-4)
    assert got["acc"] == pytest.approx(float(((scores > 0) == replaced).mean()), abs=1e-4)
    assert got["guess"] == pytest.approx(1 - float(replaced.mean()), abs=1e-4)
    with pytest.raises(ValueError, match="replaced and original"):
        variants.ranking(torch.zeros(3), torch.zeros(3))


def test_held_out_detection_through_the_exports(variants, corpus_dir: Path, text_file: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_json("pretrain", "--recipe", "electra-tiny", "--corpus", str(corpus_dir), "--output", str(run),
             "--set", "train.steps=20", "--set", "train.batch_size=16", "--set", "engine.threads=1")  # fmt: skip
    for head in ("generator", "pretraining"):
        run_json("export", str(run), "--to", "hf", "--head", head, "--output", str(tmp_path / head))
    paragraphs = [p.strip() for p in text_file.read_text("utf-8").split("\n\n") if p.strip()][:40]
    held = tmp_path / "held.jsonl"
    held.write_text("".join(json.dumps(p) + "\n" for p in paragraphs), "utf-8")
    masks = variants.evaluation_set(held, tmp_path / "generator", text_file)
    found = variants.held_out_detection(tmp_path / "generator", tmp_path / "pretraining", masks)
    real = int(masks["attention_mask"].sum())
    masked = int((masks["labels"] != -100).sum())
    # Only masked tokens can be replaced, and a sample equal to the original is not.
    replaced = round((1 - found["rtd_guess"]) * real)
    assert replaced == round(masked * (1 - found["generator_sampled_original"]))
    assert 0 < replaced <= masked < real
    assert 0.0 <= found["rtd_auc"] <= 1.0 and 0.0 <= found["generator_mlm_acc"] <= 1.0
    # The generator's draws are seeded: the same seed scores the same, another draws other replacements.
    assert variants.held_out_detection(tmp_path / "generator", tmp_path / "pretraining", masks) == found
    assert variants.held_out_detection(tmp_path / "generator", tmp_path / "pretraining", masks, seed=1) != found

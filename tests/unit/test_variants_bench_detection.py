"""The variants bench's held-out replaced-token detection for ELECTRA (tests/bench/variants.py): the ranking
measure against scipy's Mann-Whitney statistic, and the corruption and scoring through the transformers exports of
a real ELECTRA run (electra-tiny on Python's documentation)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import run_json


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
    electra = {"mask_fraction": 0.85, "random_fraction": 0.0}
    found = variants.held_out_detection(tmp_path / "generator", tmp_path / "pretraining", masks, electra)
    real = int(masks["attention_mask"].sum())
    masked = int((masks["labels"] != -100).sum())
    # Only masked tokens can be replaced, and a sample equal to the original is not.
    replaced = round((1 - found["rtd_guess"]) * real)
    assert replaced == round(masked * (1 - found["generator_sampled_original"]))
    assert 0 < replaced <= masked < real
    assert 0.0 <= found["rtd_auc"] <= 1.0 and 0.0 <= found["generator_mlm_acc"] <= 1.0
    # The generator's draws are seeded: the same seed scores the same, another draws other replacements.
    exports = (tmp_path / "generator", tmp_path / "pretraining")
    assert variants.held_out_detection(*exports, masks, electra) == found
    assert variants.held_out_detection(*exports, masks, electra, seed=1) != found


def test_detection_scores_each_electra_run_once(variants, tmp_path: Path, monkeypatch) -> None:
    """`detection` exports each ELECTRA run's generator and discriminator, scores them with the generator's input
    masked as the run's own recipe says, keeps the figures beside the model, and leaves the other variants alone."""
    work = tmp_path / "work"
    rows = []
    runs = (("electra", "electra", 0.85), ("electra-gen0.5", "electra", 0.8), ("bert", "bert", 0.8))
    for name, variant, split in runs:
        run = work / "runs" / name
        (run / "model").mkdir(parents=True)
        masking = f"{{prob: 0.15, mask_fraction: {split}, random_fraction: 0.0}}"
        (run / "recipe.yaml").write_text(f"data:\n  masking: {masking}\n", "utf-8")
        rows.append({"name": name, "variant": variant, "model_dir": str(run / "model")})
    exports: list[tuple] = []
    monkeypatch.setattr(variants, "bertkit", lambda *args: exports.append(args))
    monkeypatch.setattr(variants, "evaluation_set", lambda *args: {"masks": True})
    scored: list[tuple] = []

    def score(generator, discriminator, masks, masking):
        scored.append((generator.name, discriminator.name, masking["mask_fraction"]))
        return {"rtd_auc": 0.6}

    monkeypatch.setattr(variants, "held_out_detection", score)
    paths = {"held-documents": work / "held.jsonl", "tok": work / "tok", "train": work / "train.txt"}
    variants.detection(work, paths, rows)
    assert scored == [("electra-generator", "electra-pretraining", 0.85),
                      ("electra-gen0.5-generator", "electra-gen0.5-pretraining", 0.8)]  # fmt: skip
    assert sorted(args[args.index("--head") + 1] for args in exports) == ["generator", "generator", "pretraining",
                                                                           "pretraining"]  # fmt: skip
    assert [row.get("heldout_rtd_auc") for row in rows] == [0.6, 0.6, None]
    # Kept beside the model: a second pass exports and scores nothing.
    exports.clear(), scored.clear()
    variants.detection(work, paths, [dict(row) for row in rows])
    assert exports == [] and scored == []

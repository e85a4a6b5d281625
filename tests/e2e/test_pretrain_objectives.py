"""Each pretraining objective end to end: build-corpus with the format it needs, then pretrain on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.config.recipe import load_recipe
from bertkit.corpus.build import BuildOptions, build_corpus
from bertkit.errors import BertkitError
from bertkit.pipelines.pretrain import pretrain


@pytest.mark.parametrize(
    ("recipe", "corpus_options", "overrides", "losses"),
    [
        ("bert-tiny", {"format": "segment-pair"}, ["objective.nsp=1"], {"mlm_loss", "nsp_loss"}),
        ("albert-tiny", {"format": "sop", "mask_strategy": "ngram"}, [], {"mlm_loss", "sop_loss"}),
        ("spanbert-tiny", {"format": "single-segment", "mask_strategy": "span"}, [], {"mlm_loss", "sbo_loss"}),
    ],
)
def test_objective_trains_on_the_corpus_format_it_needs(
    tmp_path: Path,
    text_file: Path,
    tokenizer_dir: Path,
    recipe: str,
    corpus_options: dict,
    overrides: list[str],
    losses: set[str],
) -> None:
    build_corpus([text_file], tokenizer_dir, tmp_path / "corpus", BuildOptions(max_seq_len=64, **corpus_options))
    loaded = load_recipe(
        recipe,
        [
            f"data.train={tmp_path / 'corpus'}",
            "train.steps=12",
            "train.log_every=4",
            "train.eval_batches=2",
            *overrides,
        ],
    )
    summary = pretrain(loaded, tmp_path / "run", quiet=True)  # type: ignore[arg-type]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    logged = rows[0].keys()
    assert losses <= logged, logged
    assert {f"{name}" for name in losses} <= summary["eval"].keys()
    assert summary["loss_last"] < summary["loss_first"]


def test_nsp_on_a_full_sentences_corpus_is_one_clear_error(corpus_dir: Path, tmp_path: Path) -> None:
    loaded = load_recipe("bert-tiny", [f"data.train={corpus_dir}", "objective.nsp=1"])
    with pytest.raises(BertkitError, match="--format segment-pair"):
        pretrain(loaded, tmp_path / "run", quiet=True)  # type: ignore[arg-type]
    assert not (tmp_path / "run").exists()

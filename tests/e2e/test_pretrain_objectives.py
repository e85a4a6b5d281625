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
    assert {f"{name}" for name in losses} <= (summary.eval or {}).keys()
    assert summary.loss_last is not None and summary.loss_first is not None and summary.loss_last < summary.loss_first


def test_nsp_on_a_full_sentences_corpus_is_one_clear_error(corpus_dir: Path, tmp_path: Path) -> None:
    loaded = load_recipe("bert-tiny", [f"data.train={corpus_dir}", "objective.nsp=1"])
    with pytest.raises(BertkitError, match="--format segment-pair"):
        pretrain(loaded, tmp_path / "run", quiet=True)  # type: ignore[arg-type]
    assert not (tmp_path / "run").exists()


def test_held_out_figures_do_not_depend_on_the_accumulation_split(
    tmp_path: Path, text_file: Path, tokenizer_dir: Path
) -> None:
    """Two objectives (MLM + NSP) on Python's documentation: the held-out set is walked in micro-batches, and
    each metric is a mean over its own targets (masked tokens for MLM, sequences for NSP), so splitting the
    same global batch in 1 or 4 micro-steps reports the same figures. Dropout off: the steps are the same too."""
    build_corpus([text_file], tokenizer_dir, tmp_path / "corpus", BuildOptions(max_seq_len=64, format="segment-pair"))
    evals = []
    for accum in (1, 4):
        loaded = load_recipe(
            "bert-tiny",
            [
                f"data.train={tmp_path / 'corpus'}",
                "objective.nsp=1",
                "model.hidden_dropout=0",
                "model.attention_dropout=0",
                "train.steps=2",
                "train.batch_size=12",
                f"train.grad_accum={accum}",
                "train.eval_batches=3",
            ],
        )
        evals.append(pretrain(loaded, tmp_path / f"run-{accum}", quiet=True).eval)  # type: ignore[arg-type]
    whole, split = evals
    assert {"mlm_acc", "nsp_acc", "nsp_loss"} <= whole.keys()
    for key in ("mlm_acc", "mlm_loss", "nsp_acc", "nsp_loss"):
        assert split[key] == pytest.approx(whole[key], abs=2e-4), key

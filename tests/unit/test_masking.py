"""Statistical checks of every mask strategy on real text (Python's documentation, WordPiece tokenizer)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bertkit.config.recipe import load_recipe
from bertkit.corpus.build import BuildOptions, build_corpus
from bertkit.corpus.masking import MaskingSpec, mask_tokens
from bertkit.corpus.shards import Corpus
from bertkit.pipelines.pretrain import mlm_masking_spec
from bertkit.tokenizers.base import load_tokenizer

SPAN_MEAN = 3.7971  # sum n p(n) for p(n) ∝ 0.2·0.8^(n-1), n = 1..10 (SpanBERT: "mean 3.8")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory, text_file: Path, tokenizer_dir: Path) -> dict[int, Corpus]:
    root = tmp_path_factory.mktemp("masking")
    out = {}
    for length in (128, 512):
        build_corpus([text_file], tokenizer_dir, root / str(length), BuildOptions(max_seq_len=length))
        out[length] = Corpus(root / str(length))
    return out


def spec_for(tokenizer_dir: Path, strategy: str, **kwargs) -> MaskingSpec:
    tok = load_tokenizer(tokenizer_dir)
    return MaskingSpec(0.15, 0.8, 0.1, tok.mask_id, tok.special_ids, tok.vocab_size, strategy=strategy, **kwargs)


def mask_all(corpus: Corpus, spec: MaskingSpec, epochs: int = 1):
    candidates = spec.random_candidates()
    for epoch in range(epochs):
        for index in range(len(corpus)):
            rng = np.random.default_rng([7, epoch, index])
            yield index, mask_tokens(corpus[index], corpus.word_starts(index), spec, rng, candidates)


def rates(corpus: Corpus, spec: MaskingSpec, epochs: int = 1) -> dict[str, float]:
    special = np.fromiter(spec.special_ids, np.int64)
    maskable = selected = masked = randomized = 0
    for index, item in mask_all(corpus, spec, epochs):
        original = corpus[index].astype(np.int64)
        maskable += int((~np.isin(original, special)).sum())
        selected += item.positions.size
        served = item.ids[item.positions]
        masked += int((served == spec.mask_id).sum())
        randomized += int(((served != spec.mask_id) & (served != original[item.positions])).sum())
        np.testing.assert_array_equal(item.labels, original[item.positions])
        assert not np.isin(item.positions, np.flatnonzero(np.isin(original, special))).any()
    kept = selected - masked - randomized
    return {
        "rate": selected / maskable,
        "mask": masked / selected,
        "random": randomized / selected,
        "kept": kept / selected,
    }


@pytest.mark.parametrize("strategy", ["token", "whole-word"])
def test_mask_rate_and_80_10_10(corpora: dict[int, Corpus], tokenizer_dir: Path, strategy: str) -> None:
    got = rates(corpora[128], spec_for(tokenizer_dir, strategy), epochs=2)
    assert abs(got["rate"] - 0.15) <= 0.005, got
    assert abs(got["mask"] - 0.8) <= 0.01, got
    # A random replacement hits the original id about 1/vocab of the time and then looks "kept".
    assert abs(got["random"] - 0.1) <= 0.01, got
    assert abs(got["kept"] - 0.1) <= 0.01, got


def word_ranges(starts: np.ndarray, ids: np.ndarray, special: np.ndarray) -> list[tuple[int, int]]:
    """Independent reconstruction of the words: a word starts at a flagged token or after a special token."""
    ranges, begin = [], None
    for i, token in enumerate(ids):
        if token in special:
            if begin is not None:
                ranges.append((begin, i))
            begin = None
            continue
        if begin is None or starts[i]:
            if begin is not None:
                ranges.append((begin, i))
            begin = i
    return ranges


@pytest.mark.parametrize("strategy", ["whole-word", "ngram", "span"])
def test_word_level_strategies_mask_whole_words(corpora: dict[int, Corpus], tokenizer_dir: Path, strategy: str) -> None:
    spec = spec_for(tokenizer_dir, strategy)
    tok = load_tokenizer(tokenizer_dir)
    special = np.fromiter(spec.special_ids, np.int64)
    partial_words = continuation_masked = 0
    for index, item in mask_all(corpora[128], spec):
        if index >= 300:
            break
        masked = np.zeros(len(item.ids), bool)
        masked[item.positions] = True
        original = corpora[128][index]
        for a, b in word_ranges(corpora[128].word_starts(index), original, special):
            partial_words += int(0 < masked[a:b].sum() < b - a)
        # WordPiece continuations (##) are never the first masked token of a unit.
        continuation_masked += sum(tok.id_to_token(int(original[a])).startswith("##") for a, _ in item.spans)
    assert partial_words == 0 and continuation_masked == 0


def test_ngram_lengths_follow_one_over_n(corpora: dict[int, Corpus], tokenizer_dir: Path) -> None:
    lengths = np.concatenate(
        [item.span_words for _, item in mask_all(corpora[512], spec_for(tokenizer_dir, "ngram"), 2)]
    )
    freq = np.bincount(lengths, minlength=4)[1:] / lengths.size
    expected = np.array([1, 1 / 2, 1 / 3]) / (11 / 6)
    assert lengths.max() == 3
    assert np.abs(freq - expected).max() < 0.02, (freq, expected)


def test_span_lengths_and_per_span_corruption(corpora: dict[int, Corpus], tokenizer_dir: Path) -> None:
    spec = spec_for(tokenizer_dir, "span")
    words, fates = [], []
    for index, item in mask_all(corpora[512], spec, 2):
        words.append(item.span_words)
        original = corpora[512][index]
        for a, b in item.spans:
            served = item.ids[a:b]
            kinds = {
                "mask" if t == spec.mask_id else ("kept" if t == o else "random")
                for t, o in zip(served, original[a:b], strict=True)
            }
            kinds.discard("kept") if "random" in kinds else None  # a random draw may hit the original id
            fates.append(kinds)
    lengths = np.concatenate(words)
    assert lengths.min() >= 1 and lengths.max() <= 10
    assert abs(lengths.mean() - SPAN_MEAN) / SPAN_MEAN < 0.05, lengths.mean()
    # 80/10/10 decided once per span: every span is all [MASK], all random or all kept.
    assert all(len(f) == 1 for f in fates)
    share = np.mean([f == {"mask"} for f in fates])
    assert abs(share - 0.8) < 0.02
    got = rates(corpora[512], spec)
    assert abs(got["rate"] - 0.15) <= 0.005, got


def test_specials_never_masked_nor_drawn(corpora: dict[int, Corpus], tokenizer_dir: Path) -> None:
    tok = load_tokenizer(tokenizer_dir)
    spec = MaskingSpec(0.5, 0.0, 1.0, tok.mask_id, tok.special_ids, tok.vocab_size, strategy="token")
    special = np.fromiter(tok.special_ids, np.int64)
    for index, item in mask_all(corpora[128], spec):
        assert not np.isin(item.ids[item.positions], special).any()
        assert not np.isin(corpora[128][index][item.positions], special).any()


def test_max_predictions_caps_the_budget(corpora: dict[int, Corpus], tokenizer_dir: Path) -> None:
    for strategy in ("token", "whole-word", "span"):
        spec = spec_for(tokenizer_dir, strategy, max_predictions=5)
        assert max(item.positions.size for _, item in mask_all(corpora[128], spec)) == 5


@pytest.mark.parametrize("recipe", ["electra-small", "electra-base", "electra-tiny"])
def test_electra_recipes_mask_as_electra_does(corpora: dict[int, Corpus], tokenizer_dir: Path, recipe: str) -> None:
    """ELECTRA's generator input: 15% of the tokens chosen, 85% of those [MASK], the rest left as they are, none
    replaced at random (google-research/electra, pretrain/pretrain_helpers.py `mask`), through the recipe's own
    `data.masking` and the pipeline's spec, as `bertkit pretrain --recipe electra-*` masks."""
    spec = mlm_masking_spec(load_recipe(recipe).data.masking, load_tokenizer(tokenizer_dir))
    got = rates(corpora[128], spec, epochs=2)
    assert abs(got["rate"] - 0.15) <= 0.005, got
    assert abs(got["mask"] - 0.85) <= 0.01, got
    assert got["random"] == 0.0, got
    assert abs(got["kept"] - 0.15) <= 0.01, got

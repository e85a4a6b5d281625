"""Masked-language-model corruption, one code path for build time (static) and serving time (dynamic).

Strategies, all with a budget of round(prob * maskable tokens) (at least one, at most `max_predictions`):
  token       BERT: individual tokens.
  whole-word  BERT's whole-word masking: every sub-token of a chosen word. Words come from the tokenizer's
              own word boundaries (stored as word-start flags in the corpus), so WordPiece (##), byte-level
              BPE (Ġ) and SentencePiece (▁) all work.
  ngram       ALBERT: n-grams of whole words, n <= 3 with p(n) proportional to 1/n.
  span        SpanBERT: spans of whole words with length ~ Geometric(0.2) truncated to [1, 10]; 80/10/10 is
              decided once per span, not per token.
Special tokens are never selected, and the random replacement never draws a special token.

For n-grams and spans the length is drawn first and only the anchor is re-drawn when a span would overlap
earlier ones, so the length distribution stays the paper's; a span is shortened only when the budget
has no room left for it (the last span of a sequence).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

STRATEGIES = ("token", "whole-word", "ngram", "span")


@dataclass(frozen=True)
class MaskingSpec:
    prob: float
    mask_fraction: float
    random_fraction: float
    mask_id: int
    special_ids: frozenset[int]
    vocab_size: int
    # None: whatever the corpus was built with (the loader fills it in), "token" when it says nothing.
    strategy: str | None = None
    max_predictions: int = 0  # 0: no cap beyond the probability
    max_ngram: int = 3
    span_p: float = 0.2
    span_max: int = 10

    def __post_init__(self) -> None:
        if self.strategy is not None and self.strategy not in STRATEGIES:
            raise ValueError(f"unknown mask strategy '{self.strategy}'; choose one of {', '.join(STRATEGIES)}")

    def random_candidates(self) -> np.ndarray:
        ids = np.arange(self.vocab_size, dtype=np.int64)
        return ids[~np.isin(ids, np.fromiter(self.special_ids, dtype=np.int64))]

    def length_distribution(self) -> np.ndarray:
        """p(n) for n = 1..len: ALBERT's 1/n for n-grams, SpanBERT's truncated geometric for spans."""
        if self.strategy == "ngram":
            weights = 1.0 / np.arange(1, self.max_ngram + 1)
        elif self.strategy == "span":
            lengths = np.arange(1, self.span_max + 1)
            weights = self.span_p * (1 - self.span_p) ** (lengths - 1)
        else:
            weights = np.ones(1)
        return weights / weights.sum()


@dataclass
class MaskedSequence:
    ids: np.ndarray  # corrupted ids (int64)
    positions: np.ndarray  # masked positions, sorted (int64)
    labels: np.ndarray  # original ids at those positions (int64)
    spans: np.ndarray = field(default_factory=lambda: np.empty((0, 2), np.int64))  # [start, end) per unit
    span_words: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # words per unit


def _words(maskable: np.ndarray, word_starts: np.ndarray | None, by_token: bool) -> tuple[np.ndarray, ...]:
    """Word start/end positions among maskable tokens, and whether each word touches the next one."""
    positions = np.flatnonzero(maskable)
    if positions.size == 0:
        empty = np.empty(0, np.int64)
        return empty, empty, np.empty(0, bool)
    # A word also starts after a special token or any gap, whatever the flags say.
    new = np.ones(positions.size, bool)
    new[1:] = positions[1:] != positions[:-1] + 1
    if by_token or word_starts is None:
        new[:] = True
    else:
        new |= word_starts[positions].astype(bool)
    starts = positions[new]
    ends = np.append(positions[np.flatnonzero(new)[1:] - 1] + 1, positions[-1] + 1)
    linked = ends[:-1] == starts[1:]
    return starts, ends, linked


def _choose_whole_words(sizes: np.ndarray, budget: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """BERT's whole-word selection: words in random order, skipping any that would overflow the budget."""
    chosen: list[tuple[int, int]] = []
    total = 0
    for word in rng.permutation(sizes.size):
        if total + sizes[word] > budget:
            continue
        chosen.append((int(word), 1))
        total += int(sizes[word])
        if total == budget:
            break
    return chosen


def _choose_spans(
    sizes: np.ndarray,
    linked: np.ndarray,
    budget: int,
    probs: np.ndarray,
    rng: np.random.Generator,
    gap: bool = False,
) -> list[tuple[int, int]]:
    """(first word, word count) of non-overlapping runs of contiguous words, lengths drawn from `probs`.

    With `gap`, spans never touch: the words just outside a span stay unmasked, so SpanBERT's boundary
    tokens are always visible.
    """
    count = sizes.size
    free = np.ones(count, bool)
    token_cum = np.concatenate([[0], np.cumsum(sizes)])
    gap_cum = np.concatenate([[0], np.cumsum(~linked)]) if count > 1 else np.zeros(1, np.int64)
    chosen: list[tuple[int, int]] = []
    total = 0
    while total < budget:
        length = int(rng.choice(probs.size, p=probs)) + 1
        taken_cum = np.concatenate([[0], np.cumsum(~free)])
        placed = False
        while length >= 1 and not placed:
            anchors = np.arange(count - length + 1)
            if anchors.size:
                ok = taken_cum[anchors + length] == taken_cum[anchors]
                ok &= gap_cum[anchors + length - 1] == gap_cum[anchors]
                ok &= token_cum[anchors + length] - token_cum[anchors] <= budget - total
                valid = anchors[ok]
                if valid.size:
                    start = int(valid[rng.integers(valid.size)])
                    free[max(0, start - gap) : start + length + gap] = False
                    total += int(token_cum[start + length] - token_cum[start])
                    chosen.append((start, length))
                    placed = True
                    break
            length -= 1  # no room for this length (end of the budget or a crowded sequence)
        if not placed:
            break
    return chosen


def mask_tokens(
    ids: np.ndarray,
    word_starts: np.ndarray | None,
    spec: MaskingSpec,
    rng: np.random.Generator,
    candidates: np.ndarray,
) -> MaskedSequence:
    """Corrupt one sequence; `word_starts` (bool per token) drives the word-level strategies."""
    strategy = spec.strategy or "token"
    ids = np.asarray(ids).astype(np.int64, copy=True)
    maskable = ~np.isin(ids, np.fromiter(spec.special_ids, dtype=np.int64))
    num_maskable = int(maskable.sum())
    if num_maskable == 0:
        return MaskedSequence(ids, np.empty(0, np.int64), np.empty(0, np.int64))
    budget = max(1, int(round(spec.prob * num_maskable)))
    if spec.max_predictions > 0:
        budget = min(budget, spec.max_predictions)
    starts, ends, linked = _words(maskable, word_starts, by_token=strategy == "token")
    sizes = ends - starts
    if strategy == "token":
        picked = rng.choice(starts.size, size=min(budget, starts.size), replace=False)
        units = [(int(w), 1) for w in np.sort(picked)]
    elif strategy == "whole-word":
        units = _choose_whole_words(sizes, budget, rng)
    else:
        units = _choose_spans(sizes, linked, budget, spec.length_distribution(), rng, gap=strategy == "span")
    units.sort()
    spans = np.array([(starts[w], ends[w + n - 1]) for w, n in units], dtype=np.int64).reshape(-1, 2)
    span_words = np.array([n for _, n in units], dtype=np.int64)
    lengths = spans[:, 1] - spans[:, 0]
    positions = (np.concatenate([np.arange(a, b) for a, b in spans]) if len(spans) else np.empty(0, np.int64)).astype(
        np.int64
    )
    labels = ids[positions].copy()
    # 80/10/10: per token, except SpanBERT which decides once per span.
    draws = rng.random(len(spans)) if strategy == "span" else rng.random(positions.size)
    action = np.repeat(draws, lengths) if strategy == "span" else draws
    to_mask = action < spec.mask_fraction
    to_random = (action >= spec.mask_fraction) & (action < spec.mask_fraction + spec.random_fraction)
    ids[positions[to_mask]] = spec.mask_id
    ids[positions[to_random]] = candidates[rng.integers(0, candidates.size, int(to_random.sum()))]
    return MaskedSequence(ids, positions, labels, spans, span_words)


def mask_sequence(
    ids: np.ndarray, spec: MaskingSpec, rng: np.random.Generator, candidates: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token-level masking without word information: (corrupted ids, sorted positions, original ids)."""
    masked = mask_tokens(ids, None, spec, rng, candidates)
    return masked.ids, masked.positions, masked.labels

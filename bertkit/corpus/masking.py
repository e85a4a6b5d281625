"""BERT's masked-language-model corruption, applied at build time (static) or when served (dynamic).

Exactly round(prob * maskable) positions are selected per sequence (at least one), never a special token;
of those, `mask_fraction` become [MASK], `random_fraction` a random *non-special* token, the rest stay.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MaskingSpec:
    prob: float
    mask_fraction: float
    random_fraction: float
    mask_id: int
    special_ids: frozenset[int]
    vocab_size: int

    def random_candidates(self) -> np.ndarray:
        ids = np.arange(self.vocab_size, dtype=np.int64)
        return ids[~np.isin(ids, np.fromiter(self.special_ids, dtype=np.int64))]


def mask_sequence(
    ids: np.ndarray, spec: MaskingSpec, rng: np.random.Generator, candidates: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (corrupted ids, masked positions sorted, original ids at those positions)."""
    ids = ids.astype(np.int64, copy=True)
    maskable = np.flatnonzero(~np.isin(ids, np.fromiter(spec.special_ids, dtype=np.int64)))
    if maskable.size == 0:
        return ids, np.empty(0, np.int64), np.empty(0, np.int64)
    count = max(1, int(round(spec.prob * maskable.size)))
    positions = np.sort(rng.choice(maskable, size=count, replace=False))
    labels = ids[positions].copy()
    action = rng.random(count)
    to_mask = action < spec.mask_fraction
    to_random = (action >= spec.mask_fraction) & (action < spec.mask_fraction + spec.random_fraction)
    ids[positions[to_mask]] = spec.mask_id
    ids[positions[to_random]] = candidates[rng.integers(0, candidates.size, int(to_random.sum()))]
    return ids, positions, labels

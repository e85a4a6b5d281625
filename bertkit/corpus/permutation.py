"""XLNet's permutation language modelling draw: which tokens to predict, and in which order.

Partial prediction (Yang et al. 2019, section 2.3): only the last 1/K of a factorization order is
predicted, the rest is context. The targets are chosen in spans as transformers'
`DataCollatorForPermutationLanguageModeling` chooses them: walk the sequence; each step draws a span
length L uniformly from 1..max_span, reserves a stretch of L * K tokens, and makes L consecutive tokens at
a uniform offset inside it targets (special tokens never are). About 1/K of the tokens become targets.

The factorization order puts every context token first (they see each other and no target) and the
targets after them in a uniformly random order. `perm_mask[i, j]` (True: i may not see j) follows: j is a
target and i does not come after j in the order; the model lets the content stream see its own position
and keeps it from the query stream, which is what predicts.

Two differences from the transformers collator, both on the paper's side: the targets keep their real
token ids in the input (the collator replaces them with <mask>, which leaves a predicted target's content
stream nothing to pass on to the targets after it; two-stream attention exists so that it can), and the
special tokens (<sep>, <cls>) are context, seen by all and seeing no target (the collator keeps them inside
the order, where they may see a target that comes late and pass it on to one that comes early, a leak its
<mask> inputs hide). The order among targets is a plain random permutation: the collator's split into two
halves serves Transformer-XL's memory reuse, which bertkit does not do (mem_len 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PermutationSpec:
    k: int  # predict ~1/k of the tokens (objective.plm_k)
    max_span: int  # target spans are 1..max_span tokens long (objective.plm_max_span)
    special_ids: frozenset[int]


@dataclass
class PermutedSequence:
    targets: np.ndarray  # int64 positions of the targets, ascending
    order: np.ndarray  # int64, per target its place among the targets in the factorization order (0: first)


def draw_permutation(ids: np.ndarray, spec: PermutationSpec, rng: np.random.Generator) -> PermutedSequence:
    length = len(ids)
    chosen = np.zeros(length, dtype=bool)
    at = 0
    while at < length:
        span = int(rng.integers(1, spec.max_span + 1))
        context = span * spec.k
        start = at + int(rng.integers(0, context - span + 1))
        chosen[start : start + span] = True
        at += context
    if spec.special_ids:
        chosen &= ~np.isin(ids, np.fromiter(spec.special_ids, np.int64))
    targets = np.flatnonzero(chosen).astype(np.int64)
    return PermutedSequence(targets, rng.permutation(len(targets)).astype(np.int64))


def permutation_mask(length: int, item: PermutedSequence) -> np.ndarray:
    """(length, length) bool: True where query i may not see key j (j a target not before i in the order)."""
    rank = np.full(length, -1, dtype=np.int64)  # context tokens come first
    rank[item.targets] = item.order
    is_target = rank >= 0
    return (rank[:, None] <= rank[None, :]) & is_target[None, :]

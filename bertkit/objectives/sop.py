"""Sentence-order prediction (ALBERT): are two consecutive segments in order (label 0) or swapped (1)?

Unlike NSP, both classes come from the same document, so topic cues do not give the answer away: the
model has to learn discourse coherence.
"""

from __future__ import annotations

from bertkit.objectives.nsp import PairObjective


class SOPObjective(PairObjective):
    name = "sop"

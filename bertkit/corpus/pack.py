"""Packing tokenized sentences into training sequences (RoBERTa's FULL-SENTENCES format).

Every sequence is `[CLS] s1 s2 ... [SEP]`. Sentences are added whole until the next one would overflow;
a sentence longer than a whole sequence is cut into pieces (counted, never dropped). When a sequence
crosses a document boundary a separator marks it, as in RoBERTa.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass
class PackStats:
    sequences: int = 0
    tokens: int = 0  # content tokens placed in sequences (specials excluded)
    special_tokens: int = 0
    split_sentences: int = 0  # sentences longer than a sequence, cut into pieces
    capacity: int = 0  # sequences * max_seq_len: what padding to max length would cost

    @property
    def padding_fraction(self) -> float:
        used = self.tokens + self.special_tokens
        return 1.0 - used / self.capacity if self.capacity else 0.0


def pack_full_sentences(
    documents: Iterable[list[list[int]]], max_seq_len: int, cls_id: int, sep_id: int, stats: PackStats
) -> Iterator[list[int]]:
    """Yield sequences of at most `max_seq_len` ids from documents given as lists of tokenized sentences."""
    budget = max_seq_len - 2  # [CLS] ... [SEP]
    if budget < 1:
        raise ValueError("max_seq_len must leave room for at least one token besides [CLS] and [SEP]")
    current: list[int] = []

    def flush() -> list[int]:
        nonlocal current
        sequence = [cls_id, *current, sep_id]
        stats.sequences += 1
        stats.tokens += sum(1 for t in current if t != sep_id)
        stats.special_tokens += len(sequence) - sum(1 for t in current if t != sep_id)
        stats.capacity += max_seq_len
        current = []
        return sequence

    for document in documents:
        if current:
            # Crossing into a new document: RoBERTa marks the boundary with a separator.
            if len(current) + 1 >= budget:
                yield flush()
            else:
                current.append(sep_id)
        for sentence in document:
            if not sentence:
                continue
            if len(sentence) > budget:
                stats.split_sentences += 1
            pieces = [sentence[i : i + budget] for i in range(0, len(sentence), budget)]
            for piece in pieces:
                if len(current) + len(piece) > budget:
                    yield flush()
                current.extend(piece)
    if current and any(t != sep_id for t in current):
        yield flush()

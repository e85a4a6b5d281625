"""What `bertkit tokenize inspect` reports: the vocabulary, and how the tokenizer cuts sample text.

Words are whitespace-separated strings of the sample, the same for every family, so fertility (tokens per
word) compares tokenizers of different kinds. Each token is attributed to the word holding its last
character, via the character offsets the `tokenizers` library reports.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from bertkit.tokenizers.base import ROLES, Tokenizer

_WORD = re.compile(r"\S+")
_BATCH = 2048


def vocabulary_summary(tok: Tokenizer) -> dict[str, Any]:
    return {
        "kind": tok.kind,
        "vocab_size": tok.vocab_size,
        "special_tokens": {
            role: {"token": getattr(tok.specials, role), "id": getattr(tok, f"{role}_id")} for role in ROLES
        },
        "path": str(tok.path) if tok.path else None,
    }


def sample_statistics(tok: Tokenizer, lines: Iterable[str], top: int = 10) -> dict[str, Any]:
    """Fertility, unknown-token rate and the most split words over `lines`."""
    words = tokens = unknown = texts = split_words = 0
    pieces_of: dict[str, int] = {}
    frequency: Counter[str] = Counter()
    batch: list[str] = []

    def flush() -> None:
        nonlocal words, tokens, unknown, split_words
        for text, enc in zip(batch, tok.backend.encode_batch(batch, add_special_tokens=False), strict=True):
            spans = [m.span() for m in _WORD.finditer(text)]
            starts = [start for start, _ in spans]
            per_word = [0] * len(spans)
            for token_id, (start, end) in zip(enc.ids, enc.offsets, strict=True):
                tokens += 1
                unknown += token_id == tok.unk_id
                at = bisect.bisect_right(starts, max(end - 1, start)) - 1
                if at >= 0 and spans[at][0] <= max(end - 1, start) < spans[at][1]:
                    per_word[at] += 1
            words += len(spans)
            for (start, end), count in zip(spans, per_word, strict=True):
                word = text[start:end]
                split_words += count > 1
                frequency[word] += 1
                pieces_of[word] = count

    for line in lines:
        texts += 1
        batch.append(line)
        if len(batch) >= _BATCH:
            flush()
            batch = []
    if batch:
        flush()
    most_split = sorted(pieces_of.items(), key=lambda item: (-item[1], -frequency[item[0]], item[0]))[:top]
    return {
        "sample_lines": texts,
        "sample_words": words,
        "sample_tokens": tokens,
        "fertility": round(tokens / words, 4) if words else None,
        "unknown_rate": round(unknown / tokens, 6) if tokens else None,
        "split_word_rate": round(split_words / words, 4) if words else None,
        "most_split_words": [
            {"word": word, "tokens": count, "pieces": _pieces(tok, word)} for word, count in most_split
        ],
    }


def _pieces(tok: Tokenizer, word: str) -> list[str]:
    return tok.backend.encode(word, add_special_tokens=False).tokens

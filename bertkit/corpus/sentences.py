"""Sentence splitting, pluggable by name. The default is a rule-based splitter for English and Korean.

It splits after ., ! or ? (and their full-width forms) when the next token starts a sentence, and keeps
abbreviations, initials and decimals together. Korean sentences end the same way ("...했다. 그리고").
"""

from __future__ import annotations

import re
from collections.abc import Callable

_ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "cf", "fig", "no",
    "vol", "inc", "ltd", "co", "corp", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept",
    "oct", "nov", "dec", "u.s", "u.k", "approx", "dept", "est", "al",
}  # fmt: skip
# A candidate boundary: terminal punctuation, optional closing quotes/brackets, then whitespace.
_BOUNDARY = re.compile(r"([.!?\u3002\uff01\uff1f]+[\"'\u201d\u2019)\]]*)(\s+)")


def split_rule_based(text: str) -> list[str]:
    sentences: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        end = match.end(1)
        before = text[start : match.start(1)]
        last_word = before.rsplit(None, 1)[-1].lower() if before.strip() else ""
        following = text[match.end() : match.end() + 1]
        if match.group(1).startswith(".") and (
            last_word.rstrip(".") in _ABBREVIATIONS or (len(last_word) == 1 and last_word.isalpha())
        ):
            continue  # "Dr. Smith", "J. R. R. Tolkien"
        if following and following.islower():
            continue  # "e.g. this" style continuations
        sentence = text[start:end].strip()
        if sentence:
            sentences.append(sentence)
        start = match.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


def split_lines(text: str) -> list[str]:
    """No splitting: the input already has one sentence per line."""
    return [text.strip()] if text.strip() else []


SPLITTERS: dict[str, Callable[[str], list[str]]] = {"rules": split_rule_based, "lines": split_lines}


def get_splitter(name: str) -> Callable[[str], list[str]]:
    from bertkit.errors import BertkitError

    try:
        return SPLITTERS[name]
    except KeyError:
        raise BertkitError(f"unknown sentence splitter '{name}'; choose one of {', '.join(SPLITTERS)}") from None

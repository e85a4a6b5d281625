"""Sentence splitting, pluggable by name (`--splitter`).

rules   the default: a rule-based splitter for English and Korean. It splits after ., ! or ? (and the
        full-width 。！？, which need no following space) when the next word starts a sentence, and keeps
        abbreviations ("Dr.", "e.g."), initials ("J. R. R."), acronyms ("U.S."), decimals ("3.14") and
        ellipses followed by lowercase text together. Korean sentences end the same way ("...했다. 그리고").
pysbd   English with the pySBD library (Golden-Rules-tested, much slower); `pip install pysbd`.
lines   no splitting: the input already holds one sentence per line.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from bertkit.errors import BertkitError

_ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "cf", "fig", "figs", "no",
    "nos", "vol", "vols", "inc", "ltd", "co", "corp", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep",
    "sept", "oct", "nov", "dec", "approx", "dept", "est", "al", "gen", "col", "lt", "sgt", "capt", "gov", "sen",
    "rep", "rev", "mt", "ft", "pp", "ed", "eds", "ch", "sec", "eq", "ref", "ca", "viz", "resp", "op", "cit",
}  # fmt: skip
# A candidate boundary: terminal punctuation, optional closing quotes/brackets, then whitespace (or, after
# full-width punctuation, nothing at all).
_BOUNDARY = re.compile(
    r"([.!?]+[\"'\u201d\u2019)\]]*)(\s+)|([\u3002\uff01\uff1f]+[\"'\u201d\u2019)\]\u300d\u300f]*)(\s*)"
)
_ACRONYM = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]?$")  # U.S, D.C, e.g, i.e


def split_rule_based(text: str) -> list[str]:
    sentences: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        punct_start, punct_end = (match.start(1), match.end(1)) if match.group(1) else (match.start(3), match.end(3))
        following = text[match.end() : match.end() + 1]
        if not following:
            continue  # end of text: the tail below takes it
        punct = text[punct_start:punct_end]
        if punct.startswith(".") and not punct.startswith(".."):
            before = text[start:punct_start]
            last_word = before.rsplit(None, 1)[-1] if before.strip() else ""
            bare = last_word.lstrip("(\"'\u201c\u2018").lower()
            if bare in _ABBREVIATIONS or (len(bare) == 1 and bare.isalpha()) or _ACRONYM.match(bare):
                continue  # "Dr. Smith", "J. R. R. Tolkien", "the U.S. government"
        if following.islower() or following in ",;:":
            continue  # "etc. and so on", "... and then", "Yahoo! is"
        sentence = text[start:punct_end].strip()
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


def _pysbd_splitter() -> Callable[[str], list[str]]:
    try:
        import pysbd
    except ImportError:
        raise BertkitError("--splitter pysbd needs the pysbd package: pip install pysbd") from None
    segmenter = pysbd.Segmenter(language="en", clean=False)

    def split(text: str) -> list[str]:
        return [s.strip() for s in segmenter.segment(text) if s.strip()]

    return split


SPLITTERS: dict[str, Callable[[], Callable[[str], list[str]]]] = {
    "rules": lambda: split_rule_based,
    "pysbd": _pysbd_splitter,
    "lines": lambda: split_lines,
}


def get_splitter(name: str) -> Callable[[str], list[str]]:
    try:
        factory = SPLITTERS[name]
    except KeyError:
        raise BertkitError(f"unknown sentence splitter '{name}'; choose one of {', '.join(SPLITTERS)}") from None
    return factory()

"""`bertkit tokenize extend` as a library call: a model's (or a tokenizer directory's) tokenizer and domain text
in, a tokenizer with the domain's worst-split words added out, with the table of what was added and the
fertility (tokens per word) of the domain text before and after."""

from __future__ import annotations

import itertools
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError
from bertkit.fsutil import atomic_output_dir, check_output_dir
from bertkit.inputs.sources import INVALID_UTF8, ReadStats, expand_inputs, input_size, iter_lines
from bertkit.modelio.layout import tokenizer_source
from bertkit.progress import Tracker
from bertkit.tokenizers.base import load_tokenizer
from bertkit.tokenizers.extend import (
    Candidate,
    choose_words,
    count_words,
    extend_tokenizer,
    given_words,
    word_table,
)
from bertkit.tokenizers.stats import sample_statistics


def extend_vocabulary(
    tokenizer: str | Path,
    inputs: list[str],
    output: Path,
    add: int = 0,
    words_file: Path | None = None,
    min_frequency: int = 2,
    text_field: str = "text",
    max_lines: int = 1_000_000,
    overwrite: bool = False,
    quiet: bool = False,
    invalid_utf8: str = "error",
) -> dict[str, Any]:
    if invalid_utf8 not in INVALID_UTF8:
        raise BertkitError(f"--invalid-utf8 must be error or replace, not '{invalid_utf8}'")
    if words_file is None and add < 1:
        raise BertkitError(f"--add must be at least 1, not {add} (or list the words with --words FILE)")
    if words_file is not None and add:
        raise BertkitError("--add chooses the words and --words lists them; give one of the two")
    if min_frequency < 1:
        raise BertkitError(f"--min-frequency must be at least 1, not {min_frequency}")
    check_output_dir(output, overwrite)
    started = time.perf_counter()
    base = load_tokenizer(tokenizer_source(tokenizer))
    paths = expand_inputs(inputs)
    listed: list[Candidate] | None = None
    if words_file is not None:  # checked before the input is read
        if not words_file.is_file():
            raise BertkitError(f"--words file not found: {words_file}")
        try:
            written = words_file.read_text("utf-8-sig").splitlines()
        except UnicodeDecodeError:
            raise BertkitError(f"--words {words_file} is not UTF-8 text; re-encode it as UTF-8") from None
        listed = given_words(base, written)  # checked now; their frequencies once the input is read
    stats = ReadStats()
    lines: list[str] = []
    with Tracker("extend: reading", total=input_size(paths) or None, quiet=quiet, unit="bytes") as tracker:
        read = 0
        for line in itertools.islice(iter_lines(paths, stats, text_field), max_lines):
            lines.append(line)
            if stats.bytes - read >= 1 << 20:  # a megabyte at a time
                tracker.advance(stats.bytes - read)
                read = stats.bytes
        tracker.advance(stats.bytes - read)
        if stats.invalid_utf8_lines and invalid_utf8 == "error":  # inside the bar: it is erased, the line alone
            # Replaced bytes would cut words into fragments ("caf" of a Latin-1 "café") that could be chosen.
            raise BertkitError(
                f"{stats.invalid_utf8_lines} of the {stats.lines} input lines read are not valid UTF-8; re-encode "
                "the input as UTF-8, or pass --invalid-utf8 replace to replace bad bytes with U+FFFD"
            )
    if not lines:
        raise BertkitError(f"{', '.join(map(str, inputs))} holds no text to choose words from")
    counts = count_words(base, lines)
    if listed is not None:
        words = [replace(candidate, frequency=counts[candidate.word]) for candidate in listed]
    else:
        words = choose_words(base, counts, add, min_frequency)
        if not words:
            raise BertkitError(
                f"no word of the input is split by this tokenizer and occurs {min_frequency} times or more; "
                "nothing to add (lower --min-frequency, or give more text)"
            )
    extended = extend_tokenizer(base, words)
    with atomic_output_dir(output, overwrite) as tmp:
        extended.save(tmp)
    before, after = sample_statistics(base, lines, top=0), sample_statistics(extended, lines, top=0)
    return {
        "output": str(output),
        "base": str(base.path),
        "kind": base.kind,
        "asked": add if words_file is None else len(words),
        "added": len(words),
        "vocab_size": {"before": base.vocab_size, "after": extended.vocab_size},
        "lines": len(lines),
        "invalid_utf8_lines": stats.invalid_utf8_lines,
        "words": word_table(words, base),
        "fertility": {"before": before["fertility"], "after": after["fertility"]},
        "tokens": {"before": before["sample_tokens"], "after": after["sample_tokens"]},
        "seconds": round(time.perf_counter() - started, 2),
    }

"""Train a tokenizer of any family, streaming lines from any supported input, into a never-half-written dir.

WordPiece and byte-level BPE train in the `tokenizers` library (parallel Rust, fed from a Python iterator: it
keeps word counts, not the text). SentencePiece trains in the `sentencepiece` library, which keeps its
sentences in memory, so it gets a reservoir sample of at most `max_sentences` lines of the stream.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError
from bertkit.fsutil import atomic_output_dir, check_output_dir
from bertkit.inputs.sources import ReadStats, expand_inputs, iter_lines
from bertkit.tokenizers.base import Tokenizer
from bertkit.tokenizers.specials import FAMILY_SPECIALS, KINDS

BYTE_ALPHABET = 256


@dataclass
class TrainOptions:
    """Family options; None means the family's own default (see `resolve`)."""

    lowercase: bool | None = None  # wordpiece: True (bert-base-uncased); others: False (RoBERTa, XLNet)
    strip_accents: bool | None = None  # wordpiece only; default: follows lowercase, as BERT does
    chinese_chars: bool = True  # wordpiece: a space around every CJK ideograph, as BERT does
    min_frequency: int = 2  # wordpiece, bbpe
    limit_alphabet: int | None = None  # wordpiece: keep only the most frequent N characters
    character_coverage: float = 0.9995  # sentencepiece
    byte_fallback: bool = False  # sentencepiece: unknown characters become <0xNN> byte pieces
    max_sentences: int = 2_000_000  # sentencepiece: sample size it holds in memory
    threads: int = 0  # 0: all cores
    seed: int = 0  # sentencepiece's sampling

    def resolve(self, kind: str) -> TrainOptions:
        if self.strip_accents is not None and kind != "wordpiece":
            raise BertkitError(f"--strip-accents/--keep-accents is a wordpiece option; {kind} keeps text as is")
        lowercase = self.lowercase if self.lowercase is not None else kind == "wordpiece"
        strip = self.strip_accents if self.strip_accents is not None else lowercase
        if not 0.9 <= self.character_coverage <= 1.0:
            raise BertkitError(f"--character-coverage must be in [0.9, 1.0], not {self.character_coverage}")
        if self.max_sentences < 1:
            raise BertkitError("--max-sentences must be at least 1")
        if self.min_frequency < 0:
            raise BertkitError(f"--min-frequency must be 0 or more, not {self.min_frequency}")
        if self.limit_alphabet is not None and self.limit_alphabet < 1:
            raise BertkitError(f"--limit-alphabet must be at least 1, not {self.limit_alphabet}")
        if self.threads < 0:
            raise BertkitError(f"--threads must be 0 (all cores) or more, not {self.threads}")
        return replace(self, lowercase=lowercase, strip_accents=strip)


def minimum_vocab_size(kind: str, options: TrainOptions) -> tuple[int, str]:
    """What must fit before anything is learned, and what that is: the special tokens, the 256 bytes where
    the family has them, and (unless bytes cover everything) at least one character."""
    specials = len(FAMILY_SPECIALS[kind].as_list())
    if kind == "bbpe":
        return specials + BYTE_ALPHABET, f"the {specials} special tokens and the {BYTE_ALPHABET} bytes"
    if kind.startswith("sentencepiece") and options.byte_fallback:
        return specials + BYTE_ALPHABET + 1, f"the {specials} special tokens, the {BYTE_ALPHABET} bytes and a piece"
    return specials + 1, f"the {specials} special tokens and a character"


MAX_VOCAB_SIZE = 2**31 - 1


def _threads(requested: int) -> int:
    return requested if requested > 0 else (os.cpu_count() or 1)


def train_tokenizer(
    kind: str,
    inputs: list[str] | list[Path],
    output: Path,
    vocab_size: int,
    lowercase: bool | None = None,
    strip_accents: bool | None = None,
    min_frequency: int = 2,
    text_field: str = "text",
    overwrite: bool = False,
    on_progress: Callable[[int], None] | None = None,
    options: TrainOptions | None = None,
) -> dict[str, Any]:
    """Train and write a tokenizer directory; returns the summary the CLI prints."""
    if kind not in KINDS:
        raise BertkitError(f"unknown tokenizer kind '{kind}'; choose one of {', '.join(KINDS)}")
    base = options or TrainOptions(min_frequency=min_frequency)
    base = replace(
        base,
        lowercase=lowercase if lowercase is not None else base.lowercase,
        strip_accents=strip_accents if strip_accents is not None else base.strip_accents,
    )
    opts = base.resolve(kind)
    paths = expand_inputs(inputs)
    check_output_dir(output, overwrite)  # fail before reading gigabytes, not after
    minimum, what = minimum_vocab_size(kind, opts)
    if vocab_size < minimum:
        raise BertkitError(f"--vocab-size {vocab_size} is too small for {kind}: {what} need {minimum} entries")
    if vocab_size > MAX_VOCAB_SIZE:  # the trainers' own limit (a 32-bit count), refused before any text is read
        raise BertkitError(f"--vocab-size {vocab_size} is too large: at most {MAX_VOCAB_SIZE:,}")
    if opts.threads > 0:
        # Read by the Rust thread pool when it starts, i.e. at the first parallel call of this process.
        os.environ.setdefault("RAYON_NUM_THREADS", str(opts.threads))
    stats = ReadStats()
    read_error: list[BaseException] = []

    def lines() -> Iterator[str]:
        last = 0
        try:
            for line in iter_lines(paths, stats, text_field):
                if on_progress and stats.bytes - last > (1 << 20):
                    on_progress(stats.bytes - last)
                    last = stats.bytes
                yield line
        except BaseException as err:
            # The trainers call this iterator from native code, which may wrap or swallow what it raises.
            read_error.append(err)
            raise
        if on_progress:
            on_progress(stats.bytes - last)

    started = time.perf_counter()
    try:
        tokenizer = _train(kind, vocab_size, opts, lines())
    except BaseException:
        if read_error:
            raise read_error[0] from None
        if stats.documents == 0:
            raise _no_text(paths) from None
        raise
    if read_error:
        raise read_error[0]
    seconds = time.perf_counter() - started
    if stats.documents == 0:
        raise _no_text(paths)
    if tokenizer.vocab_size > vocab_size:
        # The trainers keep every character of the corpus (and WordPiece its "##" forms) whatever the budget.
        hint = " or keep fewer characters with --limit-alphabet" if kind == "wordpiece" else ""
        raise BertkitError(
            f"--vocab-size {vocab_size} is smaller than the special tokens plus the alphabet of this corpus, "
            f"which alone take {tokenizer.vocab_size} entries; use at least {tokenizer.vocab_size}{hint}"
        )
    with atomic_output_dir(output, overwrite) as tmp:
        tokenizer.save(tmp)
    result: dict[str, Any] = {
        "output": str(output),
        "kind": kind,
        "vocab_size": tokenizer.vocab_size,
        "special_tokens": tokenizer.specials.as_dict(),
        "files": sorted(p.name for p in output.iterdir()),
        "input_files": stats.files,
        "input_bytes": stats.bytes,
        "input_lines": stats.lines,
        "input_documents": stats.documents,
        "invalid_utf8_lines": stats.invalid_utf8_lines,
        "seconds": round(seconds, 2),
        "mb_per_second": round(stats.bytes / 1e6 / max(seconds, 1e-9), 2),
    }
    if kind.startswith("sentencepiece"):
        result["sampled_lines"] = min(opts.max_sentences, stats.lines)
    return result


def _no_text(paths: list[Path]) -> BertkitError:
    return BertkitError(f"no text found in {', '.join(map(str, paths))}: cannot train a tokenizer on nothing")


def _train(kind: str, vocab_size: int, opts: TrainOptions, lines: Iterator[str]) -> Tokenizer:
    if kind == "wordpiece":
        from bertkit.tokenizers.wordpiece import finish_wordpiece, new_wordpiece

        assert opts.lowercase is not None and opts.strip_accents is not None
        backend, trainer = new_wordpiece(
            vocab_size, opts.lowercase, opts.strip_accents, opts.chinese_chars, opts.min_frequency, opts.limit_alphabet
        )
        backend.train_from_iterator(lines, trainer=trainer)
        finish_wordpiece(backend)
        return Tokenizer(backend, kind, FAMILY_SPECIALS[kind])
    if kind == "bbpe":
        from bertkit.tokenizers.bbpe import finish_bbpe, new_bbpe

        backend, trainer = new_bbpe(vocab_size, opts.min_frequency, bool(opts.lowercase))
        backend.train_from_iterator(lines, trainer=trainer)
        finish_bbpe(backend)
        return Tokenizer(backend, kind, FAMILY_SPECIALS[kind])
    from bertkit.tokenizers.spm import backend_from_spm, finish_spm, train_spm

    model = train_spm(
        lines,
        "unigram" if kind == "sentencepiece-unigram" else "bpe",
        vocab_size,
        lowercase=bool(opts.lowercase),
        byte_fallback=opts.byte_fallback,
        character_coverage=opts.character_coverage,
        max_sentences=opts.max_sentences,
        threads=_threads(opts.threads),
        seed=opts.seed,
    )
    backend = backend_from_spm(model)
    finish_spm(backend)
    return Tokenizer(backend, kind, FAMILY_SPECIALS[kind], spm_model=model)

"""Train tokenizers with the `tokenizers` library, streaming lines from any supported input."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from bertkit.corpus.sources import ReadStats, expand_inputs, iter_lines
from bertkit.errors import BertkitError
from bertkit.fsutil import atomic_output_dir
from bertkit.tokenizers.base import BBPE_SPECIALS, WORDPIECE_SPECIALS, Tokenizer

Kind = Literal["wordpiece", "bbpe"]
KINDS: tuple[str, ...] = ("wordpiece", "bbpe")


def _wordpiece(vocab_size: int, lowercase: bool, strip_accents: bool, min_frequency: int):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

    backend = HFTokenizer(models.WordPiece(unk_token=WORDPIECE_SPECIALS.unk))
    steps = [
        normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=lowercase)
    ]
    if strip_accents:
        # BERT strips accents by NFD + removing combining marks. NFD also splits Hangul syllables into
        # jamo, so recompose with NFC afterwards: "café" -> "cafe" while "한국어" stays "한국어".
        steps += [normalizers.NFD(), normalizers.StripAccents(), normalizers.NFC()]
    backend.normalizer = normalizers.Sequence(steps)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=WORDPIECE_SPECIALS.as_list(),
        continuing_subword_prefix="##",
        show_progress=False,
    )
    return backend, trainer, WORDPIECE_SPECIALS


def _bbpe(vocab_size: int, min_frequency: int):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    backend = HFTokenizer(models.BPE())
    # RoBERTa: a space is part of the following word ("Ġword"); no prefix space is added to a text start.
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    specials = [BBPE_SPECIALS.cls, BBPE_SPECIALS.pad, BBPE_SPECIALS.sep, BBPE_SPECIALS.unk, BBPE_SPECIALS.mask]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    return backend, trainer, BBPE_SPECIALS


def _add_post_processor(backend, kind: str) -> None:
    from tokenizers import processors

    specials = WORDPIECE_SPECIALS if kind == "wordpiece" else BBPE_SPECIALS
    cls, sep = specials.cls, specials.sep
    pair = f"{cls} $A {sep} $B:1 {sep}:1" if kind == "wordpiece" else f"{cls} $A {sep} {sep} $B:1 {sep}:1"
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=pair,
        special_tokens=[(cls, backend.token_to_id(cls)), (sep, backend.token_to_id(sep))],
    )


def train_tokenizer(
    kind: str,
    inputs: list[str] | list[Path],
    output: Path,
    vocab_size: int,
    lowercase: bool = True,
    strip_accents: bool = True,
    min_frequency: int = 2,
    text_field: str = "text",
    overwrite: bool = False,
    on_progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    if kind not in KINDS:
        raise BertkitError(f"unknown tokenizer kind '{kind}'; choose one of {', '.join(KINDS)}")
    paths = expand_inputs(inputs)
    minimum = {"wordpiece": 5 + 100, "bbpe": 5 + 256}[kind]
    if vocab_size < minimum:
        raise BertkitError(
            f"--vocab-size {vocab_size} is too small for {kind}: it needs room for the special "
            f"tokens and the base alphabet; use at least {minimum}"
        )
    if kind == "wordpiece":
        backend, trainer, specials = _wordpiece(vocab_size, lowercase, strip_accents, min_frequency)
    else:
        backend, trainer, specials = _bbpe(vocab_size, min_frequency)
    stats = ReadStats()

    def lines() -> Iterator[str]:
        last = 0
        for line in iter_lines(paths, stats, text_field):
            if on_progress and stats.bytes - last > (1 << 20):
                on_progress(stats.bytes - last)
                last = stats.bytes
            yield line
        if on_progress:
            on_progress(stats.bytes - last)

    started = time.perf_counter()
    backend.train_from_iterator(lines(), trainer=trainer)
    if stats.lines == 0 or backend.get_vocab_size() <= len(specials.as_list()):
        raise BertkitError(f"no text found in {', '.join(map(str, paths))}: cannot train a tokenizer on nothing")
    _add_post_processor(backend, kind)
    tokenizer = Tokenizer(backend, kind, specials)
    with atomic_output_dir(output, overwrite) as tmp:
        tokenizer.save(tmp)
    return {
        "output": str(output),
        "kind": kind,
        "vocab_size": tokenizer.vocab_size,
        "files": sorted(p.name for p in output.iterdir()),
        "input_bytes": stats.bytes,
        "input_lines": stats.lines,
        "invalid_utf8_lines": stats.invalid_utf8_lines,
        "seconds": round(time.perf_counter() - started, 2),
    }

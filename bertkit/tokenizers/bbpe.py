"""Byte-level BPE (RoBERTa, GPT-2 style) built from the `tokenizers` library's components.

Every byte has a base token, so any text encodes without unknown tokens. RoBERTa's space handling: a space
belongs to the word after it ("Ġworld"), the start of a text gets no added space, and `<mask>` absorbs the
space before it so that "a <mask>" masks the whole " word" token.
"""

from __future__ import annotations

from pathlib import Path

from bertkit.tokenizers.specials import BBPE_SPECIALS

# RoBERTa's id order: <s>=0 <pad>=1 </s>=2 <unk>=3, then the learned vocabulary; <mask> comes right after.
_ORDER = (BBPE_SPECIALS.cls, BBPE_SPECIALS.pad, BBPE_SPECIALS.sep, BBPE_SPECIALS.unk, BBPE_SPECIALS.mask)


def _special_tokens():
    from tokenizers import AddedToken

    return [
        AddedToken(tok, lstrip=tok == BBPE_SPECIALS.mask, rstrip=False, normalized=False, special=True)
        for tok in _ORDER
    ]


def _configure(backend, lowercase: bool = False) -> None:
    from tokenizers import decoders, normalizers, pre_tokenizers

    if lowercase:
        backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()


def new_bbpe(vocab_size: int, min_frequency: int, lowercase: bool = False):
    """An untrained byte-level BPE tokenizer and its trainer (cased, as RoBERTa, unless `lowercase`)."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models, pre_tokenizers, trainers

    backend = HFTokenizer(models.BPE())
    _configure(backend, lowercase)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=_special_tokens(),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    return backend, trainer


def finish_bbpe(backend) -> None:
    """After training: RoBERTa's `<s> A </s>` and `<s> A </s></s> B </s>` framing."""
    from tokenizers import processors

    cls, sep = BBPE_SPECIALS.cls, BBPE_SPECIALS.sep
    backend.post_processor = processors.RobertaProcessing(
        (sep, backend.token_to_id(sep)), (cls, backend.token_to_id(cls)), trim_offsets=True, add_prefix_space=False
    )


def bbpe_from_files(vocab_json: Path, merges_txt: Path):
    """A RoBERTa/GPT-2 directory with vocab.json + merges.txt and no tokenizer.json."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models

    backend = HFTokenizer(models.BPE.from_file(str(vocab_json), str(merges_txt)))
    _configure(backend)
    present = [tok for tok in _special_tokens() if backend.token_to_id(tok.content) is not None]
    backend.add_special_tokens(present)
    if all(backend.token_to_id(tok) is not None for tok in (BBPE_SPECIALS.cls, BBPE_SPECIALS.sep)):
        finish_bbpe(backend)
    return backend


def write_vocab_and_merges(backend, directory: Path) -> None:
    """vocab.json + merges.txt, the files RobertaTokenizer and GPT-2 tools read."""
    backend.model.save(str(directory))

"""WordPiece (BERT, ELECTRA, DistilBERT, TinyBERT) built from the `tokenizers` library's components."""

from __future__ import annotations

from pathlib import Path

from bertkit.tokenizers.specials import WORDPIECE_SPECIALS


def _post_processor(backend):
    from tokenizers import processors

    cls, sep = WORDPIECE_SPECIALS.cls, WORDPIECE_SPECIALS.sep
    return processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0",
        pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, backend.token_to_id(cls)), (sep, backend.token_to_id(sep))],
    )


def hangul_safe_normalizer(lowercase: bool, strip_accents: bool, chinese_chars: bool):
    """BERT's normalizer, except that accent stripping keeps Hangul syllables whole.

    BERT strips accents by NFD decomposition and dropping combining marks. NFD also splits every Hangul
    syllable into conjoining jamo (which are letters, so they survive the mark removal) and the vocabulary
    would then be learned over jamo. Recomposing with NFC afterwards gives "cafe" for "café" while "한국어"
    stays "한국어"; the marks are gone by then, so NFC cannot bring accents back.
    """
    from tokenizers import normalizers

    bert = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=chinese_chars, strip_accents=False, lowercase=lowercase
    )
    if not strip_accents:
        return bert
    return normalizers.Sequence([bert, normalizers.NFD(), normalizers.StripAccents(), normalizers.NFC()])


def new_wordpiece(
    vocab_size: int,
    lowercase: bool,
    strip_accents: bool,
    chinese_chars: bool,
    min_frequency: int,
    limit_alphabet: int | None,
):
    """An untrained WordPiece tokenizer and its trainer."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    backend = HFTokenizer(models.WordPiece(unk_token=WORDPIECE_SPECIALS.unk))
    backend.normalizer = hangul_safe_normalizer(lowercase, strip_accents, chinese_chars)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    limit = {"limit_alphabet": limit_alphabet} if limit_alphabet else {}  # the trainer takes no None
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=WORDPIECE_SPECIALS.as_list(),
        continuing_subword_prefix="##",
        show_progress=False,
        **limit,
    )
    return backend, trainer


def finish_wordpiece(backend) -> None:
    """After training: stable ids, then [CLS] A [SEP] / [CLS] A [SEP] B [SEP] with token type ids, as BERT."""
    _stable_ids(backend)
    backend.post_processor = _post_processor(backend)


def _stable_ids(backend) -> None:
    """The trainer numbers the "##" characters in hash-map order, so the same vocabulary would come out
    with different ids on every run. Renumber: special tokens, characters by code point, "##" characters,
    then the learned pieces sorted. WordPiece matching (greedy longest match) does not depend on ids, so
    this changes no segmentation.

    What this cannot fix: the trainer also breaks ties between equally frequent merges by those hash-ordered
    ids, so two trainings on the same corpus can learn a few different pieces (huggingface/tokenizers#1794,
    open in tokenizers 0.23). Keep the trained tokenizer directory; do not expect to re-train it
    bit for bit."""
    from tokenizers import models

    vocab = backend.get_vocab(with_added_tokens=False)
    specials = WORDPIECE_SPECIALS.as_list()

    def key(item: tuple[str, int]) -> tuple[int, str, int]:
        token = item[0]
        if token in specials:
            return (0, "", specials.index(token))
        if len(token) == 1:
            return (1, token, 0)
        if token.startswith("##") and len(token) == 3:
            return (2, token, 0)
        return (3, token, 0)

    ordered = sorted(vocab.items(), key=key)
    backend.model = models.WordPiece(
        {token: i for i, (token, _) in enumerate(ordered)},
        unk_token=WORDPIECE_SPECIALS.unk,
        continuing_subword_prefix="##",
    )


def wordpiece_from_vocab(vocab_file: Path, hf_config: dict):
    """Classic BERT directories ship only vocab.txt: rebuild BERT's exact pipeline around it.

    `strip_accents` absent or null means "follow lowercasing", as in the original BERT code.
    """
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, normalizers, pre_tokenizers

    lowercase = bool(hf_config.get("do_lower_case", True))
    backend = HFTokenizer(models.WordPiece.from_file(str(vocab_file), unk_token=WORDPIECE_SPECIALS.unk))
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=bool(hf_config.get("tokenize_chinese_chars", True)),
        strip_accents=hf_config.get("strip_accents"),
        lowercase=lowercase,
    )
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    present = [tok for tok in WORDPIECE_SPECIALS.as_list() if backend.token_to_id(tok) is not None]
    backend.add_special_tokens(present)  # never split, skipped when decoding, as in BertTokenizer
    if all(backend.token_to_id(tok) is not None for tok in (WORDPIECE_SPECIALS.cls, WORDPIECE_SPECIALS.sep)):
        backend.post_processor = _post_processor(backend)
    return backend


def write_vocab_txt(backend, directory: Path) -> None:
    """vocab.txt: one token per line, line number = id (added tokens included)."""
    vocab = backend.get_vocab(with_added_tokens=True)
    ordered = sorted(vocab.items(), key=lambda item: item[1])
    (directory / "vocab.txt").write_text("".join(f"{tok}\n" for tok, _ in ordered), encoding="utf-8")

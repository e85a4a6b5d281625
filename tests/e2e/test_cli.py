"""Each subcommand run through the CLI on real files, asserting on what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_error, run_json, runner

from bertkit.cli.app import app


def test_help_does_not_import_torch() -> None:
    code = "import sys; from bertkit.cli.app import app; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
    out = subprocess.run([sys.executable, "-m", "bertkit", "--help"], capture_output=True, text=True, check=True)
    commands = ("tokenize", "build-corpus", "pretrain", "distill", "augment", "finetune", "embed", "recipes")
    for command in (*commands, "quickstart"):
        assert command in out.stdout


# `python -m bertkit ARGS` in a fresh interpreter that then says whether torch was imported.
RUN_THEN_CHECK_TORCH = """import runpy, sys
sys.argv = ["bertkit", *sys.argv[1:]]
try:
    runpy.run_module("bertkit", run_name="__main__")
except SystemExit as stop:
    assert not stop.code, stop.code
assert "torch" not in sys.modules, "torch imported"
"""


@pytest.mark.parametrize("command", ["build-corpus", "quickstart --data-only"])
def test_data_commands_do_not_import_torch(tmp_path: Path, text_file: Path, tokenizer_dir: Path, command: str) -> None:
    """build-corpus never needs torch: not in its main process, nor in its tokenizing workers, which import the
    same modules (each would pay a second of start-up and some 200 MB for it); nor does the guide's first step."""
    args = {
        "build-corpus": ["build-corpus", "-i", str(text_file), "-t", str(tokenizer_dir), "-o", str(tmp_path / "out"),
                         "--workers", "2"],
        "quickstart --data-only": ["quickstart", "--data-only", "--output", str(tmp_path / "out")],
    }[command]  # fmt: skip
    result = subprocess.run([sys.executable, "-c", RUN_THEN_CHECK_TORCH, *args, "--quiet", "--json"],
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["workers"] == 2 if command == "build-corpus" else Path(summary["pretrain"]).is_file()


def test_tokenize_train_and_encode(tmp_path: Path, text_file: Path) -> None:
    out = run_json(
        "tokenize", "train", "--input", str(text_file), "--output", str(tmp_path / "tok"), "--vocab-size", "1500"
    )
    assert out["vocab_size"] == 1500
    assert {"tokenizer.json", "vocab.txt", "bertkit_tokenizer.json"} <= set(out["files"])
    vocab = (tmp_path / "tok" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert any(token.startswith("##") for token in vocab)
    result = runner.invoke(
        app,
        ["tokenize", "encode", "--tokenizer", str(tmp_path / "tok"), "--tokens"],
        input="The assert statement.\nLoops and functions\n",
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 2
    assert rows[0]["tokens"][0] == "the"  # lowercased
    assert len(rows[0]["ids"]) == len(rows[0]["tokens"])
    from bertkit.tokenizers import load_tokenizer

    assert load_tokenizer(tmp_path / "tok").decode(rows[1]["ids"]) == "loops and functions"


def test_build_corpus_and_inspect(tmp_path: Path, text_file: Path, tokenizer_dir: Path) -> None:
    out = run_json(
        "build-corpus",
        "--input",
        str(text_file),
        "--tokenizer",
        str(tokenizer_dir),
        "--output",
        str(tmp_path / "corpus"),
        "--max-seq-len",
        "32",
    )
    assert out["num_sequences"] > 100
    tokens = np.fromfile(tmp_path / "corpus" / "tokens.bin", dtype=np.uint16)
    offsets = np.load(tmp_path / "corpus" / "offsets.npy")
    assert tokens.size == out["num_tokens"] == offsets[-1]
    assert np.diff(offsets).max() <= 32
    assert (tokens[offsets[:-1]] == 2).all()  # every sequence starts with [CLS]
    info = run_json("corpus", "inspect", str(tmp_path / "corpus"), "-n", "1")
    assert info["sequences"] == out["num_sequences"]
    assert "[MASK]" in info["examples"][0]["masked_input"]


def test_pretrain_writes_run_dir(pretrained_run: Path) -> None:
    summary = json.loads((pretrained_run / "summary.json").read_text())
    assert summary["steps"] == 40
    assert summary["loss_last"] < summary["loss_first"]
    rows = [json.loads(line) for line in (pretrained_run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 10, 20, 30, 40]  # step 1, then every log_every
    assert "eval_mlm_loss" in rows[-1]
    model = pretrained_run / "model"
    assert {"model.safetensors", "bertkit_model.json", "tokenizer.json", "vocab.txt"} <= {
        p.name for p in model.iterdir()
    }
    assert (pretrained_run / "recipe.yaml").read_text().startswith("kind: pretrain")


def test_pretrain_cli_and_init_from(tmp_path: Path, corpus_dir: Path, pretrained_run: Path) -> None:
    out = run_json(
        "pretrain",
        "--recipe",
        "bert-tiny",
        "--corpus",
        str(corpus_dir),
        "--output",
        str(tmp_path / "run"),
        "--init-from",
        str(pretrained_run),
        "--set",
        "train.steps=5",
        "--set",
        "train.log_every=5",
    )
    first_loss = json.loads((pretrained_run / "summary.json").read_text())["loss_first"]
    assert out["steps"] == 5
    # Starting from the trained model, not from scratch: the first loss is far below a fresh model's.
    assert out["loss_first"] < first_loss - 0.5


def test_finetune_on_real_reviews(tmp_path: Path, pretrained_run: Path, sentiment_csv: Path) -> None:
    out = run_json(
        "finetune",
        "--model",
        str(pretrained_run),
        "--train",
        str(sentiment_csv),
        "--recipe",
        "finetune-tiny",
        "--output",
        str(tmp_path / "ft"),
        "--set",
        "train.steps=30",
        "--set",
        "train.log_every=10",
    )
    assert out["labels"] == ["negative", "positive"]
    assert out["eval_examples"] == 60 and out["train_examples"] == 540
    assert 0.0 <= out["eval"]["accuracy"] <= 1.0
    meta = json.loads((tmp_path / "ft" / "model" / "bertkit_model.json").read_text())
    assert meta["architecture"] == "sequence-classification" and meta["labels"] == ["negative", "positive"]


def test_feature_based_finetune_freezes_encoder(tmp_path: Path, pretrained_run: Path, sentiment_csv: Path) -> None:
    from safetensors.numpy import load_file

    run_json(
        "finetune",
        "--model",
        str(pretrained_run),
        "--train",
        str(sentiment_csv),
        "--recipe",
        "finetune-tiny",
        "--output",
        str(tmp_path / "ft"),
        "--feature-based",
        "--set",
        "train.steps=5",
    )
    before = load_file(str(pretrained_run / "model" / "model.safetensors"))
    after = load_file(str(tmp_path / "ft" / "model" / "model.safetensors"))
    key = "encoder.layers.0.attention.qkv.weight"
    np.testing.assert_array_equal(before[key], after[key])
    assert "classifier.weight" in after


def test_a_reader_that_stops_early_is_not_an_error() -> None:
    """`bertkit recipes show X | head` under `set -o pipefail`: the pipe is closed before bertkit writes, so the
    write fails with EPIPE; bertkit leaves quietly with status 0, not an `error: Broken pipe` line."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bertkit", "recipes", "show", "bert-base"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    proc.stdout.close()  # before the interpreter has even started: the first write meets a closed pipe
    assert proc.wait(timeout=120) == 0
    assert proc.stderr.read().decode() == ""


def limit_file_size() -> None:
    """In a child process: no file may grow past 16 KiB, standing in for a disk that fills up (the write that
    crosses the limit is cut short, the next fails with EFBIG rather than a signal)."""
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))


def run_on_a_full_disk(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertkit", *args], stderr=subprocess.PIPE, text=True,
                          preexec_fn=limit_file_size, timeout=300, **kwargs)  # fmt: skip


@pytest.mark.parametrize("unbuffered", ["", "1"])
@pytest.mark.parametrize("batch_lines", ["8192", "1"])
def test_output_cut_off_by_a_full_disk_is_an_error(
    tmp_path: Path, text_file: Path, tokenizer_dir: Path, unbuffered: str, batch_lines: str
) -> None:
    """`tokenize encode > FILE` on a full disk, in large writes or a line at a time: one error line and exit 2,
    with or without PYTHONUNBUFFERED, whose stdout would otherwise drop the rest of a short write and exit 0
    (and a line-buffered stdout that still holds a line would fail again at exit)."""
    out = tmp_path / "ids.jsonl"
    args = ["tokenize", "encode", "-t", str(tokenizer_dir), "-i", str(text_file), "--batch-lines", batch_lines]
    with out.open("wb") as stdout:
        result = run_on_a_full_disk(args, stdout=stdout, env={**os.environ, "PYTHONUNBUFFERED": unbuffered})
    assert out.stat().st_size == 16384  # the text encodes to far more: the output was cut off
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == ["error: File too large"], result.stderr


@pytest.mark.parametrize("command", ["export", "tokenize train"])
def test_a_full_disk_while_saving_is_one_line_and_leaves_nothing(
    tmp_path: Path, text_file: Path, pretrained_run: Path, command: str
) -> None:
    """safetensors and tokenizers fail on a full disk with their own exceptions: still one error line naming the
    file, exit 2, and no output (nor a temporary one) left behind."""
    out = tmp_path / "out"
    args = {"export": ["export", str(pretrained_run), "-o", str(out)],
            "tokenize train": ["tokenize", "train", "-i", str(text_file), "-o", str(out), "--vocab-size", "2000"]}
    result = run_on_a_full_disk([*args[command], "--quiet"], stdout=subprocess.DEVNULL)  # fmt: skip
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: File too large: ") and "Traceback" not in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == []


def test_recipes_list_and_show() -> None:
    listed = run_json("recipes", "list")
    names = {r["name"] for r in listed["recipes"]}
    assert {"bert-base", "roberta-base", "bert-tiny", "roberta-tiny", "finetune-classification"} <= names
    shown = run_json("recipes", "show", "bert-base", "--set", "optim.lr=3e-4")
    assert shown["recipe"]["optim"]["lr"] == 3e-4
    assert shown["parameters"] > 100_000_000


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["recipes", "show", "bert-bsae"], "did you mean 'bert-base'"),
        (["recipes", "show", "bert-base", "--set", "model.hiden_size=12"], "unknown key 'model.hiden_size'"),
        (["recipes", "show", "bert-base", "--set", "optim.lr=fast"], "bad value for 'optim.lr'"),
        (["recipes", "show", "bert-base", "--set", "model.num_heads=7"], "not divisible"),
        (["tokenize", "train", "--input", "/no/such/file.txt", "--output", "/tmp/x"], "input file not found"),
        (["pretrain", "--recipe", "bert-tiny", "--corpus", "/no/such/dir", "--output", "/tmp/x"], "not found"),
    ],
)
def test_bad_input_is_one_line(args: list[str], needle: str) -> None:
    assert needle in run_error(*args)


def test_empty_input_leaves_no_output(tmp_path: Path, tokenizer_dir: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    assert "empty" in run_error(
        "build-corpus", "--input", str(empty), "--tokenizer", str(tokenizer_dir), "--output", str(tmp_path / "c")
    )
    assert "no text" in run_error("tokenize", "train", "--input", str(empty), "--output", str(tmp_path / "t"))
    for lines in ("0", "-5"):
        line = run_error("tokenize", "encode", "-t", str(tokenizer_dir), "-i", str(empty), "--batch-lines", lines)
        assert line == f"error: --batch-lines must be at least 1, not {lines}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.txt"]


def test_not_a_corpus_and_no_overwrite(tmp_path: Path, text_file: Path, tokenizer_dir: Path) -> None:
    assert "not a bertkit corpus" in run_error(
        "pretrain", "--recipe", "bert-tiny", "--corpus", str(tmp_path), "--output", str(tmp_path / "run")
    )
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    assert "--overwrite" in run_error(
        "build-corpus", "--input", str(text_file), "--tokenizer", str(tokenizer_dir), "--output", str(tmp_path / "out")
    )
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"


def test_a_share_of_a_corpus_of_copies_is_not_held_out(
    tmp_path: Path, text_file: Path, tokenizer_dir: Path, pretrained_run: Path
) -> None:
    """With --dupe-factor 2 every text is in the corpus twice: sequences held out of it would be trained on in their
    other copy. Pretraining and distillation refuse before writing anything, and say what to do instead."""
    corpus = tmp_path / "copies"
    source = ["--input", str(text_file), "--tokenizer", str(tokenizer_dir), "--output", str(corpus)]
    run_json("build-corpus", *source, "--format", "segment-pair", "--masking", "static", "--dupe-factor", "2",
             "--max-seq-len", "64")  # fmt: skip
    message = run_error("pretrain", "--recipe", "bert-tiny", "--corpus", str(corpus), "--output", str(tmp_path / "r"))
    assert "holds each text 2 times" in message and "data.eval=DIR" in message
    message = run_error("distill", "--teacher", str(pretrained_run), "--student", "distilbert-tiny", "--corpus",
                        str(corpus), "--output", str(tmp_path / "d"))  # fmt: skip
    assert "holds each text 2 times" in message and "data.eval_fraction=0" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copies"]
    # Holding nothing out, as the message says, trains.
    run = run_json("pretrain", "--recipe", "bert-tiny", "--corpus", str(corpus), "--output", str(tmp_path / "r"),
                   "--set", "train.steps=2", "--set", "data.eval_fraction=0")  # fmt: skip
    assert run["steps"] == 2

"""The variants bench (tests/bench/variants.py) refuses what it cannot run before any work: one `error:` line and exit
2 from argparse, and nothing written to its work folder. Its runs themselves are `make bench`'s."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "variants.py"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--variants", "bert,gpt2"], "unknown variants ['gpt2']"),
        (["--text", "no-such-text.txt"], "--text no-such-text.txt: no such file"),
        (["--budget", "lots"], "budget"),
        (["--budget", "30min", "--parallel", "2"], "--parallel needs a FLOP budget"),
        (["--variants", "bert", "--generator", "0.5"], "keep electra in --variants"),
        (["--variants", "bert", "--set", "electra:optim.lr=5e-4"], "VARIANT one of ['bert']"),
        (["--variants", "electra", "--set", "electra:optim.lr"], "write VARIANT:KEY=VALUE"),
        (["--variants", "electra", "--set", "electra:optim.lrr=5e-4"], "optim.lrr"),
        (["--pretrain-seeds", "0,one"], "--pretrain-seeds '0,one'"),
        (["--pretrain-seeds", "0,-1"], "none negative"),
        (["--pretrain-seeds", ","], "at least one seed"),
        (["--qa", "2000"], "--qa '2000': write the training and dev questions"),
        (["--qa", "2000,dev"], "two whole numbers"),
        (["--qa", "0,100"], "two whole numbers"),
        (["--variants", "xlnet", "--qa", "200,100"], "none of ['xlnet'] serves extractive QA"),
        (["--lrs", "5e-5,fast"], "--lrs '5e-5,fast': write positive learning rates"),
        (["--lrs", "5e-5,0"], "--lrs '5e-5,0': write positive learning rates"),
        (["--lrs", "nan"], "--lrs 'nan': write positive learning rates"),
    ],
)
def test_bad_arguments_are_one_error_and_exit_2(tmp_path: Path, arguments: list[str], message: str) -> None:
    work = tmp_path / "work"
    done = subprocess.run([sys.executable, str(SCRIPT), "--work", str(work), *arguments], capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not work.exists()


def test_help_names_every_variant_whole_and_the_defaults() -> None:
    """`--help` is how a user learns the bench's names: each variant whole on one line, however narrow the terminal
    (argparse would break `albert-nsp` at its hyphen), the defaults of the work folder and budget, and the command
    that runs it on one's own text."""
    done = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "60"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  --variants"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("  -"))
    variants_help = " ".join(line.strip() for line in lines[start:end])
    names = variants_help.split("(default: ", 1)[1].rstrip(")").split(", ")
    assert names == ["bert", "roberta", "albert", "albert-nsp", "electra", "spanbert", "xlnet", "crammed-bert"], names
    assert "runs/variants)" in done.stdout and "4e14flop)" in done.stdout
    described = " ".join(done.stdout.split())
    assert "on your own text: python tests/bench/variants.py --text my_corpus.txt --budget 4e14flop" in described

"""`--resume auto` (continue from the newest checkpoint if there is one, else start from scratch) and
`--resume last` / a bare `--resume` (a checkpoint must exist), on real run directories.

The continuation's exactness is tested in test_resume.py; here the decision is: resume vs fresh vs refuse,
and that no existing output is damaged by it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import run_error, run_json
from safetensors.torch import load_file

from bertkit.cli.app import default_resume_value
from bertkit.errors import BertkitError
from bertkit.pipelines.rundir import resume_mode

SETS = {
    "train.steps": 4,
    "train.batch_size": 8,
    "train.log_every": 1,
    "train.checkpoint_every": 2,
    "train.eval_batches": 1,
    "engine.tensorboard": "false",
}


def pretrain_args(corpus: Path, output: Path, **extra: object) -> list[str]:
    args = ["pretrain", "-r", "bert-tiny", "-c", str(corpus), "-o", str(output)]
    for key, value in {**SETS, **extra}.items():
        args += ["--set", f"{key}={value}"]
    return args


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def loss_curve(run_dir: Path) -> list[tuple[int, float]]:
    return [(row["step"], row["loss"]) for row in rows(run_dir) if "loss" in row]


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def auto_run(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """`--resume auto` into a directory that does not exist yet: a plain fresh 4-step run."""
    output = tmp_path_factory.mktemp("resume-auto") / "run"
    summary = run_json(*pretrain_args(corpus_dir, output), "--resume", "auto")
    return output, summary


def test_auto_on_a_new_directory_starts_fresh(auto_run: tuple[Path, dict]) -> None:
    output, summary = auto_run
    assert summary["resumed_from"] is None and summary["steps"] == 4
    assert [step for step, _ in loss_curve(output)] == [1, 2, 3, 4]
    assert sorted(p.name for p in (output / "checkpoints").iterdir()) == ["step-2", "step-4"]


def test_auto_continues_from_the_newest_checkpoint(
    auto_run: tuple[Path, dict], corpus_dir: Path, tmp_path: Path
) -> None:
    output = tmp_path / "run"
    shutil.copytree(auto_run[0], output)
    first = loss_curve(output)
    summary = run_json(*pretrain_args(corpus_dir, output, **{"train.steps": 8}), "--resume", "auto")
    assert summary["resumed_from"] == 4 and summary["steps"] == 8
    curve = loss_curve(output)
    assert [step for step, _ in curve] == list(range(1, 9))  # no step logged twice
    assert curve[:4] == first  # the first attempt's rows are kept as they were


def test_resuming_a_finished_run_writes_its_final_evaluation_once(
    auto_run: tuple[Path, dict], corpus_dir: Path, tmp_path: Path
) -> None:
    output = tmp_path / "run"
    shutil.copytree(auto_run[0], output)
    before = rows(output)
    summary = run_json(*pretrain_args(corpus_dir, output), "--resume", "auto")
    assert summary["resumed_from"] == 4 and summary["steps"] == 4
    after = rows(output)
    assert [row["step"] for row in after if "loss" not in row] == [4]  # one final evaluation, not two
    # The same weights evaluate to the same numbers (the training clock may differ by the resumed start-up's moment).
    assert [{k: v for k, v in row.items() if k != "train_seconds"} for row in after] == [
        {k: v for k, v in row.items() if k != "train_seconds"} for row in before
    ]


def test_auto_restarts_a_run_that_died_before_its_first_checkpoint(
    auto_run: tuple[Path, dict], corpus_dir: Path, tmp_path: Path
) -> None:
    # What a job killed before its first checkpoint leaves: recipe.yaml and a partial metrics.jsonl.
    output = tmp_path / "run"
    shutil.copytree(auto_run[0], output)
    shutil.rmtree(output / "checkpoints")
    shutil.rmtree(output / "model")
    (output / "summary.json").unlink()
    with open(output / "metrics.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"step": 99, "loss": 1.0}) + "\n")  # a stale row that must not survive
    (output / "tensorboard").mkdir()
    (output / "tensorboard" / "events.out.tfevents.stale").write_bytes(b"old curve")
    summary = run_json(*pretrain_args(corpus_dir, output), "--resume", "auto")
    assert summary["resumed_from"] is None
    # A fresh start in place gives exactly the fresh run's curve: same seed, no stale rows.
    assert loss_curve(output) == loss_curve(auto_run[0])
    assert not (output / "tensorboard").exists()
    # (tensors, not file bytes: safetensors writes its metadata map in no fixed order)
    restarted = load_file(str(output / "model" / "model.safetensors"))
    fresh = load_file(str(auto_run[0] / "model" / "model.safetensors"))
    assert restarted.keys() == fresh.keys() and all(restarted[k].equal(fresh[k]) for k in fresh)


def test_auto_never_retrains_a_finished_run_without_checkpoints(
    auto_run: tuple[Path, dict], corpus_dir: Path, tmp_path: Path
) -> None:
    output = tmp_path / "run"
    shutil.copytree(auto_run[0], output)
    shutil.rmtree(output / "checkpoints")
    before = snapshot(output)
    line = run_error(*pretrain_args(corpus_dir, output), "--resume", "auto")
    assert "finished run" in line and "--overwrite" in line
    assert snapshot(output) == before


def test_auto_refuses_a_directory_that_is_not_a_run(corpus_dir: Path, tmp_path: Path) -> None:
    output = tmp_path / "mine"
    output.mkdir()
    (output / "keep.txt").write_text("mine")
    assert "--overwrite" in run_error(*pretrain_args(corpus_dir, output), "--resume", "auto")
    assert sorted(p.name for p in output.iterdir()) == ["keep.txt"]
    assert (output / "keep.txt").read_text() == "mine"
    # `last` wants a checkpoint, and says how to start from scratch instead.
    assert "--resume auto" in run_error(*pretrain_args(corpus_dir, output), "--resume", "last")
    assert sorted(p.name for p in output.iterdir()) == ["keep.txt"]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--resume", "bogus"], "--resume takes last or auto, not 'bogus'"),
        (["--resume", "auto", "--overwrite"], "contradict"),
        (["--resume", "last", "--overwrite"], "contradict"),
    ],
)
def test_bad_resume_values_are_one_line(extra: list[str], needle: str, corpus_dir: Path, tmp_path: Path) -> None:
    assert needle in run_error(*pretrain_args(corpus_dir, tmp_path / "run"), *extra)
    assert not (tmp_path / "run").exists()


def test_argv_shim_gives_a_bare_resume_the_value_last() -> None:
    assert default_resume_value(["pretrain", "--resume"]) == ["pretrain", "--resume", "last"]
    assert default_resume_value(["pretrain", "--resume", "--quiet", "--resume"]) == [
        *["pretrain", "--resume", "last", "--quiet", "--resume", "last"]
    ]
    for untouched in (["pretrain", "--resume", "auto", "-q"], ["pretrain", "--resume=last"], ["pretrain", "-q"]):
        assert default_resume_value(untouched) == untouched


def test_library_callers_keep_the_boolean() -> None:
    """pipelines.pretrain/finetune(resume=True) keep meaning what the old flag meant."""
    assert [resume_mode(value, False) for value in (None, False, True, "last", "auto")] == [
        None, None, "last", "last", "auto"
    ]  # fmt: skip
    with pytest.raises(BertkitError, match="last or auto"):
        resume_mode("newest", False)


@pytest.mark.slow  # 9 s (the default suite's time limit)
def test_bare_resume_followed_by_an_option_through_the_console_entry(
    auto_run: tuple[Path, dict], corpus_dir: Path, tmp_path: Path
) -> None:
    """The shim lives in main(), so this goes through `python -m bertkit` as a job script would."""
    output = tmp_path / "run"
    shutil.copytree(auto_run[0], output)
    entry = [sys.executable, "-m", "bertkit"]
    args = pretrain_args(corpus_dir, output, **{"train.steps": 6})
    result = subprocess.run([*entry, *args, "--resume", "--json", "--quiet"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1])["resumed_from"] == 4
    # A bare --resume before --overwrite is `last` too, and the pair is refused in one line.
    refused = subprocess.run([*entry, *args, "--resume", "--overwrite"], capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        line for line in refused.stderr.splitlines() if "error: --resume and --overwrite contradict" in line
    ]
    assert [step for step, _ in loss_curve(output)] == list(range(1, 7))


def test_finetune_auto_starts_fresh_then_continues(pretrained_run: Path, sentiment_csv: Path, tmp_path: Path) -> None:
    output = tmp_path / "ft"

    def finetune(steps: int) -> dict:
        return run_json(
            *["finetune", "-m", str(pretrained_run), "--train", str(sentiment_csv), "-r", "finetune-tiny"],
            *["-o", str(output), "--set", f"train.steps={steps}", "--set", "train.batch_size=8"],
            *["--set", "train.log_every=1", "--set", "train.checkpoint_every=2", "--resume", "auto"],
        )

    fresh = finetune(2)
    assert fresh["resumed_from"] is None and fresh["steps"] == 2
    continued = finetune(4)
    assert continued["resumed_from"] == 2 and continued["steps"] == 4
    assert [step for step, _ in loss_curve(output)] == [1, 2, 3, 4]
    assert json.loads((output / "summary.json").read_text())["resumed_from"] == 2
    # A fine-tuning run never continues into a pretraining run's directory.
    before = snapshot(pretrained_run)
    assert "is a pretrain run" in run_error(
        *["finetune", "-m", str(pretrained_run), "--train", str(sentiment_csv), "-r", "finetune-tiny"],
        *["-o", str(pretrained_run), "--resume", "auto"],
    )
    assert snapshot(pretrained_run) == before

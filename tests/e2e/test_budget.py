"""Budgets that shape a pretraining run, held-out evaluation that compares runs, and time-to-target, through the
CLI on the session corpus (Python's own documentation, tests/conftest.py).

The schedule's shape is checked against bertkit's step schedule (`lr_multiplier`) evaluated at the row's share of
the budget: a token budget makes the shares exact, so a token-budget run is also resumed bitwise."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import run_error, run_json
from test_resume import assert_same_weights_bitwise, curve, run_until

from bertkit.config.schema import ScheduleConfig
from bertkit.engine.optim import lr_multiplier

pytestmark = pytest.mark.usefixtures("one_thread")

STEPS = 10_000  # an upper bound the budgets below never reach
SMALL = {
    "train.steps": STEPS,
    "train.batch_size": 8,
    "train.log_every": 1,
    "train.eval_batches": 2,
    "engine.threads": 1,
    "engine.tensorboard": "false",
    "schedule.warmup_steps": 0,
    "schedule.warmup_fraction": 0.1,
}
LR = 1e-3  # bert-tiny's peak


def sets(**extra: object) -> list[str]:
    args: list[str] = []
    for key, value in {**SMALL, **{k.replace("__", "."): v for k, v in extra.items()}}.items():
        args += ["--set", f"{key}={value}"]
    return args


def pretrain(corpus: Path, output: Path, *extra: str, recipe: str = "bert-tiny") -> dict:
    return run_json("pretrain", "-r", recipe, "-c", str(corpus), "-o", str(output), *extra)


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_token_budget_lays_warmup_and_decay_over_the_budget(corpus_dir: Path, tmp_path: Path) -> None:
    budget = 12_000  # tokens: about 25 steps of 8 sequences of up to 64 tokens
    summary = pretrain(corpus_dir, tmp_path / "run", *sets(), "--budget", f"{budget}tok")
    assert summary["stopped"] == "budget" and 10 < summary["steps"] < STEPS
    assert budget <= summary["tokens"] < budget + 8 * 64  # ends at the first step past the budget
    schedule = ScheduleConfig(warmup_fraction=0.1)
    train_rows = [row for row in rows(tmp_path / "run") if "loss" in row]
    assert len(train_rows) == summary["steps"]
    for row in train_rows:
        # The rate a row logs is the next step's: the step schedule's at the spent share of the budget x steps.
        share = min(1.0, row["tokens"] / budget)
        assert row["lr"] == pytest.approx(LR * lr_multiplier(share * STEPS, STEPS, schedule), rel=1e-9)
    assert train_rows[-1]["lr"] == 0.0  # decay complete exactly at the deadline
    assert max(row["lr"] for row in train_rows) == pytest.approx(LR, rel=0.05)  # warm-up reached the peak
    peak = max(range(len(train_rows)), key=lambda i: train_rows[i]["lr"])
    assert 0.05 < train_rows[peak]["tokens"] / budget < 0.2  # ... at the warm-up share of the budget


def test_wsd_decay_share_lands_on_the_deadline(corpus_dir: Path, tmp_path: Path) -> None:
    budget = 10_000
    wsd = sets(schedule__decay="wsd", schedule__decay_fraction=0.3, schedule__warmup_fraction=0.0)
    summary = pretrain(corpus_dir, tmp_path / "run", *wsd, "--budget", f"{budget}tok")
    train_rows = [row for row in rows(tmp_path / "run") if "loss" in row]
    stable = [row["lr"] for row in train_rows if row["tokens"] / budget <= 0.7]
    decaying = [row["lr"] for row in train_rows if row["tokens"] / budget > 0.7]
    assert stable and all(lr == pytest.approx(LR) for lr in stable)
    assert decaying == sorted(decaying, reverse=True) and decaying[-1] == 0.0 and len(decaying) >= 3
    assert summary["stopped"] == "budget"


# A slow check (the default suite's time limit): tests/e2e/test_resume.py kills and resumes step runs bitwise there.
@pytest.mark.slow
def test_token_budget_killed_at_half_resumes_bitwise(corpus_dir: Path, tmp_path: Path) -> None:
    """SIGKILL after the checkpoint at step 12 of a ~24-step budget; resumed, the same curve and weights."""
    budget = ["--budget", "11000tok"]
    reference, interrupted = tmp_path / "reference", tmp_path / "interrupted"
    ckpt = sets(train__checkpoint_every=6, train__eval_every_share=0.25)
    base = [sys.executable, "-m", "bertkit", "pretrain", "-r", "bert-tiny", "-c", str(corpus_dir), *ckpt, *budget]
    first = subprocess.run([*base, "-o", str(reference), "--json", "--quiet"], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    expected = json.loads(first.stdout.strip().splitlines()[-1])
    assert expected["stopped"] == "budget" and expected["steps"] > 18
    killed = run_until(
        [*base, "-o", str(interrupted), "--quiet"], interrupted / "checkpoints" / "step-12", signal.SIGKILL
    )
    assert killed.returncode == -signal.SIGKILL
    state = json.loads((interrupted / "checkpoints" / "step-12" / "trainer_state.json").read_text())
    assert state["budget"]["kind"] == "tokens" and 0.3 < state["budget"]["progress"] < 0.7
    resumed = pretrain(corpus_dir, interrupted, *ckpt, *budget, "--resume", "last")
    assert resumed["resumed_from"] == 12 and resumed["steps"] == expected["steps"]
    assert curve(interrupted) == curve(reference)
    assert_same_weights_bitwise(interrupted, reference)
    # Evaluations at quarters of the budget (3 during the run, the final one at the deadline).
    assert len([row for row in rows(reference) if "eval_mlm_acc" in row]) == 4

    # Both runs' held-out accuracy against training time and tokens, on one figure.
    png = tmp_path / "compare.png"
    plotted = run_json("plot", str(reference), str(interrupted), "-o", str(png), "--target", "0.01")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plotted["metric"] == "eval_mlm_acc"
    assert set(plotted["runs"]) == {"reference", "interrupted"}
    assert all(run["evaluations"] == 4 for run in plotted["runs"].values())
    assert "needs --output" in run_error("plot", str(reference), str(interrupted))
    for target in ("nan", "inf"):
        line = run_error("plot", str(reference), str(interrupted), "-o", str(tmp_path / "t.png"), "--target", target)
        assert "--target" in line and "finite" in line and not (tmp_path / "t.png").exists()


def test_time_budget_is_training_time_and_a_longer_budget_stretches_the_rest(corpus_dir: Path, tmp_path: Path) -> None:
    """A 3 s budget stopped by SIGTERM part-way and resumed with 4 s: the rate continues where it was (no jump back
    to warm-up), falls to zero at the new deadline, and the checkpoint's training time covers the budget while
    evaluations (many here) are left out of it."""
    run = tmp_path / "run"
    # A warm-up of 2% of the budget (60 ms) is over by the SIGTERM at step 10 on any machine, so the rate measured
    # before the stop is already decaying; at 10% a fast machine could stop inside the warm-up, where the rate rises.
    evals = sets(train__checkpoint_every=5, train__eval_every=2, train__eval_batches=4, schedule__warmup_fraction=0.02)
    base = [sys.executable, "-m", "bertkit", "pretrain", "-r", "bert-tiny", "-c", str(corpus_dir), "-o", str(run)]
    stopped = run_until([*base, *evals, "--budget", "3s", "--quiet"], run / "checkpoints" / "step-10", signal.SIGTERM)
    assert stopped.returncode == 130, stopped.stderr
    checkpoint = max((run / "checkpoints").iterdir(), key=lambda p: int(p.name.split("-")[1]))  # the SIGTERM's
    before = json.loads((checkpoint / "trainer_state.json").read_text())
    assert 0 < before["budget"]["progress"] < 1 and before["budget"]["kind"] == "seconds"
    last_lr = [row["lr"] for row in rows(run) if "loss" in row][-1]

    summary = pretrain(corpus_dir, run, *evals, "--budget", "4s", "--resume", "last")
    assert summary["stopped"] == "budget" and summary["resumed_from"] == before["step"]
    after = [row for row in rows(run) if "loss" in row and row["step"] > before["step"]]
    assert after[0]["lr"] <= last_lr * 1.05 and after[-1]["lr"] == 0.0
    assert all(a["lr"] >= b["lr"] for a, b in zip(after, after[1:], strict=False))  # decaying, never warming again
    final = json.loads(next((run / "checkpoints").glob(f"step-{summary['steps']}")).joinpath("trainer_state.json")
                       .read_text())  # fmt: skip
    assert 4.0 <= final["train_seconds"] < 6.0
    # Evaluations (every 2 steps) took wall-clock time that the budget did not count.
    trained = final["train_seconds"] - before["train_seconds"]
    print(f"resumed part: {summary['seconds']:.2f} s wall clock, {trained:.2f} s training")
    assert summary["seconds"] > trained + 0.2
    eval_seconds = [row["train_seconds"] for row in rows(run) if "eval_mlm_acc" in row]
    assert len(eval_seconds) > 5 and eval_seconds == sorted(eval_seconds)


def test_crammed_recipe_runs_its_budget_annealed(corpus_dir: Path, tmp_path: Path) -> None:
    """crammed-bert-tiny with its own settings on a quarter of its 400k-token budget (the default suite's time
    limit): evaluations at every tenth of it, annealed at the deadline."""
    fast = ["--set", "engine.threads=1", "--set", "engine.tensorboard=false", "--set", "train.log_every=1"]
    fast += ["--budget", "100ktok"]
    summary = pretrain(corpus_dir, tmp_path / "run", *fast, recipe="crammed-bert-tiny")
    assert summary["stopped"] == "budget" and 100_000 <= summary["tokens"] < 100_000 + 32 * 64
    all_rows = rows(tmp_path / "run")
    assert [row["lr"] for row in all_rows if "loss" in row][-1] == 0.0  # the decay complete at the deadline
    final = tmp_path / "run" / "checkpoints" / f"step-{summary['steps']}" / "trainer_state.json"
    assert json.loads(final.read_text())["budget"]["progress"] == 1.0
    evaluations = [row for row in all_rows if "eval_mlm_acc" in row]
    assert [round(row["tokens"] / 100_000, 1) for row in evaluations] == [i / 10 for i in range(1, 11)]
    assert evaluations[-1]["eval_mlm_acc"] > evaluations[0]["eval_mlm_acc"]


def test_held_out_evaluation_is_fixed_whatever_the_seed_and_masking_rate(corpus_dir: Path, tmp_path: Path) -> None:
    one = pretrain(corpus_dir, tmp_path / "a", *sets(train__steps=1))
    other = pretrain(corpus_dir, tmp_path / "b", *sets(train__steps=1, train__seed=7, data__masking__prob=0.4))
    # Same held-out sequences, same 15% masks: the same number of scored tokens, whatever the run's seed or rate.
    assert one["eval"]["targets"] == other["eval"]["targets"] > 0
    assert one["eval_sequences"] == other["eval_sequences"] == 16 and one["eval_set"] == "held out: 0.02"
    tokens = one["eval"]["targets"] / 0.15
    assert 16 * 20 < tokens < 16 * 64  # about 15% of the held-out tokens


def test_target_accuracy_stops_and_says_when(corpus_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    # After a few dozen steps the model predicts frequent tokens: 3% held-out accuracy is soon reached.
    summary = pretrain(corpus_dir, run, *sets(train__eval_every=5, train__steps=200), "--target-acc", "0.03")
    target = summary["target"]
    assert summary["stopped"] == "target" and target["reached"] and target["value"] >= 0.03
    assert target["step"] == summary["steps"] < 200 and target["step"] % 5 == 0
    assert target["tokens"] == summary["tokens"] and target["train_seconds"] > 0
    last_eval = [row for row in rows(run) if "eval_mlm_acc" in row][-1]
    assert last_eval["eval_mlm_acc"] == target["value"] and last_eval["tokens"] == target["tokens"]
    assert (run / "model" / "model.safetensors").exists()
    missed = pretrain(corpus_dir, tmp_path / "missed", *sets(train__steps=3), "--target-acc", "0.99")
    assert missed["target"] == {"metric": "eval_mlm_acc", "target": 0.99, "reached": False}
    assert missed["stopped"] is None


def test_snapshots_at_shares_load_in_transformers(corpus_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from bertkit.export.hf import export_hf

    run = tmp_path / "run"
    summary = pretrain(corpus_dir, run, *sets(train__snapshot_every_share=0.5), "--budget", "6000tok")
    snapshots = sorted((run / "snapshots").iterdir(), key=lambda p: int(p.name.split("-")[1]))
    assert [p.name for p in snapshots][-1] == f"step-{summary['steps']}" and len(snapshots) == 2
    meta = json.loads((snapshots[0] / "bertkit_model.json").read_text())
    assert 0.5 <= meta["share"] < 0.75
    import transformers

    export_hf(snapshots[0], tmp_path / "hf")
    model = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "hf")
    assert model.config.num_hidden_layers == 2


def test_flop_budget_spends_the_same_compute_whatever_the_machine(corpus_dir: Path, tmp_path: Path) -> None:
    """`--budget NNflop` counts bertkit's own training FLOPs (6 x non-embedding parameters + attention, per real
    token), so where it stops depends on the data alone, never on load: a 6-step run logs the FLOPs after each step,
    and a budget between steps 3 and 4 ends a run exactly at step 4, with the schedule laid over the FLOPs, the
    summary saying what was spent, and a rerun stopping at the same step."""
    reference = pretrain(corpus_dir, tmp_path / "steps", *sets(train__steps=6))
    spent = [row["flops"] for row in rows(tmp_path / "steps") if "loss" in row]
    assert len(spent) == 6 and spent == sorted(spent) and reference["flops"] == pytest.approx(spent[-1], rel=1e-3)
    assert spent[0] > 0
    budget = (spent[2] + spent[3]) / 2
    for name in ("a", "b"):
        summary = pretrain(corpus_dir, tmp_path / name, *sets(), "--budget", f"{budget:.6e}flop")
        assert summary["stopped"] == "budget" and summary["steps"] == 4, summary
        assert summary["flops"] == pytest.approx(spent[3], rel=1e-3) and summary["flops"] >= budget
        train_rows = [row for row in rows(tmp_path / name) if "loss" in row]
        schedule = ScheduleConfig(warmup_fraction=0.1)
        for row in train_rows:  # the rate a row logs is the next step's, at the spent share of the FLOP budget
            share = min(1.0, row["flops"] / budget)
            assert row["lr"] == pytest.approx(LR * lr_multiplier(share * STEPS, STEPS, schedule), rel=1e-4)
        assert train_rows[-1]["lr"] == 0.0
    in_teraflops = pretrain(corpus_dir, tmp_path / "t", *sets(train__checkpoint_every=2), "--budget",
                            f"{budget / 1e12:.6e}Tflop")  # fmt: skip
    assert in_teraflops["steps"] == 4
    # The FLOPs spent are part of the checkpoint: a run resumed from step 2 with the same budget spends the rest and
    # ends on the uninterrupted run's curve (the same budget string: "flop" and "Tflop" round differently).
    import shutil

    shutil.copytree(tmp_path / "t", tmp_path / "r")
    for later in ("step-4", "step-3"):
        shutil.rmtree(tmp_path / "r" / "checkpoints" / later, ignore_errors=True)
    resumed = pretrain(corpus_dir, tmp_path / "r", *sets(train__checkpoint_every=2), "--budget",
                       f"{budget / 1e12:.6e}Tflop", "--resume", "last")  # fmt: skip
    assert resumed["resumed_from"] == 2 and resumed["steps"] == 4 and resumed["flops"] == in_teraflops["flops"]
    assert curve(tmp_path / "r") == curve(tmp_path / "t")


def test_bad_budget_and_target_input(corpus_dir: Path, tmp_path: Path, xlnet_corpus: Path) -> None:
    line = run_error("pretrain", "-r", "bert-tiny", "-c", str(corpus_dir), "-o", str(tmp_path / "short"),
                     *sets(), "--budget", "10tok", "--quiet")  # fmt: skip
    assert "was spent by the first step" in line and not (tmp_path / "short").exists()
    line = run_error("pretrain", "-r", "bert-tiny", "-c", str(corpus_dir), "-o", str(tmp_path / "short"),
                     *sets(), "--budget", "1kflop", "--quiet")  # fmt: skip
    assert "was spent by the first step" in line and not (tmp_path / "short").exists()
    for bad in ("2e13flips", "flop", "-5Tflop", "0flop"):
        line = run_error("pretrain", "-r", "bert-tiny", "-c", str(corpus_dir), "-o", str(tmp_path / "b"),
                         "--budget", bad)  # fmt: skip
        assert "budget" in line and not (tmp_path / "b").exists(), line
    for bad in ("1.5", "0"):
        line = run_error("pretrain", "-r", "bert-tiny", "-c", str(corpus_dir), "-o", str(tmp_path / "t"),
                         "--target-acc", bad)  # fmt: skip
        assert "target_acc" in line and not (tmp_path / "t").exists()
    # An evaluation corpus built with another tokenizer (SentencePiece) than the training corpus (WordPiece).
    line = run_error("pretrain", "-r", "bert-tiny", "-c", str(corpus_dir), "-o", str(tmp_path / "e"),
                     "--set", f"data.eval={xlnet_corpus}")  # fmt: skip
    assert "another tokenizer" in line and not (tmp_path / "e").exists()


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["ddp", "fsdp", "deepspeed"])
def test_every_rank_stops_at_the_same_step_under_a_budget(engine: str, corpus_dir: Path, tmp_path: Path) -> None:
    """2 processes: a token budget gives the single process's steps and curve (tokens are counted over all ranks);
    a time budget ends every rank at the step the slowest clock says (a rank stopping alone would leave the others
    waiting in a collective until engine.timeout), annealed."""
    from test_distributed import pretrain as launch
    from test_distributed import sets as engine_sets

    common = engine_sets(**{"train.steps": STEPS, "engine.timeout": 60, "schedule.warmup_fraction": 0.1})
    single = json.loads(launch(corpus_dir, tmp_path / "one", *common, "--budget", "6000tok").stdout.splitlines()[-1])
    two = launch(corpus_dir, tmp_path / "two", *common, "--engine", engine, "--budget", "6000tok", procs=2)
    assert json.loads(two.stdout.splitlines()[-1])["steps"] == single["steps"]
    for a, b in zip(rows(tmp_path / "one"), rows(tmp_path / "two"), strict=True):
        assert a["step"] == b["step"] and a.get("lr") == b.get("lr")
        assert a.get("loss", 0) == pytest.approx(b.get("loss", 0), rel=1e-5, abs=2e-6)
    timed = launch(corpus_dir, tmp_path / "timed", *common, "--engine", engine, "--budget", "4s", procs=2)
    summary = json.loads(timed.stdout.splitlines()[-1])
    assert summary["stopped"] == "budget" and 0 < summary["steps"] < STEPS
    assert [row["lr"] for row in rows(tmp_path / "timed") if "loss" in row][-1] == 0.0
    checkpoint = tmp_path / "timed" / "checkpoints" / f"step-{summary['steps']}" / "trainer_state.json"
    assert json.loads(checkpoint.read_text())["budget"]["progress"] == 1.0

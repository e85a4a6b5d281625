"""Multi-process training under torchrun (gloo on CPU): DDP, FSDP2 and DeepSpeed ZeRO 1-3 reproduce the
single-process run for the same global batch, checkpoints move between engines, and bad set-ups fail clearly.

One global batch, one update: every loss is a sum over its targets divided by their count in the whole
global batch, so N processes, and one process with any number of accumulation micro-steps, make the same
step as one process that takes the whole batch at once (accumulation 1), the reference everywhere here.
They agree to fp32 rounding (the all-reduce sums in another order)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
import torch
from cli_helpers import runner
from run_helpers import loss_curve
from safetensors.torch import load_file

from bertkit.cli.app import app, default_resume_value

STEPS = 20
CHECKPOINT_EVERY = 10  # resume_copy continues runs from here


def sets(**extra: object) -> list[str]:
    values = {
        "train.steps": STEPS,
        "train.batch_size": 8,
        "train.log_every": 1,
        "train.checkpoint_every": CHECKPOINT_EVERY,
        "train.eval_batches": 2,
        "model.hidden_dropout": 0.0,  # dropout masks differ between 1 and N processes
        "model.attention_dropout": 0.0,
        "engine.threads": 1,
        "engine.tensorboard": "false",
        **extra,
    }
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


def bertkit(*args: str, procs: int = 1, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    """`bertkit ARGS --quiet --json`: under torchrun with `procs` processes when procs > 1, in a process of its own
    with `env` or an `--engine` other than `single` (a process group of one); otherwise in this one, which saves
    a process start (a traceback, should the run raise one, is added to its stderr)."""
    engine = args[args.index("--engine") + 1] if "--engine" in args else "single"
    if procs == 1 and env is None and engine == "single":
        ran = runner.invoke(app, default_resume_value([*args, "--quiet", "--json"]))  # as bertkit's main() does
        stderr = ran.stderr
        if ran.exc_info is not None and not isinstance(ran.exception, SystemExit):
            stderr += "".join(traceback.format_exception(*ran.exc_info))
        result = subprocess.CompletedProcess(args, ran.exit_code, ran.stdout, stderr)
    else:
        launcher = [sys.executable]
        if procs > 1:
            launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={procs}"]
        command = [*launcher, "-m", "bertkit", *args, "--quiet", "--json"]
        result = subprocess.run(command, capture_output=True, text=True, env=env)
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def pretrain(
    corpus: Path, output: Path, *args: str, procs: int = 1, check: bool = True, env: dict | None = None
) -> subprocess.CompletedProcess:
    command = ["pretrain", "-r", "bert-tiny", "-c", str(corpus), "-o", str(output), *args]
    return bertkit(*command, procs=procs, check=check, env=env)


def resume_copy(run: Path, destination: Path) -> Path:
    """A copy of a finished run as it was at step CHECKPOINT_EVERY: its later checkpoint and its model removed."""
    shutil.copytree(run, destination)
    shutil.rmtree(destination / "checkpoints" / f"step-{STEPS}")
    shutil.rmtree(destination / "model")
    return destination


def assert_same_curve(a: Path, b: Path) -> None:
    got, expected = loss_curve(a), loss_curve(b)
    assert [s for s, _ in got] == [s for s, _ in expected] == list(range(1, STEPS + 1))
    for (_, x), (_, y) in zip(got, expected, strict=True):
        assert x == pytest.approx(y, rel=1e-6, abs=2e-6)  # metrics.jsonl rounds to 6 decimals


def assert_same_eval(a: Path, b: Path) -> None:
    """The held-out metrics depend on the weights and the evaluated sequences, not on how the batch is split."""
    got, expected = (json.loads((run / "summary.json").read_text())["eval"] for run in (a, b))
    assert got.keys() == expected.keys() and "mlm_loss" in got
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=2e-4), key  # rounded to 4 decimals


def assert_same_weights(a: Path, b: Path) -> None:
    """The same weights to fp32 rounding: the whole model within 1e-6 of its norm, and each tensor within 1e-5
    of its own (LayerNorm biases start at zero, so their norm is only their 20 updates)."""
    wa, wb = load_file(str(a / "model" / "model.safetensors")), load_file(str(b / "model" / "model.safetensors"))
    assert wa.keys() == wb.keys()
    squared_difference = squared_norm = 0.0
    for key in wa:
        difference, norm = float((wa[key].double() - wb[key].double()).norm()), float(wb[key].double().norm())
        assert difference <= 1e-5 * norm + 1e-12, (key, difference, norm)
        squared_difference, squared_norm = squared_difference + difference**2, squared_norm + norm**2
    assert squared_difference**0.5 <= 1e-6 * squared_norm**0.5


@pytest.fixture(scope="module")
def single_run(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference: one process takes the whole global batch of 8 sequences at once (accumulation 1)."""
    output = tmp_path_factory.mktemp("dist") / "single"
    pretrain(corpus_dir, output, *sets())
    return output


@pytest.fixture(scope="module")
def ddp_run(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 processes x 4 sequences, DDP, launched with torchrun."""
    output = tmp_path_factory.mktemp("dist") / "ddp"
    pretrain(corpus_dir, output, *sets(), "--engine", "ddp", procs=2)
    return output


@pytest.fixture(scope="module")
def zero3_run(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 processes x 4 sequences, DeepSpeed ZeRO-3 (parameters, gradients and optimizer state sharded)."""
    output = tmp_path_factory.mktemp("dist") / "zero3"
    result = pretrain(corpus_dir, output, *sets(**{"engine.deepspeed.zero_stage": 3}), "--engine", "deepspeed",
                      procs=2)  # fmt: skip
    assert result.stdout.count('"run_dir"') == 1  # only rank 0 prints
    return output


# Each split of the global batch of 8: (engine, processes, accumulation micro-steps, extra settings).
SPLITS = {
    "one-process-accum-2": ("single", 1, 2, {}),
    "one-process-accum-4": ("single", 1, 4, {}),
    "ddp-2": ("ddp", 2, 1, {}),
    "ddp-2-accum-2": ("ddp", 2, 2, {}),
    # Every micro-batch unpadded on both ranks, against the reference's padded and unpadded (auto) batches;
    # slow checks (each a 30 s run) for the engines that wrap (DDP), shard (FSDP2) or hook (ZeRO-3) the model.
    "ddp-2-unpad": ("ddp", 2, 1, {"engine.unpad": "true"}),
    "fsdp-2-unpad": ("fsdp", 2, 1, {"engine.unpad": "true"}),
    "zero3-2-unpad": ("deepspeed", 2, 1, {"engine.unpad": "true", "engine.deepspeed.zero_stage": 3}),
    "fsdp-2": ("fsdp", 2, 1, {}),
    "zero1-2": ("deepspeed", 2, 1, {"engine.deepspeed.zero_stage": 1}),
    "zero2-2-accum-2": ("deepspeed", 2, 2, {"engine.deepspeed.zero_stage": 2}),
}


@pytest.mark.parametrize(
    # The unpadded engines, the ZeRO-1/2 splits (40 s each), FSDP2 (whose steps the default suite checks in
    # distillation) and DDP with accumulation run with the slow checks (the default suite's time limit); the
    # default suite keeps one process with accumulation, DDP, and ZeRO-3 against one process.
    "split",
    [
        pytest.param(s, marks=pytest.mark.slow)
        if s.endswith("-unpad") or s.startswith("zero") or s in ("fsdp-2", "ddp-2-accum-2")
        else s
        for s in SPLITS
    ],
)
def test_every_split_of_the_batch_makes_the_same_steps(
    corpus_dir: Path, single_run: Path, tmp_path: Path, split: str
) -> None:
    """Same loss curve, held-out metrics and weights (each tensor within 1e-6 of its norm) after 20 steps
    as one process with accumulation 1: masked-token counts differ between micro-batches, so this fails
    if any engine or split averaged per-micro-batch means."""
    engine, procs, accum, extra = SPLITS[split]
    pretrain(corpus_dir, tmp_path / split, *sets(**extra, **{"train.grad_accum": accum}), "--engine", engine,
             procs=procs)  # fmt: skip
    assert_same_curve(tmp_path / split, single_run)
    assert_same_eval(tmp_path / split, single_run)
    assert_same_weights(tmp_path / split, single_run)
    summary, reference = (json.loads((run / "summary.json").read_text()) for run in (tmp_path / split, single_run))
    assert summary["steps"] == STEPS and summary["tokens"] == reference["tokens"]


# A batch ramp over half the run: 2, 4, 6, then 8 sequences a step (4 micro-batches of 2 at most).
RAMP = {"train.grad_accum": 4, "train.batch_ramp": 0.5}


@pytest.fixture(scope="module")
def ramped_single_run(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("dist") / "ramped"
    pretrain(corpus_dir, output, *sets(**RAMP))
    return output


# Slow checks (20 s each; the default suite's time limit): the ramp's exact resume in one process is in
# tests/unit/test_engine_loop.py. ZeRO-2 checks the loop owning DeepSpeed's accumulation boundary.
@pytest.mark.slow
@pytest.mark.parametrize("engine", ["ddp", "deepspeed"])
def test_a_batch_ramp_makes_the_same_steps_on_two_processes(
    corpus_dir: Path, ramped_single_run: Path, tmp_path: Path, engine: str
) -> None:
    """The ramp's micro-step count follows the run's progress, which every rank shares: 2 processes take the
    same growing batches as one process, with the same curve and weights."""
    pretrain(corpus_dir, tmp_path / engine, *sets(**RAMP), "--engine", engine, procs=2)
    assert_same_curve(tmp_path / engine, ramped_single_run)
    assert_same_weights(tmp_path / engine, ramped_single_run)
    rows = [json.loads(line) for line in (ramped_single_run / "metrics.jsonl").read_text().splitlines()]
    tokens = [row["tokens"] for row in rows if "loss" in row]
    steps = [b - a for a, b in zip([0, *tokens], tokens, strict=False)]
    # k micro-batches of 2 rows of 64 tokens hold more than 64 k real tokens (rows are packed) and at most 128 k.
    sizes = [min(4, 1 + int(s / STEPS / 0.5 * 4)) for s in range(STEPS)]
    assert sizes[0] == 1 and sizes[-1] == 4
    assert all(64 * k < t <= 128 * k for k, t in zip(sizes, steps, strict=True)), (sizes, steps)


@pytest.mark.slow
def test_ddp_checkpoint_resumes_under_fsdp(corpus_dir: Path, single_run: Path, ddp_run: Path, tmp_path: Path) -> None:
    """Stop the DDP run at step 3 (drop its later checkpoint), resume it with FSDP2 in 2 processes."""
    moved = resume_copy(ddp_run, tmp_path / "moved")
    result = pretrain(corpus_dir, moved, *sets(), "--engine", "fsdp", "--resume", procs=2)
    assert json.loads(result.stdout.strip().splitlines()[-1])["resumed_from"] == CHECKPOINT_EVERY
    assert result.stdout.count('"run_dir"') == 1  # only rank 0 prints
    assert_same_curve(moved, single_run)
    assert_same_weights(moved, single_run)


def test_world_size_that_does_not_divide_the_batch(corpus_dir: Path, tmp_path: Path) -> None:
    result = pretrain(corpus_dir, tmp_path / "bad", *sets(**{"train.batch_size": 5}), "--engine", "ddp", procs=2,
                      check=False)  # fmt: skip
    assert result.returncode != 0
    assert "error: train.batch_size 5 / grad_accum 1 = 5 sequences per micro-step cannot be split over 2" in (
        result.stderr
    )
    assert "[rank0]: Traceback" not in result.stderr  # (torchrun itself reports the failed children)


@pytest.mark.slow
def test_single_checkpoint_resumes_under_ddp_with_accumulation(
    corpus_dir: Path, single_run: Path, tmp_path: Path
) -> None:
    moved = resume_copy(single_run, tmp_path / "moved")
    # 2 processes x 2 micro-steps x 2 sequences continue what one process did with all 8 at once.
    done = pretrain(corpus_dir, moved, *sets(**{"train.grad_accum": 2}), "--engine", "ddp", "--resume", procs=2)
    # Dropout is off, so the fresh random state of rank 1 changes nothing here; the run still says it has one.
    warned = [line for line in done.stderr.splitlines() if "random state of 1 process(es)" in line]
    assert len(warned) == 1 and warned[0].startswith("warning:"), done.stderr[-2000:]
    assert_same_curve(moved, single_run)
    assert_same_weights(moved, single_run)


def test_deepspeed_zero3_two_processes_match_one_process(single_run: Path, zero3_run: Path) -> None:
    assert_same_curve(zero3_run, single_run)
    assert_same_weights(zero3_run, single_run)
    assert_same_eval(zero3_run, single_run)
    trainer = json.loads((zero3_run / "checkpoints" / f"step-{STEPS}" / "trainer_state.json").read_text())
    assert trainer["engine"] == "deepspeed" and trainer["world_size"] == 2


def test_deepspeed_zero3_checkpoint_resumes_in_one_process(
    corpus_dir: Path, single_run: Path, zero3_run: Path, tmp_path: Path
) -> None:
    """ZeRO-3's checkpoint is the full, name-keyed state: one plain process (here with 4 micro-steps)
    continues it exactly."""
    moved = resume_copy(zero3_run, tmp_path / "moved")
    result = pretrain(corpus_dir, moved, *sets(**{"train.grad_accum": 4}), "--resume")
    assert json.loads(result.stdout.strip().splitlines()[-1])["resumed_from"] == CHECKPOINT_EVERY
    assert_same_curve(moved, single_run)
    assert_same_weights(moved, single_run)


@pytest.mark.slow  # 13 s: ZeRO-3's checkpoint round trip stays in the default suite
def test_single_checkpoint_resumes_under_deepspeed_zero1_with_accumulation(
    corpus_dir: Path, single_run: Path, tmp_path: Path
) -> None:
    """A one-process checkpoint continues under ZeRO-1 with accumulation, with a DeepSpeed config file that
    adds settings the recipe does not own: here ZeRO-Offload, which steps bertkit's AdamW on a CPU copy."""
    ds_config = tmp_path / "ds.json"
    offload = {"reduce_bucket_size": 100_000, "offload_optimizer": {"device": "cpu"}}
    ds_config.write_text(json.dumps({"zero_optimization": offload, "train_batch_size": "auto"}))
    moved = resume_copy(single_run, tmp_path / "moved")
    extra = {"train.grad_accum": 2, "engine.deepspeed.zero_stage": 1, "engine.deepspeed.config": ds_config}
    pretrain(corpus_dir, moved, *sets(**extra), "--engine", "deepspeed", "--resume", procs=2)
    assert_same_curve(moved, single_run)
    assert_same_weights(moved, single_run)


@pytest.mark.slow
def test_deepspeed_zero2_checkpoint_resumes_under_fsdp(corpus_dir: Path, single_run: Path, tmp_path: Path) -> None:
    zero2 = tmp_path / "zero2"
    pretrain(corpus_dir, zero2, *sets(**{"engine.deepspeed.zero_stage": 2}), "--engine", "deepspeed", procs=2)
    assert_same_curve(zero2, single_run)
    assert_same_weights(zero2, single_run)
    moved = resume_copy(zero2, tmp_path / "moved")
    pretrain(corpus_dir, moved, *sets(), "--engine", "fsdp", "--resume", procs=2)
    assert_same_curve(moved, single_run)
    assert_same_weights(moved, single_run)


@pytest.mark.slow
def test_deepspeed_launcher(corpus_dir: Path, single_run: Path, tmp_path: Path) -> None:
    """DeepSpeed's own launcher (with --no_local_rank: bertkit reads LOCAL_RANK from the environment)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    output = tmp_path / "launched"
    launcher = [str(Path(sys.executable).parent / "deepspeed"), "--num_gpus", "2", "--no_local_rank",
                "--master_port", str(port), "--module", "bertkit"]  # fmt: skip
    command = [*launcher, "pretrain", "-r", "bert-tiny", "-c", str(corpus_dir), "-o", str(output), *sets(),
               "--engine", "deepspeed", "--quiet", "--json"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_curve(output, single_run)
    assert_same_weights(output, single_run)


@pytest.mark.slow  # make bench: keeps the default suite under 10 minutes on 2 cores
def test_bf16_autocast_under_zero2_tracks_one_process(corpus_dir: Path, tmp_path: Path) -> None:
    """bf16 autocast (fp32 master weights, which ZeRO-2 partitions) trains like one process in bf16."""
    bf16 = {"engine.precision": "bf16"}
    pretrain(corpus_dir, tmp_path / "one", *sets(**bf16))
    pretrain(corpus_dir, tmp_path / "zero2", *sets(**bf16, **{"engine.deepspeed.zero_stage": 2}), "--engine",
             "deepspeed", procs=2)  # fmt: skip
    curve, reference = loss_curve(tmp_path / "zero2"), loss_curve(tmp_path / "one")
    assert [step for step, _ in curve] == [step for step, _ in reference] == list(range(1, STEPS + 1))
    # bf16 matmuls round differently when the reduction order changes; fp32 parity is tested above.
    assert [x for _, x in curve] == pytest.approx([y for _, y in reference], rel=1e-3)


@pytest.mark.slow  # 8 s (the default suite's time limit)
def test_a_setting_deepspeed_rejects_is_one_line(corpus_dir: Path, tmp_path: Path) -> None:
    ds_config = tmp_path / "ds.json"
    ds_config.write_text(json.dumps({"zero_optimization": {"reduce_bucket_size": -5}}))
    result = pretrain(corpus_dir, tmp_path / "run", *sets(**{"engine.deepspeed.config": ds_config}), "--engine",
                      "deepspeed", check=False)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: DeepSpeed rejected the configuration (with {ds_config}): reduce_bucket_size: Input should be "
        "greater than 0"
    ]


def test_deepspeed_without_ninja_is_one_line(corpus_dir: Path, tmp_path: Path) -> None:
    """DeepSpeed compiles its CPU comm op on first use (an empty extensions cache here); without ninja on
    PATH that fails, in one line that says what to install."""
    env = {**os.environ, "PATH": str(tmp_path / "empty"), "TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions")}
    result = pretrain(corpus_dir, tmp_path / "run", *sets(), "--engine", "deepspeed", check=False, env=env)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: DeepSpeed could not start: ") and "pip install ninja" in line


@pytest.mark.slow  # make bench: keeps the default suite under 10 minutes on 2 cores
def test_deepspeed_skips_nan_steps_then_stops_with_the_last_good_state(corpus_dir: Path, tmp_path: Path) -> None:
    """lr=1e30 makes every step after the first NaN. DeepSpeed must skip them without touching the weights,
    and stop with the checkpoint one process writes for the same run."""
    explode = {"optim.lr": 1e30, "schedule.warmup_steps": 0, "engine.max_bad_steps": 2}
    single = pretrain(corpus_dir, tmp_path / "one", *sets(**explode), check=False)
    zero = pretrain(corpus_dir, tmp_path / "zero", *sets(**explode), "--engine", "deepspeed", procs=2, check=False)
    for result in (single, zero):
        assert result.returncode != 0
        assert "error: loss or gradient was NaN/inf for 2 steps in a row at step 1" in result.stderr
    for run in ("one", "zero"):
        assert [p.name for p in (tmp_path / run / "checkpoints").iterdir()] == ["step-1"]
        trainer = json.loads((tmp_path / run / "checkpoints" / "step-1" / "trainer_state.json").read_text())
        assert trainer["skipped_steps"] == 2
    ours = load_file(str(tmp_path / "zero" / "checkpoints" / "step-1" / "model.safetensors"))
    reference = load_file(str(tmp_path / "one" / "checkpoints" / "step-1" / "model.safetensors"))
    for key, value in reference.items():
        assert torch.isfinite(ours[key]).all()
        # The first step moves each weight by lr * g / (|g| + eps), up to 1e30. Where |g| ~ eps, fp32 rounding of g
        # changes that ratio noticeably, so compare to a thousandth of one step: an update applied for a NaN step
        # (or a NaN) would be off by the whole step.
        torch.testing.assert_close(ours[key], value, rtol=0, atol=1e27)


@pytest.mark.slow  # make bench: keeps the default suite under 10 minutes on 2 cores
def test_feature_based_finetune_under_zero3_matches_ddp(
    pretrained_run: Path, sentiment_csv: Path, tmp_path: Path
) -> None:
    """ZeRO-3 partitions the frozen encoder too, outside its optimizer: the head trains the same as under DDP,
    and the exported encoder is the pretrained one, gathered whole."""
    outputs = {}
    for engine in ("ddp", "deepspeed"):
        outputs[engine] = tmp_path / engine
        bertkit("finetune", "-r", "finetune-tiny", "--model", str(pretrained_run), "--train", str(sentiment_csv),
                "-o", str(outputs[engine]), "--feature-based", "--set", "task.head_solver=optimizer",
                "--engine", engine,
                "--set", "engine.deepspeed.zero_stage=3", "--set", "train.steps=4", "--set", "train.batch_size=8",
                "--set", "train.log_every=1", "--set", "engine.threads=1", procs=2)  # fmt: skip
    assert_same_weights(outputs["deepspeed"], outputs["ddp"])
    curve, reference = loss_curve(outputs["deepspeed"]), loss_curve(outputs["ddp"])
    assert [step for step, _ in curve] == [step for step, _ in reference] == [1, 2, 3, 4]
    assert [loss for _, loss in curve] == pytest.approx([loss for _, loss in reference], rel=2e-5)
    tuned = load_file(str(outputs["deepspeed"] / "model" / "model.safetensors"))
    pretrained = load_file(str(pretrained_run / "model" / "model.safetensors"))
    encoder = [key for key in tuned if key.startswith("encoder.")]
    assert encoder and all(torch.equal(tuned[key], pretrained[key]) for key in encoder)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
@pytest.mark.parametrize("engine", ["ddp", "fsdp", "deepspeed"])
def test_gpu_nccl_bf16_two_processes(corpus_dir: Path, tmp_path: Path, engine: str) -> None:
    cuda = {"engine.device": "cuda", "engine.precision": "bf16"}
    pretrain(corpus_dir, tmp_path / "one", *sets(**cuda))
    pretrain(corpus_dir, tmp_path / "two", *sets(**cuda), "--engine", engine, procs=2)
    for (_, x), (_, y) in zip(loss_curve(tmp_path / "two"), loss_curve(tmp_path / "one"), strict=True):
        assert x == pytest.approx(y, rel=2e-2)  # bf16 matmuls: rounding differs with the reduction order


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("engine", ["ddp", "fsdp", "deepspeed"])
def test_gpu_engine_as_a_group_of_one(corpus_dir: Path, tmp_path: Path, engine: str) -> None:
    """One GPU (NCCL cannot put two ranks on one device): each engine's CUDA/NCCL/bf16 path, without a
    launcher, trains like the plain single-process loop."""
    cuda = {"engine.device": "cuda", "engine.precision": "bf16"}
    pretrain(corpus_dir, tmp_path / "single", *sets(**cuda))
    pretrain(corpus_dir, tmp_path / engine, *sets(**cuda), "--engine", engine)
    for (_, x), (_, y) in zip(loss_curve(tmp_path / engine), loss_curve(tmp_path / "single"), strict=True):
        assert x == pytest.approx(y, rel=2e-2)


@pytest.fixture(scope="module")
def distill_single(pretrained_run: Path, corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TinyBERT-style distillation from the bertkit-pretrained teacher, one process, accumulation 1."""
    output = tmp_path_factory.mktemp("distill") / "single"
    bertkit(*distill_args(pretrained_run, corpus_dir, output))
    return output


def distill_args(teacher: Path, corpus: Path, output: Path) -> list[str]:
    return ["distill", "--teacher", str(teacher), "--student", "bert-tiny", "--method", "tinybert", "--corpus",
            str(corpus), "-o", str(output), *sets(**{"model.num_layers": 1, "model.hidden_size": 64})]  # fmt: skip


def zero(stage: int, accum: int = 1) -> list[str]:
    return ["deepspeed", "--set", f"engine.deepspeed.zero_stage={stage}", "--set", f"train.grad_accum={accum}"]


# Each engine distils in 2 processes; ZeRO-2 also accumulates 2 micro-steps, as in SPLITS. ZeRO-1 and ZeRO-2
# keep the teacher whole on every rank as DDP does (only optimizer state, and ZeRO-2's gradients, are
# partitioned): ZeRO-1 runs by default, ZeRO-2 under `make bench`, since each 2-process DeepSpeed run takes
# about 25 s on a busy 2-core machine.
DISTILL_ENGINES = [
    pytest.param(["ddp"], id="ddp"),
    # FSDP2's distillation steps run with the slow checks; the default suite still distils under FSDP2 in
    # test_the_teacher_is_sharded_where_the_student_is[fsdp].
    pytest.param(["fsdp"], id="fsdp", marks=pytest.mark.slow),
    # ZeRO-1 and ZeRO-2 are checked with the slow tests here (pretraining covers them in the default suite).
    pytest.param(zero(1), id="zero1", marks=pytest.mark.slow),
    pytest.param(zero(2, accum=2), id="zero2-accum-2", marks=pytest.mark.slow),
    pytest.param(zero(3), id="zero3", marks=pytest.mark.slow),  # the default suite shards the teacher under ZeRO-3
]


@pytest.mark.parametrize("engine", DISTILL_ENGINES)
def test_distillation_on_every_engine_makes_the_same_steps(
    pretrained_run: Path, corpus_dir: Path, distill_single: Path, tmp_path: Path, engine: list[str]
) -> None:
    """The teacher is replicated under DDP, ZeRO-1 and ZeRO-2 and sharded like the student under FSDP and
    ZeRO-3; the student's steps are those of one process with accumulation 1."""
    output = tmp_path / "run"
    result = bertkit(*distill_args(pretrained_run, corpus_dir, output), "--engine", *engine, procs=2)
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["terms"] == ["embedding", "hidden", "attention"]
    assert summary["teacher_parameters"] == json.loads((distill_single / "summary.json").read_text())[
        "teacher_parameters"
    ]
    assert_same_curve(output, distill_single)
    assert_same_weights(output, distill_single)


SHARDED_TEACHER = """
import json, sys, torch
from bertkit.config.schema import EngineConfig
from bertkit.distill.teacher import Teacher
from bertkit.engine.backends import create_backend
cfg = EngineConfig(backend=sys.argv[2], device="cpu", deepspeed={"zero_stage": 3})
backend = create_backend(cfg, torch.device("cpu"))
teacher = backend.prepare_frozen(Teacher.load(sys.argv[1]))
params = list(teacher.parameters())
print(json.dumps({
    "dtensor": all(type(p).__name__ == "DTensor" for p in params),
    "zero3": all(hasattr(p, "ds_id") and p.numel() == 0 for p in params),
    "trainable": any(p.requires_grad for p in params),
}))
"""


@pytest.mark.parametrize("engine", ["fsdp", "deepspeed"])
def test_the_teacher_is_sharded_where_the_student_is(pretrained_run: Path, engine: str) -> None:
    """FSDP turns every teacher parameter into a DTensor shard; ZeRO-3 partitions them (the local tensors
    are empty placeholders, gathered layer by layer in the forward). Neither trains them."""
    command = [sys.executable, "-c", SHARDED_TEACHER, str(pretrained_run), engine]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "DS_ACCELERATOR": "cpu"})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["dtensor" if engine == "fsdp" else "zero3"] and not report["trainable"]


@pytest.fixture(scope="module")
def bigbird_corpus(workdir: Path, text_file: Path, tokenizer_dir: Path) -> Path:
    """192-token sequences: 12 blocks of 16, past bigbird-tiny's full-attention limit of 176, so every layer
    takes the block-sparse path (the shortest, cheapest corpus that does)."""
    from bertkit.corpus.build import BuildOptions, build_corpus

    build_corpus([text_file], tokenizer_dir, workdir / "bigbird-192", BuildOptions(max_seq_len=192))
    return workdir / "bigbird-192"


@pytest.fixture(scope="module")
def family_single(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The one-process, accumulation-1 reference run of a recipe on its corpus fixture, made once per recipe."""
    runs: dict[str, Path] = {}

    def reference(recipe: str, corpus: Path) -> Path:
        if recipe not in runs:
            runs[recipe] = tmp_path_factory.mktemp("families") / recipe
            bertkit("pretrain", "-r", recipe, "-c", str(corpus), "-o", str(runs[recipe]), *sets())
        return runs[recipe]

    return reference


# The new families on the engines that touch what they add, in the fewest runs: BigBird's block-sparse
# attention (fixed per-layer random blocks) sharded by FSDP2; XLNet's relative attention, its parameters
# used outside nn.Linear (r_w_bias, r_r_bias, r_s_bias, seg_embed, mask_emb), replicated by DDP and
# partitioned by ZeRO-3, with the PLM loss over the global count of predicted tokens.
FAMILY_ENGINES = {
    "bigbird-fsdp": ("bigbird-tiny", "bigbird_corpus", ["fsdp"]),
    "xlnet-ddp": ("xlnet-tiny", "xlnet_corpus", ["ddp"]),
    "xlnet-zero3": ("xlnet-tiny", "xlnet_corpus", ["deepspeed", "--set", "engine.deepspeed.zero_stage=3"]),
    # ModernBERT's sliding-window masks and rotary tables, built per forward, replicated by DDP; its StableAdamW
    # under FSDP2, whose per-tensor clip must see each whole tensor (the RMS over DTensor shards), not a shard.
    "modernbert-ddp": ("modernbert-tiny", "corpus_dir", ["ddp"]),
    "modernbert-fsdp": ("modernbert-tiny", "corpus_dir", ["fsdp"]),
}


# All run with the slow checks (the default suite's time limit: 15-22 s each): the default suite's 2-process
# checks are BERT's. BigBird's block-sparse attention is a model-side path that the engines do not touch.
SLOW_FAMILY_ENGINES = set(FAMILY_ENGINES)


@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_FAMILY_ENGINES else c for c in FAMILY_ENGINES]
)
def test_new_families_on_two_processes_make_the_same_steps(
    request: pytest.FixtureRequest, family_single, tmp_path: Path, case: str
) -> None:
    """bigbird-tiny, xlnet-tiny and modernbert-tiny in 2 processes: the loss curve and weights of one process,
    accumulation 1."""
    recipe, corpus_fixture, engine = FAMILY_ENGINES[case]
    corpus = request.getfixturevalue(corpus_fixture)
    reference = family_single(recipe, corpus)
    output = tmp_path / case
    result = bertkit("pretrain", "-r", recipe, "-c", str(corpus), "-o", str(output), *sets(), "--engine", *engine,
                     procs=2)  # fmt: skip
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["family"] == recipe.removesuffix("-tiny") and summary["steps"] == STEPS
    assert_same_curve(output, reference)
    assert_same_weights(output, reference)


@pytest.mark.parametrize("engine", ["single", "ddp", "fsdp"])
def test_activation_checkpointing_trains_as_without(corpus_dir: Path, single_run: Path, tmp_path: Path,
                                                    engine: str) -> None:  # fmt: skip
    """Every layer recomputed in the backward pass: the same curve and weights as the reference, in one process and
    under DDP and FSDP2 (checkpointing is set before the engine wraps or shards the model)."""
    output = tmp_path / engine
    launch = ["--engine", engine] if engine != "single" else []
    pretrain(corpus_dir, output, *sets(**{"train.activation_checkpointing": 1}), *launch,
             procs=1 if engine == "single" else 2)  # fmt: skip
    assert_same_curve(output, single_run)
    assert_same_weights(output, single_run)


@pytest.fixture(scope="module")
def minilm_corpus(minilm_dir: Path, text_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Python's own documentation (the stdlib's pydoc_data) in all-MiniLM-L6-v2's vocabulary, 32-token blocks."""
    corpus = tmp_path_factory.mktemp("dist-minilm") / "corpus"
    bertkit("build-corpus", "-i", str(text_file), "--tokenizer", str(minilm_dir), "-o", str(corpus),
            "--max-seq-len", "32")  # fmt: skip
    return corpus


def continue_minilm(minilm_dir: Path, corpus: Path, output: Path, *launch: str, procs: int = 1) -> None:
    """4 steps of continue-mlm-tiny from all-MiniLM-L6-v2 (no MLM head: a new one), its first 2 the head's alone."""
    values = {"train.steps": 4, "train.batch_size": 8, "train.grad_accum": 1, "train.log_every": 1,
              "train.eval_batches": 1, "train.checkpoint_every": 2, "train.head_warmup_steps": 2,
              "optim.lr": 1e-3, "model.hidden_dropout": 0.0,
              "model.attention_dropout": 0.0, "engine.threads": 1, "engine.tensorboard": "false"}  # fmt: skip
    bertkit("pretrain", "-r", "continue-mlm-tiny", "-c", str(corpus), "--init-from", str(minilm_dir), "-o",
            str(output), *[arg for key, value in values.items() for arg in ("--set", f"{key}={value}")], *launch,
            procs=procs)  # fmt: skip


@pytest.mark.parametrize("engine", ["ddp", "fsdp"])
def test_a_head_warmup_makes_the_same_steps_on_two_processes(minilm_dir: Path, minilm_corpus: Path, tmp_path: Path,
                                                             engine: str) -> None:  # fmt: skip
    """The new head learns alone for 2 steps, then the whole model: under DDP and FSDP2 (whose wrapped models keep
    the encoder's gradients, dropped before each update during the warm-up), the steps of one process, and the
    encoder is the checkpoint's until the warm-up ends."""
    from bertkit.modelio.hf_dir import load_hf_dir
    from bertkit.modelio.weights import read_weights

    reference, output = tmp_path / "single", tmp_path / engine
    continue_minilm(minilm_dir, minilm_corpus, reference)
    continue_minilm(minilm_dir, minilm_corpus, output, "--engine", engine, procs=2)
    got, expected = loss_curve(output), loss_curve(reference)
    assert [s for s, _ in got] == [s for s, _ in expected] == [1, 2, 3, 4]
    for (_, x), (_, y) in zip(got, expected, strict=True):
        assert x == pytest.approx(y, rel=1e-5, abs=1e-5)
    trained = read_weights(output / "model" / "model.safetensors")
    for key, value in read_weights(reference / "model" / "model.safetensors").items():
        assert torch.allclose(trained[key], value, rtol=1e-4, atol=1e-5), key
    real = load_hf_dir(minilm_dir).weights
    at_two = read_weights(output / "checkpoints" / "step-2" / "model.safetensors")
    encoder = [key for key in real if key.startswith("encoder.") and "pooler" not in key]
    assert encoder and all(torch.equal(at_two[key], real[key]) for key in encoder)  # held while the head warms
    qkv = "encoder.layers.5.attention.qkv.weight"
    assert not torch.equal(trained[qkv], real[qkv])  # then the encoder learns too

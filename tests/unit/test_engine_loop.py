"""The training loop on a small regression problem: NaN handling, accumulation, resume, faults, budget."""

from __future__ import annotations

import errno
import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from bertkit.config.schema import EngineConfig, OptimConfig, ScheduleConfig, TrainConfig
from bertkit.corpus.loader import EpochSampler, SampledBatches
from bertkit.engine import checkpoint as checkpoint_module
from bertkit.engine.checkpoint import list_checkpoints, read_checkpoint
from bertkit.engine.loop import Interrupted, train
from bertkit.errors import BertkitError
from bertkit.objectives.base import Objective, share

ENGINE = EngineConfig(device="cpu")
OPTIM = OptimConfig(lr=0.05, weight_decay=0.01)
SCHEDULE = ScheduleConfig(warmup_steps=2, decay="cosine")


class Regression(SampledBatches):
    """y = x @ w_true + noise with 3 outputs, of which a fixed, uneven subset are targets (like masked
    tokens: rows hold 0-3 of them), served in shuffled, resumable batches."""

    def __init__(self, batch_size: int, seed: int = 0) -> None:
        rng = np.random.default_rng(42)
        self.x = torch.from_numpy(rng.normal(size=(64, 6)).astype(np.float32))
        w_true = torch.arange(1.0, 19.0).reshape(6, 3) / 6
        self.y = self.x @ w_true + 0.1 * torch.from_numpy(rng.normal(size=(64, 3)).astype(np.float32))
        self.targets = torch.from_numpy(rng.random((64, 3)) < 0.5)
        self.batch_size = batch_size
        self.sampler = EpochSampler(np.arange(64), seed)

    def next_batch(self) -> dict[str, torch.Tensor]:
        rows = [i for _, i in self.sampler.take(self.batch_size)]
        return {"x": self.x[rows], "y": self.y[rows], "targets": self.targets[rows],
                "attention_mask": torch.ones(len(rows), 4, dtype=torch.bool)}  # fmt: skip


class MaskedMSE(Objective):
    """Squared error at the target outputs only; target: one (row, output) pair marked in `targets`."""

    name = "mse"

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return float(batch["targets"].sum())

    def __call__(self, model: nn.Module, batch: dict[str, torch.Tensor], totals=None):
        total = (totals or self.counts(batch))[self.name]
        errors = (model(batch["x"]) - batch["y"])[batch["targets"]]
        loss = share((errors**2).sum(), total)
        return loss, {"mse": loss.detach()}


objective = MaskedMSE()


class Hooked(MaskedMSE):
    """The objective, with `hook(call_number, loss, model) -> loss` run on every call (faults, signals)."""

    def __init__(self, hook) -> None:
        super().__init__()
        self.hook, self.calls = hook, 0

    def __call__(self, model: nn.Module, batch: dict[str, torch.Tensor], totals=None):
        loss, metrics = super().__call__(model, batch, totals)
        self.calls += 1
        return self.hook(self.calls, loss, model), metrics


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.1), nn.Linear(8, 3))


def run(tmp: Path, objective=objective, resume: bool = False, model: nn.Module | None = None, **train_kw):
    cfg = TrainConfig(**{"steps": 12, "batch_size": 8, "log_every": 1, **train_kw})
    model = model if model is not None else make_model()
    result = train(model, objective, Regression(cfg.batch_size // cfg.grad_accum), tmp, cfg, OPTIM, SCHEDULE, ENGINE,
                   resume=resume, quiet=True)  # fmt: skip
    return model, result


def test_trains_and_logs(tmp_path: Path) -> None:
    model, result = run(tmp_path, steps=30)
    first, last = result.first_last("loss")
    assert last < 0.8 * first
    row = result.history[-1]
    assert {"loss", "mse", "lr", "grad_norm", "tokens_per_s", "mfu", "skipped_steps"} <= set(row)
    assert 0 < row["mfu"] < 1
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 30


@pytest.mark.parametrize("grad_accum", [2, 4, 8])
def test_any_accumulation_gives_the_full_batch_step(tmp_path: Path, grad_accum: int) -> None:
    """Micro-batches hold different numbers of targets (the source has 0-3 per row), so a mean of
    micro-batch means would weigh targets unequally; the global count makes every split the same step."""
    source = Regression(8 // grad_accum)
    counts = {float(source.next_batch()["targets"].sum()) for _ in range(8)}
    assert len(counts) > 1  # the split is uneven, so this test can fail
    torch.manual_seed(1)
    a = nn.Sequential(nn.Linear(6, 3))  # no dropout: the micro-steps see the same function
    b = nn.Sequential(nn.Linear(6, 3))
    b.load_state_dict(a.state_dict())
    _, full = run(tmp_path / "a", model=a, grad_accum=1)
    _, split = run(tmp_path / "b", model=b, grad_accum=grad_accum)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, rtol=1e-6, atol=1e-7)
    assert [r["loss"] for r in full.history] == pytest.approx([r["loss"] for r in split.history], rel=1e-6)


def nan_on(calls: set[int]):
    return Hooked(lambda n, loss, _model: loss * float("nan") if n in calls else loss)


def test_nan_steps_are_skipped_and_counted(tmp_path: Path) -> None:
    model, result = run(tmp_path, objective=nan_on({4, 5, 6}))
    assert result.steps == 12 and result.skipped_steps == 3
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert result.history[-1]["skipped_steps"] == 3


def test_nan_in_a_row_stops_with_the_last_good_state(tmp_path: Path) -> None:
    snapshot: dict[str, torch.Tensor] = {}

    def poison(calls: int, loss: torch.Tensor, model: nn.Module) -> torch.Tensor:
        if calls > 5:
            snapshot.update({k: v.detach().clone() for k, v in model.state_dict().items()})
            return loss * float("inf")
        return loss

    poisoned = Hooked(poison)
    with pytest.raises(BertkitError, match=r"NaN/inf for 5 steps in a row at step 5; stopped, last good state saved"):
        run(tmp_path, objective=poisoned)
    (step, path), *_ = list_checkpoints(tmp_path / "checkpoints")
    assert step == 5
    weights, _, trainer = read_checkpoint(path)
    assert trainer["skipped_steps"] == 5
    for key, value in snapshot.items():
        assert torch.equal(weights[key], value)


def test_resume_in_process_is_bitwise_exact(tmp_path: Path) -> None:
    full, _ = run(tmp_path / "full", checkpoint_every=5, grad_accum=2)
    part = tmp_path / "part"
    run(part, checkpoint_every=5, grad_accum=2)
    drop_checkpoints_after(part, 5)
    resumed, result = run(part, resume=True, checkpoint_every=5, grad_accum=2)
    assert result.resumed_from == 5
    for pa, pb in zip(full.state_dict().values(), resumed.state_dict().values(), strict=True):
        assert torch.equal(pa, pb)
    rows = lambda d: [(r["step"], r["loss"], r["lr"], r["grad_norm"]) for r in run_rows(d)]  # noqa: E731
    assert rows(tmp_path / "full") == rows(part)


def drop_checkpoints_after(run_dir: Path, step: int) -> None:
    """Leave the run as it was when checkpoint `step` was written: its later checkpoints removed."""
    import shutil

    for saved, path in list_checkpoints(run_dir / "checkpoints"):
        if saved > step:
            shutil.rmtree(path)


def run_rows(run_dir: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]


SAFETENSORS_FULL_DISK = {  # safetensors' own exception, as its versions word Rust's I/O error
    "safetensors": "Error while serializing: I/O error: No space left on device (os error 28)",
    "safetensors, Debug wording": 'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No '
    'space left on device" })',
}


@pytest.mark.parametrize("fails", ["torch.save", *SAFETENSORS_FULL_DISK])
def test_full_disk_while_checkpointing_damages_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: str
) -> None:
    """The disk fills up while the second checkpoint is written, in torch's writer (an OSError) or in safetensors'
    (its own exception, with the OS error in its message)."""
    import safetensors.torch
    from safetensors import SafetensorError

    owner, name = (checkpoint_module.torch, "save") if fails == "torch.save" else (safetensors.torch, "save_file")
    real_save = getattr(owner, name)
    calls = {"n": 0}

    def failing_save(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:  # the second checkpoint: the disk is full half-way through
            if fails == "torch.save":
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            raise SafetensorError(SAFETENSORS_FULL_DISK[fails])
        return real_save(*args, **kwargs)

    monkeypatch.setattr(owner, name, failing_save)
    with pytest.raises(BertkitError, match=r"could not write checkpoint step-8 .*No space left on device.*step-4"):
        run(tmp_path, checkpoint_every=4)
    monkeypatch.undo()
    checkpoints = tmp_path / "checkpoints"
    assert [s for s, _ in list_checkpoints(checkpoints)] == [4]
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-4"]  # no temporary leftovers
    read_checkpoint(checkpoints / "step-4")  # still whole
    _, result = run(tmp_path, resume=True, checkpoint_every=4)
    assert result.resumed_from == 4 and result.steps == 12


def test_corrupt_and_incompatible_checkpoints(tmp_path: Path) -> None:
    run(tmp_path, checkpoint_every=6, steps=6)
    with pytest.raises(BertkitError, match="optim.name=adamw"):
        train(make_model(), objective, Regression(8), tmp_path, TrainConfig(steps=12, batch_size=8),
              OptimConfig(name="lamb"), SCHEDULE, ENGINE, resume=True, quiet=True)  # fmt: skip
    with pytest.raises(BertkitError, match="does not fit this model"):
        run(tmp_path, resume=True, model=nn.Sequential(nn.Linear(6, 4), nn.Dropout(0.1), nn.Linear(4, 3)))
    weights = tmp_path / "checkpoints" / "step-6" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(BertkitError, match="cannot read"):
        run(tmp_path, resume=True)


def test_token_budget_stops_cleanly_with_a_checkpoint(tmp_path: Path) -> None:
    # 8 sequences x 4 tokens = 32 tokens per step: a 100-token budget ends after step 4.
    _, result = run(tmp_path, budget="100tok")
    assert result.stopped == "budget" and result.steps == 4
    assert [s for s, _ in list_checkpoints(tmp_path / "checkpoints")] == [4]


def test_sigterm_saves_a_checkpoint_and_exits_130(tmp_path: Path) -> None:
    def signal_on_third(calls: int, loss: torch.Tensor, _model: nn.Module) -> torch.Tensor:
        if calls == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return loss

    signalled = Hooked(signal_on_third)
    with pytest.raises(Interrupted, match="interrupted by SIGTERM at step 3; checkpoint saved") as caught:
        run(tmp_path, objective=signalled)
    assert caught.value.exit_code == 130
    assert [s for s, _ in list_checkpoints(tmp_path / "checkpoints")] == [3]
    _, result = run(tmp_path, resume=True)
    assert result.steps == 12


def test_tensorboard_curves_are_the_rows_of_metrics_jsonl_across_resumes(tmp_path: Path) -> None:
    """TensorBoard's own reader (its EventAccumulator, which applies any purge) sees exactly the numbers of
    metrics.jsonl, step by step, after a run resumed twice mid-run (once from a step that also evaluated) and once
    more from its final checkpoint (which evaluates again): no checkpoint step lost, no step twice, no point of a
    stopped attempt."""
    from tensorboard_reader import tensorboard_series

    engine = ENGINE.model_copy(update={"tensorboard": True})
    cfg = TrainConfig(steps=12, batch_size=8, log_every=1, eval_every=6, checkpoint_every=3, keep_last=5)
    source = Regression(8)
    held_out = lambda model: {"mse": float(((model(source.x) - source.y) ** 2).mean())}  # noqa: E731

    def go(resume: bool) -> int | None:
        result = train(make_model(), objective, Regression(8), tmp_path, cfg, OPTIM, SCHEDULE, engine,
                       evaluate=held_out, resume=resume, quiet=True)  # fmt: skip
        return result.resumed_from

    go(resume=False)  # each attempt below logs up to step 12: the next one starts from an earlier checkpoint
    for last_kept in (3, 6, 12):  # 6: an evaluation at the checkpoint's step, kept, its tokens once
        drop_checkpoints_after(tmp_path, last_kept)
        assert go(resume=True) == last_kept

    logged: dict[str, list[tuple[int, float]]] = {}  # each key once per step: an evaluation repeats `tokens`
    for row in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines()):
        for key, value in row.items():
            if key == "step":
                continue
            points = logged.setdefault(key, [])
            if not points or points[-1][0] < row["step"]:
                points.append((row["step"], float(np.float32(value))))
    assert [step for step, _ in logged["loss"]] == list(range(1, 13))
    assert [step for step, _ in logged["eval_mse"]] == [6, 12]
    assert tensorboard_series(tmp_path) == logged


def test_fp16_needs_a_gpu(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(BertkitError, match="fp16 .*needs a GPU"):
        train(make_model(), objective, Regression(8), tmp_path, TrainConfig(steps=2, batch_size=8), OPTIM, SCHEDULE,
              EngineConfig(precision="fp16"), quiet=True)  # fmt: skip


def test_bf16_autocast_on_cpu_tracks_fp32(tmp_path: Path) -> None:
    curves = {}
    for precision in ("fp32", "bf16"):
        model = make_model()
        engine = EngineConfig(device="cpu", precision=precision, tensorboard=False)
        result = train(model, objective, Regression(8), tmp_path / precision, TrainConfig(steps=20, batch_size=8,
                       log_every=1), OPTIM, SCHEDULE, engine, quiet=True)  # fmt: skip
        curves[precision] = [row["loss"] for row in result.history]
        assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 master weights
    assert curves["bf16"] != curves["fp32"]  # autocast really ran in bf16...
    assert curves["bf16"] == pytest.approx(curves["fp32"], rel=2e-2)  # ...and trains the same


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_gpu_mixed_precision(tmp_path: Path, precision: str) -> None:
    cfg = TrainConfig(steps=30, batch_size=8, log_every=1, checkpoint_every=10)
    engine = EngineConfig(device="cuda", precision=precision, tensorboard=False)
    result = train(make_model(), objective, Regression(8), tmp_path, cfg, OPTIM, SCHEDULE, engine, quiet=True)
    first, last = result.first_last("loss")
    assert last < first and result.steps == 30
    _, state, _ = read_checkpoint(tmp_path / "checkpoints" / "step-30")
    assert (state["scaler"] is not None) == (precision == "fp16")


def test_step_one_is_logged_whatever_log_every_is(tmp_path: Path) -> None:
    """A run shorter than log_every logs step 1 (the untrained model's loss, as a 1-step run reports it) and its
    last step; a longer one step 1, then every log_every steps (the second row averages steps 2..log_every)."""
    _, one = run(tmp_path / "one", steps=1)
    _, short = run(tmp_path / "short", log_every=100)
    assert [row["step"] for row in short.history] == [1, 12]
    assert short.first_last("loss")[0] == one.history[0]["loss"]
    # before, the only row was the last step's, reported as both first and last
    assert short.first_last("loss")[1] != short.first_last("loss")[0]
    _, every5 = run(tmp_path / "every5", log_every=5)
    assert [row["step"] for row in every5.history] == [1, 5, 10, 12]
    _, every1 = run(tmp_path / "every1", log_every=1)
    steps_2_to_5 = [row["loss"] for row in every1.history[1:5]]
    assert every5.history[1]["loss"] == pytest.approx(sum(steps_2_to_5) / 4, rel=1e-5)


def test_resume_mid_window_logs_the_rows_of_an_uninterrupted_run(tmp_path: Path) -> None:
    """Checkpoints at steps 3, 6, 9 fall inside logging windows of 5 (after step 1's own row): a run resumed from
    step 3 writes exactly the rows, step 1's included, of one that never stopped."""
    run(tmp_path / "full", log_every=5, checkpoint_every=3, keep_last=5)
    part = tmp_path / "part"
    run(part, log_every=5, checkpoint_every=3, keep_last=5)
    import shutil

    for step, path in list_checkpoints(part / "checkpoints"):
        if step > 3:
            shutil.rmtree(path)
    _, result = run(part, resume=True, log_every=5, checkpoint_every=3, keep_last=5)
    assert result.resumed_from == 3
    rows = lambda d: [(r["step"], r["loss"], r["lr"], r["grad_norm"]) for r in run_rows(d)]  # noqa: E731
    assert [row[0] for row in rows(part)] == [1, 5, 10, 12]
    assert rows(tmp_path / "full") == rows(part)


def test_batch_ramp_grows_the_batch_one_micro_batch_at_a_time() -> None:
    from bertkit.engine.budget import ramped_micro_steps

    # grad_accum 4 over the first 60%: full batch from 0.6 x 3/4 = 45% of the run on.
    taken = [ramped_micro_steps(p / 100, 4, 0.6) for p in range(101)]
    assert taken[0] == 1 and taken[14] == 1 and taken[15] == 2 and taken[30] == 3 and taken[45] == 4
    assert taken == sorted(taken) and set(taken) == {1, 2, 3, 4} and taken[-1] == 4
    assert {ramped_micro_steps(p / 10, 4, 0.0) for p in range(11)} == {4}  # no ramp: the batch from step 1


def test_batch_ramp_steps_take_the_ramped_batch_and_resume_exactly(tmp_path: Path) -> None:
    """12 steps of at most 4 micro-batches of 2 rows, ramped over half the run: step s (progress s/12) takes
    1 + int(s/12 / 0.5 x 4) micro-batches; each row has 4 tokens. Resuming mid-ramp continues identically."""
    ramp = {"grad_accum": 4, "batch_ramp": 0.5, "checkpoint_every": 3, "keep_last": 10}
    full, _ = run(tmp_path / "full", **ramp)
    tokens = [r["tokens"] for r in run_rows(tmp_path / "full")]
    per_step = np.diff([0, *tokens]).tolist()
    assert per_step == [4 * 2 * min(4, 1 + int(s / 12 / 0.5 * 4)) for s in range(12)]
    part = tmp_path / "part"
    run(part, **ramp)
    drop_checkpoints_after(part, 3)
    resumed, result = run(part, resume=True, **ramp)
    assert result.resumed_from == 3
    for pa, pb in zip(full.state_dict().values(), resumed.state_dict().values(), strict=True):
        assert torch.equal(pa, pb)
    rows = lambda d: [(r["step"], r["loss"], r["lr"], r["tokens"]) for r in run_rows(d)]  # noqa: E731
    assert rows(tmp_path / "full") == rows(part)


def test_batch_ramp_needs_micro_batches_and_steps() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="set train.grad_accum"):
        TrainConfig(batch_ramp=0.6)
    with pytest.raises(ValidationError, match="instead of train.epochs"):
        TrainConfig(steps=None, epochs=2, grad_accum=2, batch_ramp=0.6)


def test_resuming_on_more_processes_says_the_new_ranks_are_reseeded(capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint of one process resumed on two: rank 0 takes the saved random state, rank 1 keeps its own,
    and rank 0 says so in one warning line; on as many processes as saved, nothing is said."""
    from bertkit.engine.state import restore_rng

    torch.manual_seed(7)
    saved = [{"torch": torch.get_rng_state()}]
    expected = torch.rand(3)
    torch.manual_seed(99)
    restore_rng(saved, 0, 2, torch.device("cpu"))
    assert torch.equal(torch.rand(3), expected)
    torch.manual_seed(99)
    own = torch.rand(3)
    torch.manual_seed(99)
    restore_rng(saved, 1, 2, torch.device("cpu"))
    assert torch.equal(torch.rand(3), own)  # the new rank's state is its own
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("warning:") and "1 process(es)" in lines[0] and "has 2" in lines[0]
    restore_rng(saved, 0, 1, torch.device("cpu"))
    assert not capsys.readouterr().err.strip()


def test_a_source_outside_the_data_source_contract_is_one_line(tmp_path: Path) -> None:
    """The trainer's data source is a declared protocol (next_batch, shard, state_dict, load_state_dict,
    reshardable): a source that lacks part of it is refused before any step, by name."""

    class Bare:
        def next_batch(self) -> dict[str, torch.Tensor]:
            return Regression(8).next_batch()

    cfg = TrainConfig(steps=2, batch_size=8)
    with pytest.raises(BertkitError, match="Bare is not a data source"):
        train(make_model(), objective, Bare(), tmp_path, cfg, OPTIM, SCHEDULE, ENGINE, quiet=True)  # type: ignore[arg-type]
    assert not (tmp_path / "checkpoints").exists()


def test_a_source_that_cannot_reshard_refuses_another_world_size(tmp_path: Path) -> None:
    """A checkpoint's data position names the number of processes it was drawn on. bertkit's sources walk one
    global order (reshardable), so they continue on any number; a source that declares otherwise refuses a
    checkpoint from another number of processes with one line, before a step is taken."""
    from bertkit.engine.checkpointer import Checkpointer
    from bertkit.engine.state import DataPosition

    run(tmp_path, checkpoint_every=6)
    [(_, path), *_] = reversed(list_checkpoints(tmp_path / "checkpoints"))
    saved = read_checkpoint(path)[2]
    assert saved["world_size"] == 1 and saved["loader"] == {"epoch": 1, "position": 32}

    per_rank = Regression(8)
    per_rank.reshardable = False
    checkpointer = Checkpointer(tmp_path / "checkpoints", 1, True)
    checkpointer.add("data", DataPosition(per_rank, world=2))
    with pytest.raises(BertkitError, match=r"holds a data position taken on 1 process\(es\), which this data source"):
        checkpointer.restore(path, {}, saved)
    checkpointer = Checkpointer(tmp_path / "checkpoints", 1, True)
    checkpointer.add("data", DataPosition(Regression(8), world=2))  # reshardable: continues the global order
    checkpointer.restore(path, {}, saved)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_auto_precision_is_bf16_on_a_gpu_that_has_it(tmp_path: Path) -> None:
    """engine.precision=auto (the recipes' default) trains in bf16 autocast on a CUDA GPU with bf16."""
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("this GPU has no native bf16 (compute capability below 8.0)")
    engine = EngineConfig(device="cuda", tensorboard=False)
    cfg = TrainConfig(steps=5, batch_size=8)
    result = train(make_model(), objective, Regression(8), tmp_path, cfg, OPTIM, SCHEDULE, engine, quiet=True)
    assert engine.precision == "auto" and result.precision == "bf16"

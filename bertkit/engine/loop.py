"""The one training loop behind `pretrain`, `distill` and `finetune`.

They differ only in the model, the objective (model, batch -> loss, metrics) and the batch source
(an object with `next_batch()`, `state` and `load_state()`), never in the loop itself. How a step is
executed on one or many processes (DDP, FSDP2) is the backend's business
(bertkit/engine/backends); the loop only talks to its small interface.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from bertkit.config.schema import EngineConfig, OptimConfig, ScheduleConfig, TrainConfig
from bertkit.engine import dist
from bertkit.engine.backends import create_backend
from bertkit.engine.backends.base import clip_value
from bertkit.engine.budget import Budget, ramped_micro_steps
from bertkit.engine.checkpoint import list_checkpoints, load_state, read_checkpoint, save_checkpoint
from bertkit.engine.device import autocast, resolve_device
from bertkit.engine.flops import non_embedding_parameters, peak_flops, training_flops
from bertkit.engine.optim import BudgetScheduler, build_scheduler, move_step_scheduler
from bertkit.engine.unpad import configure_unpad
from bertkit.errors import BertkitError
from bertkit.progress import Tracker, stderr_console


class BatchSource(Protocol):
    state: Any

    def next_batch(self) -> dict[str, torch.Tensor]: ...

    def load_state(self, state: dict[str, int]) -> None: ...


class Objective(Protocol):
    """What the loop trains (bertkit/objectives/base.py has the contract): `counts(batch)` gives the number of
    targets of each loss in a micro-batch, from the batch alone; the call returns the micro-batch's share of
    the global-batch mean loss (its sum over targets / the global count in `totals`) and metrics alike."""

    def counts(self, batch: dict[str, torch.Tensor]) -> dict[str, float]: ...

    def __call__(
        self, model: nn.Module, batch: dict[str, torch.Tensor], totals: dict[str, float]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...


Evaluator = Callable[[nn.Module], dict[str, float]]
# Called on every rank after each evaluation with (step, metrics, snapshot); `snapshot()` returns the full
# weights (collective: call it on all ranks or none; empty on ranks > 0 under some engines). Returning True
# stops training there (early stopping); after the final evaluation the return value is ignored.
OnEval = Callable[[int, dict[str, float], Callable[[], dict[str, torch.Tensor]]], bool]
# Called on every rank at each `train.snapshot_every_share` with (step, when, snapshot), snapshot as above and
# `when` the run's share, training seconds and tokens at that step.
OnSnapshot = Callable[[int, dict[str, float], Callable[[], dict[str, torch.Tensor]]], None]


class Interrupted(BertkitError):
    """SIGINT/SIGTERM: a checkpoint was saved; exit like an interrupted shell command."""

    exit_code = 130


@dataclass
class TrainResult:
    steps: int
    history: list[dict[str, float]] = field(default_factory=list)
    eval: dict[str, float] = field(default_factory=dict)
    skipped_steps: int = 0
    seconds: float = 0.0  # this call's wall clock
    # The run's training clock at its end: every attempt's training time, pauses (checkpoints, evaluations) left
    # out; what a time budget counts.
    train_seconds: float = 0.0
    tokens: int = 0
    resumed_from: int | None = None
    # "budget" when a time/token budget ended the run before `steps`; "early_stopping" when `on_eval` did;
    # "target" when an evaluation reached `train.target_acc`
    stopped: str | None = None
    # With train.target_acc: the target, whether it was reached, and when (step, training seconds, tokens).
    target: dict[str, Any] | None = None

    def first_last(self, key: str) -> tuple[float | None, float | None]:
        values = [row[key] for row in self.history if key in row]
        return (values[0], values[-1]) if values else (None, None)


def _to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


@contextlib.contextmanager
def _stop_signals() -> Iterator[dict[str, str | None]]:
    """SIGINT/SIGTERM set a flag instead of killing the process; the loop saves and exits at the
    next step boundary (handlers can only be installed from the main thread)."""
    flag: dict[str, str | None] = {"signal": None}
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum: int, _frame: object) -> None:
        flag["signal"] = signal.Signals(signum).name

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(saved: list[dict[str, torch.Tensor]], rank: int, world: int, device: torch.device) -> None:
    """This rank's random state from a checkpoint's per-rank states. Resumed on more processes than it was saved
    from, the new ranks keep their fresh seeds, and the run says so in one line (their dropout and sampling
    draws differ from an uninterrupted run's)."""
    if rank < len(saved):
        torch.set_rng_state(saved[rank]["torch"])
        if "cuda" in saved[rank] and device.type == "cuda":
            torch.cuda.set_rng_state(saved[rank]["cuda"], device)
    if saved and world > len(saved) and rank == 0:
        stderr_console.print(
            f"warning: the checkpoint holds the random state of {len(saved)} process(es) and this run has {world}; "
            f"ranks {len(saved)}-{world - 1} start from fresh random states, so their dropout and sampling draws "
            "differ from an uninterrupted run's",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _tensorboard(run_dir: Path, purge_step: int | None) -> Any:
    """A SummaryWriter; without the tensorboard package (an optional dependency), the one line that says so."""
    from bertkit.engine.tracking import require

    require(["tensorboard"])
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(run_dir / "tensorboard"), purge_step=purge_step)


def train(
    model: nn.Module,
    objective: Objective,
    source: BatchSource,
    run_dir: Path,
    train_cfg: TrainConfig,
    optim_cfg: OptimConfig,
    schedule_cfg: ScheduleConfig,
    engine_cfg: EngineConfig,
    evaluate: Evaluator | None = None,
    resume: bool = False,
    quiet: bool = False,
    description: str = "training",
    on_eval: OnEval | None = None,
    target_metric: str | None = None,
    on_snapshot: OnSnapshot | None = None,
) -> TrainResult:
    """Train `model` for `train_cfg.steps` optimizer steps of `train_cfg.batch_size` sequences over all
    processes; `source` serves micro-batches of `batch_size / grad_accum` sequences (this rank takes its
    share). Rank 0 writes metrics.jsonl and checkpoints under `run_dir`. On return `model` holds the
    trained weights (on any backend). `train_cfg.target_acc` stops at the first evaluation whose
    `target_metric` reaches it."""
    device = resolve_device(engine_cfg)
    backend = create_backend(engine_cfg, device)
    rank, world = backend.rank, backend.world_size
    main = rank == 0
    accum = train_cfg.grad_accum
    if (train_cfg.batch_size // accum) % world:
        raise BertkitError(
            f"train.batch_size {train_cfg.batch_size} / grad_accum {accum} = {train_cfg.batch_size // accum} "
            f"sequences per micro-step cannot be split over {world} processes; "
            f"use a batch size divisible by {accum * world}"
        )
    sampler = getattr(source, "sampler", None)
    if world > 1:
        if sampler is None or not hasattr(sampler, "shard"):
            raise BertkitError(f"this data source cannot be sharded over {world} processes")
        sampler.shard(rank, world)
    quiet = quiet or not main
    if main and device.type == "cpu" and engine_cfg.precision == "bf16":
        from bertkit.engine.cpu import bf16_warning

        if warning := bf16_warning():
            stderr_console.print(warning, markup=False, highlight=False, soft_wrap=True)
    budget = Budget.parse(train_cfg.budget) if train_cfg.budget else None
    shaped = budget is not None and train_cfg.budget_schedule  # the schedule is laid over the budget
    if train_cfg.target_acc is not None and target_metric is None:
        raise BertkitError(
            f"train.target_acc applies to pretraining, whose held-out masked-token accuracy it is compared with; "
            f"drop --set train.target_acc={train_cfg.target_acc} for {description}"
        )

    checkpoint_dir = run_dir / "checkpoints"
    result = TrainResult(steps=0)
    step = 0
    # Running sums of the current logging window; part of the checkpoint so a resumed run logs the
    # exact same rows as an uninterrupted one.
    window: dict[str, float] = {}
    window_steps = 0
    # Steps in the window that logged each key: a term that starts mid-window (task distillation's
    # prediction phase) is averaged over its own steps, not the window's.
    window_counts: dict[str, int] = {}
    previous_seconds = 0.0
    resume_state: tuple[dict[str, Any], dict[str, Any]] | None = None
    existing = list_checkpoints(checkpoint_dir)
    if resume and existing:
        last_step, last_path = existing[-1]
        model_state, training_state, trainer = read_checkpoint(last_path)
        _check_compatible(last_path, trainer, optim_cfg)
        # Weights go into the plain model before the backend wraps it (DDP broadcasts them, FSDP shards them).
        load_state(model, model_state, str(last_path))
        resume_state = (training_state, trainer)
        result.resumed_from = last_step

    torch.manual_seed(train_cfg.seed + rank)
    flops_params = non_embedding_parameters(model)
    configure_unpad(model, engine_cfg.unpad)  # before any engine wraps or shards the model
    backend.setup(model, optim_cfg, train_cfg)
    if hasattr(objective, "attach"):
        objective.attach(backend)  # frozen modules the objective reads (a distillation teacher), placed by the engine
    optimizer = backend.optimizer
    scheduler = (BudgetScheduler if shaped else build_scheduler)(optimizer, train_cfg.steps, schedule_cfg)
    scaler = torch.amp.GradScaler("cuda") if engine_cfg.precision == "fp16" and backend.uses_amp_scaler else None
    if resume_state is not None:
        training_state, trainer = resume_state
        try:
            backend.load_optimizer_state(training_state["optimizer"], last_path)
            saved_schedule = training_state["scheduler"]
            if shaped or "progress" not in saved_schedule:
                if not shaped:
                    scheduler.load_state_dict(saved_schedule)
            else:
                # Laid over a budget before, over steps now: the step schedule continues from this step.
                move_step_scheduler(scheduler, trainer["step"])
            if scaler is not None and training_state.get("scaler"):
                scaler.load_state_dict(training_state["scaler"])
        except (KeyError, ValueError, RuntimeError, IndexError) as err:
            raise BertkitError(
                f"checkpoint {last_path} does not fit this optimizer/model: {str(err).splitlines()[0]}"
            ) from None
        restore_rng(training_state.get("rng", []), rank, world, device)
        if sampler is not None and hasattr(sampler, "load_state"):
            sampler.load_state(trainer["loader"])
        else:
            source.load_state(trainer["loader"])
        step, result.skipped_steps, result.tokens = trainer["step"], trainer["skipped_steps"], trainer["tokens"]
        window, window_steps = trainer["window"], trainer["window_steps"]
        window_counts = trainer.get("window_counts") or dict.fromkeys(window, window_steps)
        previous_seconds = float(trainer.get("train_seconds", 0.0))
        if budget is not None:
            # The budget continues from the progress saved (that of steps/train.steps for a run that had none), over
            # what is left of this run's budget: a budget changed on resume stretches or squeezes the rest.
            saved_budget = trainer.get("budget") or {}
            if (saved_budget.get("kind"), saved_budget.get("total")) != (budget.kind, budget.total):
                spent_then = float(result.tokens) if budget.kind == "tokens" else previous_seconds
                budget = budget.resumed(spent_then, float(saved_budget.get("progress", step / train_cfg.steps)))
            # (The same budget needs no anchor: its progress is spent / total, as in an uninterrupted run.)
            if shaped:
                scheduler.set_progress(float(saved_budget.get("progress", budget.anchor_progress)))

    metrics_path = run_dir / "metrics.jsonl"
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
        if result.resumed_from is None and metrics_path.exists():
            metrics_path.unlink()
        elif result.resumed_from is not None:
            _truncate_metrics(metrics_path, step, train_cfg.steps)
    if result.resumed_from is not None and main:
        result.history = [row for row in _read_metrics(metrics_path) if "loss" in row]

    started = time.perf_counter()
    # Seconds spent evaluating, checkpointing and snapshotting: not training time, so not budget time either.
    # The clock stands still inside `pause()`, so what is written there (checkpoint, evaluation row) says when
    # the pause began.
    paused = 0.0
    pause_began: float | None = None

    def train_seconds() -> float:
        now = time.perf_counter()
        ongoing = now - pause_began if pause_began is not None else 0.0
        return previous_seconds + now - started - paused - ongoing

    @contextlib.contextmanager
    def pause() -> Iterator[None]:
        nonlocal paused, pause_began
        pause_began = time.perf_counter()
        try:
            yield
        finally:
            paused += time.perf_counter() - pause_began
            pause_began = None

    def run_progress() -> float:
        """The spent share of the budget, or of `steps` without one; every rank gets the same value."""
        if budget is None:
            return step / train_cfg.steps
        if budget.kind == "tokens":
            return budget.progress(float(result.tokens))  # counted over all ranks already
        # Each rank measures its own clock: all take the slowest's, so they stop and schedule alike.
        return budget.progress(dist.all_reduce_max(train_seconds()))

    def checkpoint() -> Path:
        with pause():
            return _checkpoint()

    def _checkpoint() -> Path:
        """Collective: every rank contributes its state; rank 0 writes; a write error stops every rank."""
        model_state = backend.model_state()
        optimizer_state = backend.optimizer_state()
        rngs = dist.gather_objects(_rng_state(device))
        error = None
        if main:
            training_state = {
                "optimizer": optimizer_state,
                "scheduler": scheduler.state_dict(),
                "scaler": scaler.state_dict() if scaler is not None else None,
                "rng": rngs,
            }
            trainer = {
                "loader": (sampler.state if sampler is not None else source.state).to_dict(),
                "skipped_steps": result.skipped_steps,
                "tokens": result.tokens,
                "window": window,
                "window_steps": window_steps,
                "window_counts": window_counts,
                "train_seconds": train_seconds(),
                "budget": {"kind": budget.kind, "total": budget.total, "progress": progress} if budget else None,
                "optimizer": optim_cfg.name,
                "engine": backend.name,
                "world_size": world,
            }
            try:
                save_checkpoint(checkpoint_dir, step, model_state, training_state, trainer, train_cfg.keep_last)
            except BertkitError as err:
                error = str(err)
        error = dist.broadcast_object(error)
        if error:
            raise BertkitError(error)
        return checkpoint_dir / f"step-{step}"

    def write_eval(metrics: dict[str, float]) -> None:
        """An evaluation's row, with the training time and tokens it took to get there (for time-to-quality)."""
        if main:
            row = {"step": step, **{f"eval_{k}": v for k, v in metrics.items()}}
            row.update(train_seconds=round(train_seconds(), 3), tokens=result.tokens)
            _write_row(metrics_file, writer, row)

    if train_cfg.target_acc is not None:
        result.target = {"metric": f"eval_{target_metric}", "target": train_cfg.target_acc, "reached": False}

    def reached_target(metrics: dict[str, float]) -> bool:
        """Records the first evaluation at or above `train.target_acc`; the same answer on every rank."""
        if result.target is None or result.target["reached"]:
            return False
        if target_metric not in metrics:
            raise BertkitError(f"train.target_acc: the evaluation reports no {target_metric} to compare with")
        if not dist.any_rank(metrics[target_metric] >= train_cfg.target_acc):
            return False
        result.target.update(
            reached=True,
            value=metrics[target_metric],
            step=step,
            train_seconds=round(train_seconds(), 3),
            tokens=result.tokens,
        )
        return True

    progress = run_progress()
    # Evaluations and snapshots at shares of the run: how many of each have been passed already.
    shares_passed = {
        "eval": _marks(progress, train_cfg.eval_every_share),
        "snapshot": _marks(progress, train_cfg.snapshot_every_share),
    }
    too_short: str | None = None
    consecutive_bad = 0
    window_tokens = window_sequences = 0
    window_start = time.perf_counter()
    peak = peak_flops(device, engine_cfg.precision, engine_cfg.peak_tflops) * world
    writer = None
    if main and engine_cfg.tensorboard:
        writer = _tensorboard(run_dir, step if result.resumed_from is not None else None)
    backend.module.train()
    metrics_file = open(metrics_path, "a", encoding="utf-8") if main else None  # noqa: SIM115
    try:
        with Tracker(description, total=train_cfg.steps, quiet=quiet, unit="steps") as tracker, _stop_signals() as flag:
            tracker.advance(step)
            while step < train_cfg.steps:
                over_budget = progress >= 1.0 and budget is not None
                if dist.any_rank(flag["signal"] is not None or over_budget):
                    if flag["signal"] is None and over_budget:
                        result.stopped = "budget"
                        checkpoint()
                        break
                    saved = checkpoint()
                    raise Interrupted(
                        f"interrupted by {flag['signal'] or 'a signal on another rank'} at step {step}; "
                        f"checkpoint saved in {saved}; continue with --resume"
                    )
                # One global batch, one update: count every loss's targets over all micro-steps and ranks
                # before the first forward (one all-reduce), so each micro-step's loss is its share of the
                # global mean and any split of the batch gives the same step.
                if hasattr(objective, "begin_step"):
                    objective.begin_step(step)  # objectives whose terms change over the run (task distillation)
                micro_steps = ramped_micro_steps(progress, accum, train_cfg.batch_ramp)
                micro_batches = [_to_device(source.next_batch(), device) for _ in range(micro_steps)]
                totals = _global_counts(objective, micro_batches)
                step_tokens, step_sequences = int(totals.pop(_TOKENS)), int(totals.pop(_SEQUENCES))
                total_loss = torch.zeros((), device=device)
                step_metrics: dict[str, torch.Tensor] = {}
                for micro, batch in enumerate(micro_batches):
                    sync = contextlib.nullcontext() if micro == micro_steps - 1 else backend.no_sync()
                    with sync:
                        with autocast(device, engine_cfg.precision):
                            loss, metrics = objective(backend.forward_module, batch, totals)
                        # Every backend averages gradients over its ranks; the shares already sum to the
                        # global mean, so undo the average.
                        scaled = loss * world
                        backend.backward(scaler.scale(scaled) if scaler is not None else scaled)
                    total_loss += loss.detach().float()
                    for key, value in metrics.items():
                        step_metrics[key] = step_metrics.get(key, 0) + value.detach().float()
                # One collective for everything logged: the shares of all ranks add up to the global means.
                keys = sorted(step_metrics)
                packed = torch.stack([total_loss, *(step_metrics[k] for k in keys)]).float()
                packed = dist.all_reduce_sum(packed)
                loss_finite = bool(torch.isfinite(packed[0]))
                if loss_finite:
                    # Clips, and applies the update only if the gradient norm is finite.
                    grad_norm = backend.step(clip_value(optim_cfg.grad_clip), scaler)
                else:
                    backend.discard_gradients()
                    grad_norm = torch.tensor(float("nan"))
                if not torch.isfinite(grad_norm):
                    # No update: one bad batch must not poison the run.
                    result.skipped_steps += 1
                    if scaler is not None and loss_finite:
                        continue  # fp16 overflow: the scaler lowered its scale; expected, not an error
                    consecutive_bad += 1
                    if consecutive_bad >= engine_cfg.max_bad_steps:
                        saved = checkpoint()
                        raise BertkitError(
                            f"loss or gradient was NaN/inf for {consecutive_bad} steps in a row at step {step}; "
                            f"stopped, last good state saved in {saved} "
                            "(lower optim.lr or raise schedule.warmup_steps"
                            f"{', or use fp32' if engine_cfg.precision != 'fp32' else ''})"
                        )
                    continue
                consecutive_bad = 0
                step += 1
                result.tokens += step_tokens
                progress = run_progress()
                if shaped:
                    scheduler.set_progress(progress)  # the next step's rate, as a step scheduler's step() sets
                    if progress >= 1.0 and step == 1 and result.resumed_from is None:
                        too_short = (
                            f"--budget {train_cfg.budget} was spent by the first step; give a budget of many steps "
                            f"(with train.budget_schedule it is what warm-up and decay are laid over)"
                        )
                        break
                else:
                    scheduler.step()
                window_tokens += step_tokens
                window_sequences += step_sequences
                window_steps += 1
                window["loss"] = window.get("loss", 0.0) + float(packed[0])
                window_counts["loss"] = window_counts.get("loss", 0) + 1
                for index, key in enumerate(keys, start=1):
                    window[key] = window.get(key, 0.0) + float(packed[index])
                    window_counts[key] = window_counts.get(key, 0) + 1
                # Step 1 always gets a row of its own, so the first logged loss (a summary's loss_first) is the
                # untrained model's, whatever log_every is; the next row averages steps 2..log_every.
                # (A run stopped by its budget logs on the same steps as one told to train that long, so a budget run
                # continued with more steps has the curve of the longer run: its last step has no row of its own.)
                if step == 1 or step % train_cfg.log_every == 0 or step == train_cfg.steps:
                    elapsed = time.perf_counter() - window_start
                    row: dict[str, Any] = {"step": step}
                    row.update({k: round(v / window_counts[k], 6) for k, v in window.items()})
                    row["lr"] = scheduler.get_last_lr()[0]
                    row["grad_norm"] = round(float(grad_norm), 4)
                    row["tokens"] = result.tokens
                    row["tokens_per_s"] = round(window_tokens / elapsed, 1) if elapsed > 0 else None
                    if elapsed > 0 and window_sequences:
                        flops = training_flops(
                            backend.module, window_tokens, window_tokens / window_sequences, flops_params
                        )
                        # Three significant figures: a tiny model's MFU is small, not zero.
                        row["mfu"] = float(f"{flops / elapsed / peak:.3g}")
                    row["skipped_steps"] = result.skipped_steps
                    row["train_seconds"] = round(train_seconds(), 3)
                    if main:
                        _write_row(metrics_file, writer, row)
                    result.history.append(row)
                    window, window_counts, window_steps, window_start = {}, {}, 0, time.perf_counter()
                    window_tokens = window_sequences = 0
                    info = f"loss {row['loss']:.3f}"
                    if row["tokens_per_s"]:
                        info += f" | {row['tokens_per_s']:,.0f} tok/s | MFU {100 * row.get('mfu', 0):.1f}%"
                    tracker.advance(0, info=info)
                last = step >= train_cfg.steps or (budget is not None and progress >= 1.0)
                eval_due = _passed(shares_passed, "eval", progress, train_cfg.eval_every_share) or (
                    train_cfg.eval_every and step % train_cfg.eval_every == 0
                )
                if evaluate and eval_due and not last:  # the last step's evaluation is the final one, below
                    with pause():
                        evaluated = _run_eval(backend, evaluate)
                        write_eval(evaluated)
                        stop = on_eval is not None and dist.any_rank(
                            bool(on_eval(step, evaluated, backend.model_state))
                        )
                    hit = reached_target(evaluated)
                    if stop or hit:
                        result.eval, result.stopped = evaluated, "target" if hit else "early_stopping"
                        tracker.advance(1)
                        break
                if on_snapshot is not None and _passed(
                    shares_passed, "snapshot", progress, train_cfg.snapshot_every_share
                ):
                    with pause():
                        when = {"share": round(progress, 4), "train_seconds": round(train_seconds(), 3)}
                        on_snapshot(step, {**when, "tokens": result.tokens}, backend.model_state)
                if train_cfg.checkpoint_every and step % train_cfg.checkpoint_every == 0:
                    checkpoint()
                tracker.advance(1)
            if evaluate and too_short is None and result.stopped not in ("early_stopping", "target"):
                with pause():
                    result.eval = _run_eval(backend, evaluate)
                    write_eval(result.eval)
                    reached_target(result.eval)
                    if on_eval is not None:
                        on_eval(step, result.eval, backend.model_state)
    finally:
        if metrics_file is not None:
            metrics_file.close()
        if writer is not None:
            writer.close()
    if too_short is not None:
        if main:  # a fresh run with nothing to show: leave nothing behind
            import shutil

            shutil.rmtree(run_dir, ignore_errors=True)
        raise BertkitError(too_short)
    if budget is not None and step >= train_cfg.steps and progress < 1.0 and shaped and main:
        stderr_console.print(
            f"warning: train.steps={train_cfg.steps} ended the run at {100 * progress:.0f}% of --budget "
            f"{train_cfg.budget}, before its schedule finished; raise train.steps (an upper bound under a budget)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    backend.final_weights_into(model)
    result.steps = step
    result.seconds = time.perf_counter() - started
    result.train_seconds = train_seconds()
    return result


def _marks(progress: float, share: float) -> int:
    """How many multiples of `share` `progress` has passed (0 when shares are off). The small tolerance keeps
    a progress of exactly k x share (steps/train.steps) from missing its mark to rounding."""
    return int(math.floor(progress / share + 1e-9)) if share else 0


def _passed(passed: dict[str, int], kind: str, progress: float, share: float) -> bool:
    """True once per new multiple of `share` reached (several passed in one step count once)."""
    marks = _marks(progress, share)
    if marks <= passed[kind]:
        return False
    passed[kind] = marks
    return True


_TOKENS, _SEQUENCES = "_tokens", "_sequences"


def _global_counts(objective: Objective, micro_batches: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    """Targets of every loss, plus tokens and sequences, over this step's micro-batches on all ranks."""
    local: dict[str, float] = {}
    for batch in micro_batches:
        counts = {
            **objective.counts(batch),
            _TOKENS: float(batch["attention_mask"].sum()),
            _SEQUENCES: float(batch["attention_mask"].shape[0]),
        }
        for key, value in counts.items():
            local[key] = local.get(key, 0.0) + float(value)
    keys = sorted(local)
    summed = dist.all_reduce_sum(torch.tensor([local[k] for k in keys], dtype=torch.float64))
    return dict(zip(keys, summed.tolist(), strict=True))


def _check_compatible(path: Path, trainer: dict[str, Any], optim_cfg: OptimConfig) -> None:
    saved_optimizer = trainer.get("optimizer", "adamw")
    if saved_optimizer != optim_cfg.name:
        raise BertkitError(
            f"checkpoint {path} was trained with optim.name={saved_optimizer}, the recipe says {optim_cfg.name}; "
            f"resume with --set optim.name={saved_optimizer}"
        )


def _write_row(metrics_file: Any, writer: Any, row: dict[str, Any]) -> None:
    metrics_file.write(json.dumps(row) + "\n")
    metrics_file.flush()
    # MLflow / W&B, when the run reports to them (bertkit/engine/tracking.py): queued, never blocking a step.
    from bertkit.engine import tracking

    tracking.log_row(Path(metrics_file.name).parent, row)
    if writer is not None:
        for key, value in row.items():
            if key != "step" and isinstance(value, int | float):
                writer.add_scalar(key, value, row["step"])


def _run_eval(backend: Any, evaluate: Evaluator) -> dict[str, float]:
    module = backend.eval_module
    was_training = module.training
    module.eval()
    with torch.no_grad():
        metrics = evaluate(module)
    module.train(was_training)
    return metrics


def _read_metrics(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def _truncate_metrics(path: Path, step: int, last_step: int) -> None:
    """On resume, drop rows logged after the checkpoint, so the curve has no duplicate steps. A checkpoint
    at the last step comes before the final evaluation, which the resumed run writes again."""

    def keep(row: dict[str, Any]) -> bool:
        final_eval = row["step"] >= last_step and "loss" not in row
        return row["step"] < step or (row["step"] == step and not final_eval)

    rows = [row for row in _read_metrics(path) if keep(row)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")

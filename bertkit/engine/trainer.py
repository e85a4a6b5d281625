"""The trainer behind `pretrain`, `distill` and `finetune`: `Trainer.train()` reads top to bottom.

They differ only in the model, the objective (model, batch -> loss, metrics) and the data source
(bertkit/engine/contracts.py), never in the trainer. How a step runs on one or many processes (DDP, FSDP2,
DeepSpeed ZeRO) is the backend's business (bertkit/engine/backends); the trainer talks to its small interface.
Its state is a table of parts (bertkit/engine/state.py, clock.py, log_window.py) that the checkpointer saves
and restores by name: new state is a new part and one line in `_parts`. What changes the model or the run at a
point of training (activation checkpointing, freezing, a head warm-up, a phase's closing checkpoint) reacts to the
trainer's events (bertkit/engine/events.py: setup, step_start, end): a new behaviour is a new event part.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.config.schema import EngineConfig, OptimConfig, ScheduleConfig, TrainConfig
from bertkit.engine import dist
from bertkit.engine.backends import create_backend
from bertkit.engine.budget import ramped_micro_steps
from bertkit.engine.checkpoint import load_state
from bertkit.engine.checkpointer import Checkpointer
from bertkit.engine.clock import RunProgress, TrainingClock
from bertkit.engine.contracts import DataSource, Evaluator, Objective, OnEval, OnSnapshot
from bertkit.engine.cpu import LayerShape
from bertkit.engine.device import resolve_device, resolve_precision
from bertkit.engine.events import ActivationCheckpointing, AtEnd, Freeze, HeadWarmup, Part
from bertkit.engine.flops import non_embedding_parameters, peak_flops, training_flops
from bertkit.engine.log_window import LogWindow
from bertkit.engine.metrics_log import MetricsLog
from bertkit.engine.optim import BudgetScheduler, build_scheduler
from bertkit.engine.state import (
    Counters,
    DataPosition,
    OptimizerState,
    RandomState,
    RunIdentity,
    ScalerState,
    ScheduleState,
    warn,
)
from bertkit.engine.step import StepOutput, train_step
from bertkit.engine.unpad import configure_unpad
from bertkit.errors import BertkitError
from bertkit.progress import Tracker


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
    flops: float = 0.0  # training FLOPs, as bertkit counts them (what a FLOP budget spends)
    precision: str = "fp32"  # what the run trained in (engine.precision=auto resolved)
    resumed_from: int | None = None
    # "budget" when a time/token budget ended the run before `steps`; "early_stopping" when `on_eval` did;
    # "target" when an evaluation reached `train.target_acc`
    stopped: str | None = None
    # With train.target_acc: the target, whether it was reached, and when (step, training seconds, tokens).
    target: dict[str, Any] | None = None

    def first_last(self, key: str) -> tuple[float | None, float | None]:
        values = [row[key] for row in self.history if key in row]
        return (values[0], values[-1]) if values else (None, None)


@dataclass
class Hooks:
    """What the caller runs inside the loop: evaluation, and what it does with each one and with snapshots."""

    evaluate: Evaluator | None = None
    on_eval: OnEval | None = None
    on_snapshot: OnSnapshot | None = None
    target_metric: str | None = None  # what train.target_acc is compared with
    # The parameters (name prefixes of the plain model) that alone learn during the first train.head_warmup_steps
    # optimizer steps, everything else frozen: the parts a continued pretraining's checkpoint did not have (a new
    # MLM head), so that their first gradients do not move the encoder.
    warm_only: tuple[str, ...] = ()
    # Another run's checkpoint this run starts from (`pretrain --decay-from`): its weights and optimizer state, and
    # with `carry_data` its data position and random state too (the same corpus, continued).
    start_from: Path | None = None
    carry_data: bool = False
    # Save a checkpoint at the last step, whatever train.checkpoint_every says (the end of a phase, which the next
    # phase starts from).
    final_checkpoint: bool = False
    # More parts reacting to the trainer's events (bertkit/engine/events.py), after the trainer's own.
    parts: tuple[Part, ...] = ()


def layer_shape(model: nn.Module, with_vocab: bool) -> LayerShape | None:
    """The width of `model`'s encoder layers (and its vocabulary, for a masked LM's output), for the precision
    calibration; None when the model names no configuration."""
    cfg = getattr(model, "config", None) or getattr(getattr(model, "encoder", None), "config", None)
    if cfg is None or not hasattr(cfg, "hidden_size"):
        return None
    return LayerShape(cfg.hidden_size, cfg.num_heads, cfg.intermediate_size, cfg.vocab_size if with_vocab else 0)


class Trainer:
    def __init__(
        self,
        model: nn.Module,
        objective: Objective,
        source: DataSource,
        run_dir: Path,
        cfg: tuple[TrainConfig, OptimConfig, ScheduleConfig, EngineConfig],
        hooks: Hooks,
        resume: bool = False,
        quiet: bool = False,
        description: str = "training",
    ) -> None:
        self.model, self.objective, self.source, self.run_dir = model, objective, source, run_dir
        self.train_cfg, self.optim_cfg, self.schedule_cfg, self.engine_cfg = cfg
        self.hooks, self.resume, self.description = hooks, resume, description
        self.device = resolve_device(self.engine_cfg)
        shape = layer_shape(model, with_vocab=description == "pretrain")
        self.precision, self.precision_line = resolve_precision(self.engine_cfg.precision, self.device, shape)
        self.backend = create_backend(self.engine_cfg, self.device)
        self.rank, self.world = self.backend.rank, self.backend.world_size
        if self.engine_cfg.precision == "auto" and self.world > 1:  # a measured choice: every rank takes rank 0's
            self.precision, self.precision_line = dist.broadcast_object((self.precision, self.precision_line))
        self.main = self.rank == 0
        self.quiet = quiet or not self.main
        self._check_inputs()
        self.result = TrainResult(steps=0, precision=self.precision)
        self.counters, self.clock, self.window = Counters(), TrainingClock(), LogWindow()
        self.progress = RunProgress(self.train_cfg, self.clock, self.counters)
        self.checkpointer = Checkpointer(run_dir / "checkpoints", self.train_cfg.keep_last, self.main,
                                         self.train_cfg.keep_every)  # fmt: skip
        self.log = MetricsLog(run_dir, self.main, self.engine_cfg.tensorboard)
        self.consecutive_bad = 0
        self.marks: dict[str, int] = {}
        # What reacts to the trainer's events (bertkit/engine/events.py), in this order: freezing before the head
        # warm-up reads what is frozen for good; the caller's parts last.
        train_cfg = self.train_cfg
        self.parts: list[Part] = [
            ActivationCheckpointing(train_cfg.activation_checkpointing),
            Freeze(train_cfg.freeze),
            HeadWarmup(hooks.warm_only, train_cfg.head_warmup_steps or 0,
                       None if self.backend.name == "single" else self.backend.hold),
            *([AtEnd(self._closing_checkpoint)] if hooks.final_checkpoint else []),
            *hooks.parts,
        ]

    # -- the run, top to bottom ------------------------------------------------------------------------
    def train(self) -> TrainResult:
        """Train for `train.steps` optimizer steps of `train.batch_size` sequences over all processes (or until a
        budget, a target or early stopping ends it). Rank 0 writes metrics.jsonl and checkpoints under the run
        directory; on return the model holds the trained weights (on any backend)."""
        resumed = self._read_latest_checkpoint()  # weights go into the plain model before the engine wraps it
        started = self._read_start() if resumed is None else None
        torch.manual_seed(self.train_cfg.seed + self.rank)
        self._set_up_engine()
        if self.precision_line and not self.quiet:  # said once the run is set up: a set-up error stays one line
            warn(self.precision_line)
        if resumed is not None:
            self.checkpointer.restore(*resumed)
        elif started is not None:
            carried = ("run", "optimizer", *(("data", "rng") if self.hooks.carry_data else ()))
            self.checkpointer.restore(*started, only=carried)
        self.result.history = self.log.open(self.result.resumed_from, self.train_cfg.steps)
        self.clock.start()
        self.progress.update()
        self.marks = {kind: _marks(self.progress.value, self._share(kind)) for kind in ("eval", "snapshot")}
        if self.train_cfg.target_acc is not None:
            metric = f"eval_{self.hooks.target_metric}"
            self.result.target = {"metric": metric, "target": self.train_cfg.target_acc, "reached": False}
        self.backend.module.train()
        too_short = None
        try:
            with (
                Tracker(self.description, total=self.train_cfg.steps, quiet=self.quiet, unit="steps") as tracker,
                _stop_signals() as flag,
            ):
                tracker.advance(self.counters.step)
                while self.counters.step < self.train_cfg.steps:
                    if self._should_stop(flag):
                        break
                    if not self._optimizer_step():
                        continue  # skipped: a NaN/inf loss or gradient
                    if self._spent_by_the_first_step():
                        too_short = (
                            f"--budget {self.train_cfg.budget} was spent by the first step; give a budget of many "
                            "steps (with train.budget_schedule it is what warm-up and decay are laid over)"
                        )
                        break
                    self._log_step(tracker)
                    if self._after_step():
                        tracker.advance(1)
                        break
                    tracker.advance(1)
                if too_short is None:
                    for part in self.parts:
                        part.end(self.model, self.counters.step)
                if too_short is None and self.result.stopped not in ("early_stopping", "target"):
                    self._final_evaluation()
        finally:
            self.log.close()
        if too_short is not None:
            if self.main:  # a fresh run with nothing to show: leave nothing behind
                shutil.rmtree(self.run_dir, ignore_errors=True)
            raise BertkitError(too_short)
        return self._finish()

    # -- set-up ------------------------------------------------------------------------------------------
    def _check_inputs(self) -> None:
        train_cfg, world = self.train_cfg, self.world
        per_micro_step = train_cfg.batch_size // train_cfg.grad_accum
        if per_micro_step % world:
            raise BertkitError(
                f"train.batch_size {train_cfg.batch_size} / grad_accum {train_cfg.grad_accum} = {per_micro_step} "
                f"sequences per micro-step cannot be split over {world} processes; "
                f"use a batch size divisible by {train_cfg.grad_accum * world}"
            )
        if not isinstance(self.source, DataSource):
            raise BertkitError(
                f"{type(self.source).__name__} is not a data source the trainer can resume and shard: it needs "
                "next_batch, shard, state_dict, load_state_dict and reshardable (bertkit/engine/contracts.py)"
            )
        if world > 1:
            self.source.shard(self.rank, world)
        if train_cfg.head_warmup_steps and self.hooks.warm_only and self.backend.name == "deepspeed":
            raise BertkitError(
                "train.head_warmup_steps freezes and thaws the encoder within the run, which DeepSpeed's optimizer "
                "cannot follow; warm the head up with engine.backend=single, ddp or fsdp, or set "
                "train.head_warmup_steps=0"
            )
        if self.main and self.device.type == "cpu" and self.precision == "bf16":
            from bertkit.engine.cpu import bf16_warning

            if warning := bf16_warning():
                warn(warning)
        if train_cfg.target_acc is not None and self.hooks.target_metric is None:
            raise BertkitError(
                f"train.target_acc applies to pretraining, whose held-out masked-token accuracy it is compared with; "
                f"drop --set train.target_acc={train_cfg.target_acc} for {self.description}"
            )

    def _read_into_model(self, path: Path) -> tuple[Path, dict[str, Any], dict[str, Any]]:
        """A checkpoint's weights into the plain model now (before the engine wraps it); the rest, for after set-up."""
        weights, tensors, records = self.checkpointer.read(path)
        load_state(self.model, weights, str(path))
        return path, tensors, records

    def _read_start(self) -> tuple[Path, dict[str, Any], dict[str, Any]] | None:
        """Another run's checkpoint to start from (hooks.start_from)."""
        return self._read_into_model(self.hooks.start_from) if self.hooks.start_from is not None else None

    def _read_latest_checkpoint(self) -> tuple[Path, dict[str, Any], dict[str, Any]] | None:
        latest = self.checkpointer.latest() if self.resume else None
        if latest is None:
            return None
        step, path = latest
        self.result.resumed_from = step
        return self._read_into_model(path)

    def _set_up_engine(self) -> None:
        """The engine wraps (or shards) the model and builds the optimizer; then the parts a checkpoint keeps."""
        self.flops_params = non_embedding_parameters(self.model)
        configure_unpad(self.model, self.engine_cfg.unpad)  # before any engine wraps or shards the model
        # and so is activation checkpointing: checkpointing, then compile, then DDP/FSDP2/ZeRO (backend.setup),
        # then the optimizer over the wrapped model
        for part in self.parts:  # activation checkpointing, freezing: on the plain model, before any engine wraps it
            part.setup(self.model)
        self.backend.setup(self.model, self.optim_cfg, self.train_cfg)
        if hasattr(self.objective, "attach"):
            self.objective.attach(self.backend)  # frozen modules the objective reads (a teacher), placed by the engine
        schedule = BudgetScheduler if self.progress.shaped else build_scheduler
        self.scheduler = schedule(self.backend.optimizer, self.train_cfg.steps, self.schedule_cfg)
        fp16_scaling = self.precision == "fp16" and self.backend.uses_amp_scaler
        self.scaler = torch.amp.GradScaler("cuda") if fp16_scaling else None
        self.peak = peak_flops(self.device, self.precision, self.engine_cfg.peak_tflops) * self.world
        self._parts()

    def _parts(self) -> None:
        """The checkpoint's table, in restore order (the budget reads the counters and the clock; the schedule,
        the budget)."""
        add = self.checkpointer.add
        add("run", RunIdentity(self.optim_cfg.name, self.backend.name))
        add("counters", self.counters)
        add("clock", self.clock)
        add("budget", self.progress)
        add("window", self.window)
        add("data", DataPosition(self.source, self.world))
        add("optimizer", OptimizerState(self.backend), tensors=True)
        add("scheduler", ScheduleState(self.scheduler, self.progress, self.counters), tensors=True)
        add("scaler", ScalerState(self.scaler), tensors=True)
        add("rng", RandomState(self.device, self.rank, self.world), tensors=True)

    # -- the steps -----------------------------------------------------------------------------------------
    def _should_stop(self, flag: dict[str, str | None]) -> bool:
        """At a step boundary: a spent budget ends the run with a checkpoint; a signal saves one and raises."""
        over_budget = self.progress.over_budget
        if not dist.any_rank(flag["signal"] is not None or over_budget):
            return False
        saved = self._checkpoint()
        if flag["signal"] is None and over_budget:
            self.result.stopped = "budget"
            return True
        raise Interrupted(
            f"interrupted by {flag['signal'] or 'a signal on another rank'} at step {self.counters.step}; "
            f"checkpoint saved in {saved}; continue with --resume"
        )

    def _closing_checkpoint(self, step: int) -> None:
        """A checkpoint at the last step, unless train.checkpoint_every wrote one there (a phase's end)."""
        every = self.train_cfg.checkpoint_every
        if not (every and step % every == 0):
            self._checkpoint()

    def _optimizer_step(self) -> bool:
        """One global batch, one update; False when the step was skipped (no update was applied)."""
        for part in self.parts:  # the head warm-up freezes and thaws here
            part.step_start(self.model, self.counters.step)
        train_cfg = self.train_cfg
        micro_steps = ramped_micro_steps(self.progress.value, train_cfg.grad_accum, train_cfg.batch_ramp)
        batches = [_to_device(self.source.next_batch(), self.device) for _ in range(micro_steps)]
        out = train_step(self.backend, self.objective, batches, self.precision, self.optim_cfg.grad_clip,
                         self.scaler)  # fmt: skip
        if not out.applied:
            self._skipped(out)
            return False
        self.consecutive_bad = 0
        self.counters.step += 1
        self.counters.tokens += out.tokens
        # The same on every rank: the global batch's tokens and sequences.
        self.counters.flops += training_flops(self.backend.module, out.tokens, out.tokens / out.sequences,
                                              self.flops_params)  # fmt: skip
        self.progress.update()
        if self.progress.shaped:
            self.scheduler.set_progress(self.progress.value)  # the next step's rate, as a step scheduler sets it
        else:
            self.scheduler.step()
        self.window.add(out.values, out.tokens, out.sequences)
        self.last_grad_norm = out.grad_norm
        return True

    def _skipped(self, out: StepOutput) -> None:
        """No update: one bad batch must not poison the run; `engine.max_bad_steps` in a row stop it."""
        self.counters.skipped_steps += 1
        if self.scaler is not None and out.loss_finite:
            return  # fp16 overflow: the scaler lowered its scale; expected, not an error
        self.consecutive_bad += 1
        if self.consecutive_bad >= self.engine_cfg.max_bad_steps:
            saved = self._checkpoint()
            raise BertkitError(
                f"loss or gradient was NaN/inf for {self.consecutive_bad} steps in a row at step {self.counters.step}; "
                f"stopped, last good state saved in {saved} (lower optim.lr or raise schedule.warmup_steps"
                f"{', or use fp32' if self.precision != 'fp32' else ''})"
            )

    def _log_step(self, tracker: Tracker) -> None:
        """Step 1 always gets a row of its own, so the first logged loss (a summary's loss_first) is the
        untrained model's; the next row averages steps 2..log_every. (A run stopped by its budget logs on the
        steps of one told to train that long, so a budget run continued with more steps has the longer run's
        curve.)"""
        step = self.counters.step
        if not (step == 1 or step % self.train_cfg.log_every == 0 or step == self.train_cfg.steps):
            return
        window = self.window.close()
        row: dict[str, Any] = {"step": step, **window.means}
        row["lr"] = self.scheduler.get_last_lr()[0]
        row["grad_norm"] = round(float(self.last_grad_norm), 4)
        row["tokens"] = self.counters.tokens
        row["flops"] = float(f"{self.counters.flops:.6g}")  # training FLOPs so far (what a FLOP budget spends)
        row["tokens_per_s"] = round(window.tokens / window.seconds, 1) if window.seconds > 0 else None
        if window.seconds > 0 and window.sequences:
            mean_length = window.tokens / window.sequences
            flops = training_flops(self.backend.module, window.tokens, mean_length, self.flops_params)
            row["mfu"] = float(f"{flops / window.seconds / self.peak:.3g}")  # a tiny model's MFU is small, not 0
        row["skipped_steps"] = self.counters.skipped_steps
        row["train_seconds"] = round(self.clock.seconds(), 3)
        self.log.write(row)
        self.result.history.append(row)
        info = f"loss {row['loss']:.3f}"
        if row["tokens_per_s"]:
            info += f" | {row['tokens_per_s']:,.0f} tok/s | MFU {100 * row.get('mfu', 0):.1f}%"
        tracker.advance(0, info=info)

    def _after_step(self) -> bool:
        """Evaluation, snapshot and checkpoint when due; True when an evaluation ended the run."""
        step, train_cfg = self.counters.step, self.train_cfg
        last = step >= train_cfg.steps or self.progress.over_budget
        eval_due = self._passed("eval") or bool(train_cfg.eval_every and step % train_cfg.eval_every == 0)
        if self.hooks.evaluate and eval_due and not last:  # the last step's evaluation is the final one
            with self.clock.pause():
                evaluated = self._evaluate()
                on_eval = self.hooks.on_eval
                stop = on_eval is not None and dist.any_rank(bool(on_eval(step, evaluated, self.backend.model_state)))
            hit = self._reached_target(evaluated)
            if stop or hit:
                self.result.eval, self.result.stopped = evaluated, "target" if hit else "early_stopping"
                return True
        if self.hooks.on_snapshot is not None and self._passed("snapshot"):
            with self.clock.pause():
                when = {"share": round(self.progress.value, 4), "train_seconds": round(self.clock.seconds(), 3)}
                self.hooks.on_snapshot(step, {**when, "tokens": self.counters.tokens}, self.backend.model_state)
        if train_cfg.checkpoint_every and step % train_cfg.checkpoint_every == 0:
            self._checkpoint()
        return False

    def _final_evaluation(self) -> None:
        if not self.hooks.evaluate:
            return
        with self.clock.pause():
            self.result.eval = self._evaluate()
            self._reached_target(self.result.eval)
            if self.hooks.on_eval is not None:
                self.hooks.on_eval(self.counters.step, self.result.eval, self.backend.model_state)

    # -- pieces ------------------------------------------------------------------------------------------
    def _checkpoint(self) -> Path:
        with self.clock.pause():
            return self.checkpointer.save(self.counters.step, self.backend.model_state())

    def _evaluate(self) -> dict[str, float]:
        """The caller's evaluation in evaluation mode, without gradients, and its row (with the training time and
        tokens it took to get there, for time-to-quality)."""
        assert self.hooks.evaluate is not None
        module = self.backend.eval_module
        was_training = module.training
        module.eval()
        with torch.no_grad():
            metrics = self.hooks.evaluate(module)
        module.train(was_training)
        row = {"step": self.counters.step, **{f"eval_{k}": v for k, v in metrics.items()}}
        self.log.write({**row, "train_seconds": round(self.clock.seconds(), 3), "tokens": self.counters.tokens})
        return metrics

    def _reached_target(self, metrics: dict[str, float]) -> bool:
        """Records the first evaluation at or above `train.target_acc`; the same answer on every rank."""
        target, metric = self.result.target, self.hooks.target_metric
        if target is None or target["reached"]:
            return False
        if metric not in metrics:
            raise BertkitError(f"train.target_acc: the evaluation reports no {metric} to compare with")
        if not dist.any_rank(metrics[metric] >= self.train_cfg.target_acc):
            return False
        target.update(reached=True, value=metrics[metric], step=self.counters.step,
                      train_seconds=round(self.clock.seconds(), 3), tokens=self.counters.tokens)  # fmt: skip
        return True

    def _share(self, kind: str) -> float:
        return self.train_cfg.eval_every_share if kind == "eval" else self.train_cfg.snapshot_every_share

    def _passed(self, kind: str) -> bool:
        """True once per new multiple of the share reached (several passed in one step count once)."""
        marks = _marks(self.progress.value, self._share(kind))
        if marks <= self.marks[kind]:
            return False
        self.marks[kind] = marks
        return True

    def _spent_by_the_first_step(self) -> bool:
        """A fresh run whose budget, which the schedule is laid over, one step used up: nothing to show for it."""
        progress = self.progress
        return progress.shaped and progress.over_budget and self.counters.step == 1 and self.result.resumed_from is None

    def _finish(self) -> TrainResult:
        train_cfg, progress = self.train_cfg, self.progress
        if progress.shaped and self.counters.step >= train_cfg.steps and progress.value < 1.0 and self.main:
            warn(
                f"warning: train.steps={train_cfg.steps} ended the run at {100 * progress.value:.0f}% of --budget "
                f"{train_cfg.budget}, before its schedule finished; raise train.steps (an upper bound under a budget)"
            )
        self.backend.final_weights_into(self.model)
        result = self.result
        result.steps, result.skipped_steps, result.tokens = (
            self.counters.step, self.counters.skipped_steps, self.counters.tokens,
        )  # fmt: skip
        result.flops = self.counters.flops
        result.seconds, result.train_seconds = self.clock.wall(), self.clock.seconds()
        return result


def _marks(progress: float, share: float) -> int:
    """How many multiples of `share` `progress` has passed (0 when shares are off). The small tolerance keeps
    a progress of exactly k x share (steps/train.steps) from missing its mark to rounding."""
    return int(math.floor(progress / share + 1e-9)) if share else 0


def _to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


@contextlib.contextmanager
def _stop_signals() -> Iterator[dict[str, str | None]]:
    """SIGINT/SIGTERM set a flag instead of killing the process; the trainer saves and exits at the next step
    boundary (handlers can only be installed from the main thread)."""
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

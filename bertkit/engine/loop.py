"""The one training loop behind `pretrain`, `distill` and `finetune`.

They differ only in the model, the objective (model, batch -> loss, metrics) and the batch source
(an object with `next_batch()`, `state` and `load_state()`), never in the loop itself.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from bertkit.config.schema import EngineConfig, OptimConfig, ScheduleConfig, TrainConfig
from bertkit.engine.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint
from bertkit.engine.device import autocast, resolve_device
from bertkit.engine.optim import build_optimizer, build_scheduler
from bertkit.errors import BertkitError
from bertkit.progress import Tracker

# After this many non-finite losses in a row the run stops instead of skipping steps forever.
MAX_CONSECUTIVE_NONFINITE = 5


class BatchSource(Protocol):
    state: Any

    def next_batch(self) -> dict[str, torch.Tensor]: ...

    def load_state(self, state: dict[str, int]) -> None: ...


Objective = Callable[[nn.Module, dict[str, torch.Tensor]], tuple[torch.Tensor, dict[str, torch.Tensor]]]
Evaluator = Callable[[nn.Module], dict[str, float]]


@dataclass
class TrainResult:
    steps: int
    history: list[dict[str, float]] = field(default_factory=list)
    eval: dict[str, float] = field(default_factory=dict)
    skipped_steps: int = 0
    seconds: float = 0.0
    tokens: int = 0
    resumed_from: int | None = None

    def first_last(self, key: str) -> tuple[float | None, float | None]:
        values = [row[key] for row in self.history if key in row]
        return (values[0], values[-1]) if values else (None, None)


def _to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


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
) -> TrainResult:
    """Train `model` for `train_cfg.steps` optimizer steps; `source` serves micro-batches of
    `batch_size / grad_accum` sequences. Writes metrics.jsonl and checkpoints under `run_dir`."""
    torch.manual_seed(train_cfg.seed)
    device = resolve_device(engine_cfg)
    model.to(device)
    optimizer = build_optimizer(model, optim_cfg)
    scheduler = build_scheduler(optimizer, train_cfg.steps, schedule_cfg)
    checkpoint_dir = run_dir / "checkpoints"
    result = TrainResult(steps=0)
    step = 0

    # Running sums of the current logging window; part of the checkpoint so a resumed run logs the
    # exact same rows as an uninterrupted one.
    window: dict[str, float] = {}
    window_steps = 0
    existing = list_checkpoints(checkpoint_dir)
    if resume and existing:
        last_step, last_path = existing[-1]
        state = load_checkpoint(last_path, model, optimizer, scheduler)
        source.load_state(state["loader"])
        step, result.skipped_steps, result.tokens = state["step"], state["skipped_steps"], state["tokens"]
        window, window_steps = state["window"], state["window_steps"]
        result.resumed_from = last_step
    metrics_path = run_dir / "metrics.jsonl"
    if result.resumed_from is None and metrics_path.exists():
        metrics_path.unlink()
    elif result.resumed_from is not None:
        _truncate_metrics(metrics_path, step)
        result.history = [row for row in _read_metrics(metrics_path) if "loss" in row]

    def trainer_state() -> dict[str, Any]:
        return {
            "loader": source.state.to_dict(),
            "skipped_steps": result.skipped_steps,
            "tokens": result.tokens,
            "window": window,
            "window_steps": window_steps,
        }

    def checkpoint() -> None:
        save_checkpoint(checkpoint_dir, step, model, optimizer, scheduler, trainer_state(), train_cfg.keep_last)

    consecutive_bad = 0
    window_tokens = 0
    window_start = time.perf_counter()
    started = time.perf_counter()
    model.train()
    with (
        Tracker(description, total=train_cfg.steps, quiet=quiet, unit="steps") as tracker,
        open(metrics_path, "a", encoding="utf-8") as metrics_file,
    ):
        tracker.advance(step)
        while step < train_cfg.steps:
            total_loss = torch.zeros((), device=device)
            step_metrics: dict[str, torch.Tensor] = {}
            step_tokens = 0
            for _ in range(train_cfg.grad_accum):
                batch = _to_device(source.next_batch(), device)
                step_tokens += int(batch["attention_mask"].sum())
                with autocast(device, engine_cfg.precision):
                    loss, metrics = objective(model, batch)
                (loss / train_cfg.grad_accum).backward()
                total_loss += loss.detach() / train_cfg.grad_accum
                for key, value in metrics.items():
                    step_metrics[key] = step_metrics.get(key, 0) + value.detach().float() / train_cfg.grad_accum
            grad_norm = torch.nn.utils.clip_grad_norm_(
                model.parameters(), _clip_value(optim_cfg), error_if_nonfinite=False
            )
            if not (torch.isfinite(total_loss) and torch.isfinite(grad_norm)):
                # Skip the update, keep the weights: one bad batch must not poison the run.
                optimizer.zero_grad(set_to_none=True)
                result.skipped_steps += 1
                consecutive_bad += 1
                if consecutive_bad >= MAX_CONSECUTIVE_NONFINITE:
                    checkpoint()
                    raise BertkitError(
                        f"loss or gradient was NaN/inf for {consecutive_bad} steps in a row at step {step}; "
                        f"stopped, last good state saved in {checkpoint_dir}/step-{step} "
                        "(lower optim.lr, raise schedule.warmup_steps, or use fp32)"
                    )
                continue
            consecutive_bad = 0
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            result.tokens += step_tokens
            window_tokens += step_tokens
            window_steps += 1
            window["loss"] = window.get("loss", 0.0) + float(total_loss)
            for key, value in step_metrics.items():
                window[key] = window.get(key, 0.0) + float(value)
            if step % train_cfg.log_every == 0 or step == train_cfg.steps:
                elapsed = time.perf_counter() - window_start
                row: dict[str, Any] = {"step": step}
                row.update({k: round(v / window_steps, 6) for k, v in window.items()})
                row["lr"] = scheduler.get_last_lr()[0]
                row["grad_norm"] = round(float(grad_norm), 4)
                row["tokens_per_s"] = round(window_tokens / elapsed, 1) if elapsed > 0 else None
                row["skipped_steps"] = result.skipped_steps
                metrics_file.write(json.dumps(row) + "\n")
                metrics_file.flush()
                result.history.append(row)
                window, window_steps, window_tokens, window_start = {}, 0, 0, time.perf_counter()
                tracker.advance(0, info=f"loss {row['loss']:.3f}")
            if evaluate and train_cfg.eval_every and step % train_cfg.eval_every == 0 and step < train_cfg.steps:
                row = {"step": step, **{f"eval_{k}": v for k, v in _run_eval(model, evaluate).items()}}
                metrics_file.write(json.dumps(row) + "\n")
                metrics_file.flush()
            if train_cfg.checkpoint_every and step % train_cfg.checkpoint_every == 0:
                checkpoint()
            tracker.advance(1)
        if evaluate:
            result.eval = _run_eval(model, evaluate)
            metrics_file.write(json.dumps({"step": step, **{f"eval_{k}": v for k, v in result.eval.items()}}) + "\n")
    result.steps = step
    result.seconds = time.perf_counter() - started
    return result


def _clip_value(optim_cfg: OptimConfig) -> float:
    return optim_cfg.grad_clip if optim_cfg.grad_clip > 0 else math.inf


def _run_eval(model: nn.Module, evaluate: Evaluator) -> dict[str, float]:
    was_training = model.training
    model.eval()
    with torch.no_grad():
        metrics = evaluate(model)
    model.train(was_training)
    return metrics


def _read_metrics(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def _truncate_metrics(path: Path, step: int) -> None:
    """On resume, drop rows logged after the checkpoint, so the curve has no duplicate steps."""
    rows = [row for row in _read_metrics(path) if row["step"] <= step]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")

"""`train()`: the one training call of `pretrain`, `distill` and `finetune` (bertkit/engine/trainer.py runs it).

They differ only in the model, the objective and the data source (bertkit/engine/contracts.py), never in the
loop. This module keeps the call its callers make; the trainer's parts are in the modules it names.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from bertkit.config.schema import EngineConfig, OptimConfig, ScheduleConfig, TrainConfig
from bertkit.engine.contracts import DataSource, Evaluator, Objective, OnEval, OnSnapshot
from bertkit.engine.trainer import Hooks, Interrupted, Trainer, TrainResult

__all__ = ["Interrupted", "TrainResult", "train"]


def train(
    model: nn.Module,
    objective: Objective,
    source: DataSource,
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
    warm_only: tuple[str, ...] = (),
    start_from: Path | None = None,
    carry_data: bool = False,
    final_checkpoint: bool = False,
) -> TrainResult:
    """Train `model` for `train_cfg.steps` optimizer steps of `train_cfg.batch_size` sequences over all
    processes; `source` serves micro-batches of `batch_size / grad_accum` sequences (this rank takes its
    share). Rank 0 writes metrics.jsonl and checkpoints under `run_dir`; `resume` continues from its newest
    checkpoint. On return `model` holds the trained weights (on any backend). `train_cfg.target_acc` stops at
    the first evaluation whose `target_metric` reaches it. `warm_only` names the parameters that alone learn during
    the first `train_cfg.head_warmup_steps` steps. `start_from` is another run's checkpoint whose weights and
    optimizer state (and with `carry_data` its data position and random state) a fresh run starts from."""
    hooks = Hooks(evaluate, on_eval, on_snapshot, target_metric, warm_only, start_from, carry_data, final_checkpoint)
    cfg = (train_cfg, optim_cfg, schedule_cfg, engine_cfg)
    return Trainer(model, objective, source, run_dir, cfg, hooks, resume, quiet, description).train()

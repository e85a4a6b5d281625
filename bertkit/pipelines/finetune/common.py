"""What fine-tuning and the distillation task stage share: the epoch plan, best-model keeping and the summary
entries of the loop. `run.py` and bertkit/pipelines/distill import it; it imports neither."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from torch import nn

from bertkit.config.schema import LOWER_IS_BETTER, TrainConfig
from bertkit.engine.checkpoint import list_checkpoints, load_state
from bertkit.engine.dist import is_main
from bertkit.engine.loop import TrainResult
from bertkit.fsutil import save_safetensors_atomic
from bertkit.modelio.weights import read_weights
from bertkit.pipelines.summary import loop_figures

BEST_WEIGHTS = "best.safetensors"  # the best evaluation's weights while training; model/ gets them at the end


def plan_epochs(train_cfg: TrainConfig, examples: int) -> tuple[TrainConfig, int]:
    """With `train.epochs`, the steps they take over `examples` (and an evaluation after each epoch)."""
    steps_per_epoch = math.ceil(examples / train_cfg.batch_size)
    if train_cfg.epochs is not None:
        update: dict[str, Any] = {"steps": train_cfg.epochs * steps_per_epoch}
        if not train_cfg.eval_every:
            update["eval_every"] = steps_per_epoch  # evaluate after each epoch
        train_cfg = train_cfg.model_copy(update=update)
    return train_cfg, steps_per_epoch


class BestModel:
    """The `on_eval` callback: remembers the best evaluation by `metric`, keeps its weights in RUN_DIR, and
    asks the loop to stop after `patience` evaluations without improvement (0: never)."""

    def __init__(self, run_dir: Path, metric: str, patience: int) -> None:
        self.path, self.metric, self.patience = run_dir / BEST_WEIGHTS, metric, patience
        self.sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
        self.best: float | None = None
        self.best_step: int | None = None
        self.best_metrics: dict[str, float] = {}
        self.since_best = 0

    @classmethod
    def start(cls, run_dir: Path, metric: str, patience: int, resumed: bool) -> BestModel:
        """A tracker for this run: a resumed run replays its logged evaluations up to its checkpoint; a fresh
        one removes a stale best-weights file left by an earlier attempt."""
        best = cls(run_dir, metric, patience)
        if resumed:
            checkpoints = list_checkpoints(run_dir / "checkpoints")
            best.replay(run_dir / "metrics.jsonl", checkpoints[-1][0] if checkpoints else 0)
        elif best.path.exists():
            best.path.unlink()
        return best

    @property
    def info(self) -> dict[str, Any] | None:
        """What `bertkit_model.json` and the summary record of the best evaluation."""
        return None if self.best_step is None else {"step": self.best_step, "metric": self.metric, "value": self.best}

    def finish(self, model: nn.Module, last_step: int) -> None:
        """Rank 0, after training: put the best evaluation's weights into `model` (when an earlier evaluation
        beat the last one) and remove the file that kept them."""
        if self.path.is_file():
            if self.best_step != last_step:
                load_state(model, read_weights(self.path), str(self.path))
            self.path.unlink()

    def replay(self, metrics_path: Path, up_to_step: int) -> None:
        """On resume: the evaluations logged up to the checkpoint decide the best so far, if its weights
        were kept (a run that never improved, or lost the file, starts tracking afresh)."""
        if not self.path.is_file() or not metrics_path.is_file():
            return
        for line in metrics_path.read_text("utf-8").splitlines():
            row = json.loads(line) if line.strip() else {}
            if f"eval_{self.metric}" in row and row["step"] <= up_to_step:
                # The evaluation's metrics only (its row also says when: train_seconds, tokens).
                evaluated = {k.removeprefix("eval_"): v for k, v in row.items() if k.startswith("eval_")}
                self._update(row["step"], evaluated)

    def _update(self, step: int, metrics: dict[str, float]) -> bool:
        value = float(metrics[self.metric])
        improved = self.best is None or self.sign * value > self.sign * self.best
        if improved:
            self.best, self.best_step, self.best_metrics, self.since_best = value, step, dict(metrics), 0
        else:
            self.since_best += 1
        return improved

    def __call__(self, step: int, metrics: dict[str, float], snapshot: Any) -> bool:
        if self._update(step, metrics):
            state = snapshot()  # collective: every rank takes it; rank 0 holds the weights
            if is_main() and state:
                save_safetensors_atomic(self.path, state)
        return bool(self.patience) and self.since_best >= self.patience


def training_summary(
    result: TrainResult, best: BestModel | None, train_cfg: TrainConfig, steps_per_epoch: int
) -> dict[str, Any]:
    """The summary entries every fine-tuning task shares: what the loop did, the schedule, and what model/ holds
    (the best evaluation's metrics, or the last one's when none was better)."""
    return {
        **loop_figures(result),
        "epochs": train_cfg.epochs,
        "steps_per_epoch": steps_per_epoch,
        "eval": best.best_metrics if best is not None and best.best_metrics else result.eval,
        "eval_last": result.eval,
        "best": best.info if best is not None else None,
    }

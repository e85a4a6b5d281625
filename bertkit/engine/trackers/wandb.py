"""Weights & Biases: one run per job through `wandb.init`, which reads W&B's own settings from the environment
(WANDB_PROJECT, WANDB_ENTITY, WANDB_MODE=offline, WANDB_API_KEY, WANDB_DIR, WANDB_BASE_URL, ...).

The run's files go under WANDB_DIR when it is set, else into the run directory (beside metrics.jsonl), so that
an offline run travels with the job that made it (`wandb sync RUN_DIR/wandb/offline-run-*` uploads it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bertkit.engine.trackers.base import RunInfo


class WandbBackend:
    name = "wandb"

    def __init__(self, info: RunInfo, saved: dict[str, str] | None) -> None:
        import wandb

        self.wandb = wandb
        run_id = saved.get("run_id") if saved else None
        self.run = wandb.init(
            project=info.experiment,  # None: WANDB_PROJECT, else W&B's own default
            name=info.name,
            id=run_id,
            resume="allow" if run_id else None,
            dir=None if os.environ.get("WANDB_DIR") else str(info.run_dir),
            config=info.params,
            tags=[f"{key}:{value}" for key, value in info.tags.items()],
            job_type=info.tags.get("command"),
            group=info.parent.get("wandb"),
            reinit="create_new",  # compress's stages each open a run of their own in one process
            # console="off": W&B must not wrap stdout, whose last line is the --json result.
            settings=wandb.Settings(console="off", silent=True, x_disable_stats=True, save_code=False),
        )
        # A resumed run continues after the last step it holds: the killed attempt's rows are not logged twice.
        self.first_step = int(self.run.step) if run_id else 0
        self.log_model = info.log_model

    def ids(self) -> dict[str, str]:
        return {"run_id": self.run.id, "project": str(self.run.project)}

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        if step >= self.first_step:
            self.run.log(metrics, step=step)

    def finish(self, summary: dict[str, Any], model_dir: Path | None) -> None:
        self.run.summary.update({f"summary/{k}": v for k, v in _flat(summary).items()})
        if self.log_model and model_dir is not None and model_dir.is_dir():
            artifact = self.wandb.Artifact(f"{self.run.id}-model", type="model")
            artifact.add_dir(str(model_dir))
            self.run.log_artifact(artifact)
        self.run.finish(exit_code=0)

    def abort(self, status: str) -> None:
        self.run.finish(exit_code=1 if status == "FAILED" else 130)


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = value
    return out

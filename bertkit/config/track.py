"""The `track` section of every training recipe: which experiment trackers a run reports to.

Only what the recipe needs lives here (which trackers, the experiment/project and run names, whether to upload
the final model); where a tracker stores its runs stays the tracker's own configuration, read from its own
environment variables (MLFLOW_TRACKING_URI, WANDB_PROJECT, WANDB_MODE, ...), see bertkit/engine/tracking.py.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from bertkit.config.schema import StrictModel

Tracker = Literal["tensorboard", "mlflow", "wandb"]
TRACKERS: tuple[str, ...] = ("tensorboard", "mlflow", "wandb")


class TrackConfig(StrictModel):
    """Experiment trackers the run reports to (their own environment variables say where)."""

    # Off by default: a tracker is a service (or files) the user chose, never something a run starts on its own.
    report_to: list[Tracker] = Field(default_factory=list, description="trackers: tensorboard, mlflow, wandb")
    # None: the tracker's own default (MLFLOW_EXPERIMENT_NAME / WANDB_PROJECT, else the recipe's name).
    experiment: str | None = Field(None, description="MLflow experiment / W&B project name")
    run_name: str | None = Field(None, description="the run's display name (default: the run directory's name)")
    log_model: bool = Field(False, description="upload the final model directory as an artifact")

    @field_validator("report_to", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        """`--set track.report_to=mlflow,wandb` and a YAML list mean the same; duplicates are dropped."""
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, list):
            value = list(dict.fromkeys(value))
        return value

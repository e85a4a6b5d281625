"""What bertkit/engine/tracking.py and every tracker module share: what a tracker is told when its run opens
(`RunInfo`), and the calls a tracker answers (`Backend`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass
class RunInfo:
    """What a tracker is told about the job when its run opens."""

    run_dir: Path
    name: str
    experiment: str | None
    params: dict[str, str]
    tags: dict[str, str]
    resumed: bool
    log_model: bool
    parent: dict[str, str] = field(default_factory=dict)  # tracker -> the parent run's id (compress's stages)


class Backend(Protocol):
    name: str

    def ids(self) -> dict[str, str]: ...

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None: ...

    def finish(self, summary: dict[str, Any], model_dir: Path | None) -> None: ...

    def abort(self, status: str) -> None: ...

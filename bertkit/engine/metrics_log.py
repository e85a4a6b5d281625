"""metrics.jsonl (and TensorBoard's event files, and the run's trackers): the rows a run logs, rank 0 only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class MetricsLog:
    """Rank 0 appends one JSON row per log step or evaluation, forwards it to MLflow/W&B (queued, never blocking
    a step; bertkit/engine/tracking.py) and to TensorBoard. Other ranks hold a log that writes nothing."""

    def __init__(self, run_dir: Path, main: bool, tensorboard: bool) -> None:
        self.path, self.main, self.tensorboard = run_dir / "metrics.jsonl", main, tensorboard
        self.file: Any = None
        self.writer: TensorBoardCurves | None = None

    def open(self, resumed_step: int | None, last_step: int) -> list[dict[str, Any]]:
        """Start the log: a fresh run's from nothing; a resumed run's cut back to its checkpoint, so the curve has
        no duplicate steps. Returns the training rows already logged (rank 0)."""
        if not self.main:
            return []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        rows: list[dict[str, Any]] = []
        if resumed_step is None:
            self.path.unlink(missing_ok=True)
        else:
            rows = [row for row in read_rows(self.path) if _kept(row, resumed_step, last_step)]
            self.path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        if self.tensorboard:
            self.writer = tensorboard_writer(self.path.parent, rows, resumed_step)
        self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())
        return [row for row in rows if "loss" in row]

    def write(self, row: dict[str, Any]) -> None:
        if self.file is None:
            return
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()
        from bertkit.engine import tracking

        tracking.log_row(self.path.parent, row)
        if self.writer is not None:
            self.writer.add(row)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        if self.writer is not None:
            self.writer.close()
        self.file = self.writer = None


def _kept(row: dict[str, Any], step: int, last_step: int) -> bool:
    """A row logged up to the checkpoint. A checkpoint at the last step comes before the final evaluation, which
    the resumed run writes again."""
    final_eval = row["step"] >= last_step and "loss" not in row
    return row["step"] < step or (row["step"] == step and not final_eval)


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def tensorboard_writer(run_dir: Path, rows: list[dict[str, Any]], resumed_step: int | None) -> TensorBoardCurves:
    """TensorBoard's event files under RUN_DIR/tensorboard for a run starting afresh (`resumed_step` None) or from
    the checkpoint at `resumed_step` with `rows` kept in metrics.jsonl. Without the tensorboard package (an
    optional dependency), the one line that says so."""
    from bertkit.engine.tracking import require

    require(["tensorboard"])
    return TensorBoardCurves(run_dir / "tensorboard", rows, resumed_step)


class TensorBoardCurves:
    """metrics.jsonl's numbers as TensorBoard scalars, one tag per key, each key once per step (an evaluation's
    row may repeat a figure of its step's training row), as the trackers log them.

    A resumed run opens a new event file that purges every point from its checkpoint's step on (TensorBoard's
    `purge_step`, which its reader applies: the stopped attempt's points past the checkpoint, and a final
    evaluation the run makes again), then logs again the kept rows of that step, which the resumed run does not
    log anew: the curves hold exactly the rows of metrics.jsonl (since the first attempt with event files)."""

    def __init__(self, folder: Path, rows: list[dict[str, Any]], resumed_step: int | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(folder), purge_step=resumed_step)
        self.sent: dict[str, int] = {}
        for row in rows:
            if resumed_step is not None and row["step"] >= resumed_step:
                self.add(row)
            else:  # still in the earlier event files
                self.sent.update((key, int(row["step"])) for key, _ in _scalars(row))

    def add(self, row: dict[str, Any]) -> None:
        step = int(row["step"])
        for key, value in _scalars(row):
            if step > self.sent.get(key, -1):
                self.writer.add_scalar(key, value, step)
                self.sent[key] = step

    def close(self) -> None:
        self.writer.close()


def _scalars(row: dict[str, Any]) -> list[tuple[str, float]]:
    return [
        (key, value)
        for key, value in row.items()
        if key != "step" and isinstance(value, int | float) and not isinstance(value, bool)
    ]

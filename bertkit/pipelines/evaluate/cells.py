"""One cell of a suite: a (model, task, learning rate, seed) fine-tuning run in its own directory, whose
`result.json` is written atomically when it ends. A cell with a result is done (or failed, with its error) and is
never run again by `--resume`; a cell without one (killed half-way) runs again from scratch."""

from __future__ import annotations

import os
import shutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError
from bertkit.fsutil import read_json, write_json_atomic

RESULT = "result.json"
RUN = "run"


@dataclass(frozen=True)
class CellSpec:
    """Everything a worker process needs to run one cell (picklable)."""

    model: str  # the model's key in the plan
    task: str
    lr: float
    seed: int
    directory: Path
    recipe: str
    overrides: tuple[str, ...]
    train: Path | None  # None: the model is scored as it is (a zero-shot retrieval or similarity task)
    eval: Path
    extra_eval: dict[str, Path] = field(default_factory=dict)
    keep_model: bool = False  # a warm start's source keeps its weights; other cells drop them when done
    model_dir: Path | None = None  # None for a warm-started cell until its source task is done
    warm_error: str | None = None  # why a warm-started cell has no model to start from
    required: tuple[str, ...] = ()  # the metrics the report needs of this cell (ranking and score)

    @property
    def result_path(self) -> Path:
        return self.directory / RESULT

    @property
    def saved_model(self) -> Path:
        return self.directory / RUN / "model"


def cell_name(lr: float, seed: int) -> str:
    return f"lr{lr:g}-seed{seed}"


def read_result(spec: CellSpec) -> dict[str, Any] | None:
    return read_json(spec.result_path, "cell result") if spec.result_path.is_file() else None


def run_cell(spec: CellSpec) -> dict[str, Any]:
    """Fine-tune one cell, score any extra dev sets, write its result; a failure is a result too."""
    from bertkit.config.recipe import load_recipe
    from bertkit.pipelines.finetune.run import finetune
    from bertkit.pipelines.finetune.score import score_as_is, score_sequence_model

    start = time.perf_counter()
    run_dir = spec.directory / RUN
    result: dict[str, Any] = {"model": spec.model, "task": spec.task, "lr": spec.lr, "seed": spec.seed,
                              "start_from": str(spec.model_dir) if spec.model_dir else None}  # fmt: skip
    try:
        if spec.model_dir is None:
            raise BertkitError(spec.warm_error or "no model to fine-tune")
        recipe = load_recipe(spec.recipe, list(spec.overrides), kind="finetune")
        if spec.train is None:  # zero-shot: the model as it is, on the dev set
            metrics, steps, best = score_as_is(spec.model_dir, spec.eval, recipe), 0, None  # type: ignore[arg-type]
        else:
            summary = finetune(recipe, spec.model_dir, spec.train, run_dir, spec.eval, overwrite=True, quiet=True)  # type: ignore[arg-type]
            metrics = dict(summary.eval or {})
            for name, path in spec.extra_eval.items():
                extra = score_sequence_model(Path(str(summary.model_dir)), path, recipe)  # type: ignore[arg-type]
                metrics.update({f"{name}_{key}": value for key, value in extra.items() if key != "examples"})
            steps, best = summary.steps, summary.best
        missing = [name for name in spec.required if name not in metrics]
        if missing:
            raise BertkitError(f"the run reported no {', '.join(missing)} (it has {', '.join(sorted(metrics))})")
        result.update(status="done", metrics=metrics, steps=steps, best=best)
    except BertkitError as err:
        result.update(status="failed", error=str(err))
    except Exception as err:  # a bug or a broken environment: recorded with its traceback, and the suite goes on
        result.update(status="failed", error=f"{type(err).__name__}: {err}", traceback=traceback.format_exc())
    result["seconds"] = round(time.perf_counter() - start, 1)
    if "CUDA_VISIBLE_DEVICES" in os.environ:  # the GPU a --devices worker ran it on
        result["visible_devices"] = os.environ["CUDA_VISIBLE_DEVICES"]
    # Only what the report and a warm start need stays: checkpoints always go, weights unless a task starts from them.
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    if not spec.keep_model:
        shutil.rmtree(run_dir / "model", ignore_errors=True)
    spec.directory.mkdir(parents=True, exist_ok=True)
    write_json_atomic(spec.result_path, result)
    return result


def init_worker(threads: int, devices: Any) -> None:
    """A worker process of `--jobs`: its share of the CPU threads, and with `--devices` one GPU of its own, taken
    from the shared queue before torch first touches CUDA."""
    if devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(devices.get())
    import torch

    torch.set_num_threads(max(1, threads))

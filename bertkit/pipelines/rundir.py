"""The run directory shared by pretrain and finetune: resolved recipe, metrics, checkpoints, model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bertkit.engine.checkpoint import list_checkpoints
from bertkit.errors import BertkitError
from bertkit.fsutil import check_output_dir, write_json_atomic


def prepare_run_dir(output: Path, recipe: Any, overwrite: bool, resume: bool) -> None:
    """Create the run directory. With `resume`, an existing run is continued; otherwise it must be new
    (or `overwrite` given, which deletes it first). Under a distributed engine rank 0 does it, and the
    other ranks raise the same error if it fails."""
    engine = getattr(recipe, "engine", None)
    if engine is None or engine.backend == "single":
        _prepare_run_dir(output, recipe, overwrite, resume)
        return
    from bertkit.engine import dist
    from bertkit.engine.device import resolve_device

    dist.init_process_group(resolve_device(engine))
    error = None
    if dist.is_main():
        try:
            _prepare_run_dir(output, recipe, overwrite, resume)
        except BertkitError as err:
            error = str(err)
    error = dist.broadcast_object(error)
    if error:
        raise BertkitError(error)


def _prepare_run_dir(output: Path, recipe: Any, overwrite: bool, resume: bool) -> None:
    import shutil

    if resume:
        if not list_checkpoints(output / "checkpoints"):
            raise BertkitError(
                f"--resume: {output} has no checkpoint to resume from (set train.checkpoint_every to write some)"
            )
    else:
        check_output_dir(output, overwrite)
        if output.exists() and overwrite:
            shutil.rmtree(output)
    output.mkdir(parents=True, exist_ok=True)
    (output / "recipe.yaml").write_text(yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False), "utf-8")


def write_summary(output: Path, summary: dict[str, Any]) -> None:
    from bertkit.engine.dist import is_main

    if not is_main():  # only rank 0 writes run files
        return
    write_json_atomic(output / "summary.json", summary)

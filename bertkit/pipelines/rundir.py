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
    (or `overwrite` given, which deletes it first)."""
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
    write_json_atomic(output / "summary.json", summary)

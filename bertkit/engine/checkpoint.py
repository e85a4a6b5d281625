"""Checkpoints: safetensors weights + JSON state + a weights-only torch file for optimizer and RNG state.

Each checkpoint is written to a temporary folder and renamed, so a crash mid-write never leaves a
`step-N/` that looks complete, and never damages an older one. Nothing here unpickles arbitrary
objects: optimizer state is loaded with `weights_only=True`.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.errors import BertkitError
from bertkit.fsutil import read_json, save_safetensors, write_json_atomic
from bertkit.modelio.weights import WEIGHTS, read_weights

TRAINING_STATE = "training_state.pt"
TRAINER_JSON = "trainer_state.json"
_STEP_DIR = re.compile(r"^step-(\d+)$")


def load_state(model: nn.Module, tensors: dict[str, torch.Tensor], source: str, strict: bool = True) -> None:
    """Load tensors into `model`, with one clear line for missing/unexpected keys or wrong shapes."""
    own = model.state_dict()
    wrong = [
        f"{k} {tuple(v.shape)} vs {tuple(own[k].shape)}"
        for k, v in tensors.items()
        if k in own and own[k].shape != v.shape
    ]
    if wrong:
        raise BertkitError(
            f"{source} does not fit this model: shape of {wrong[0]} expected"
            f"{f' (and {len(wrong) - 1} more)' if len(wrong) > 1 else ''}"
        )
    missing = sorted(set(own) - set(tensors))
    unexpected = sorted(set(tensors) - set(own))
    if strict and (missing or unexpected):
        raise BertkitError(f"{source} does not fit this model: missing {missing[:3]}, unexpected {unexpected[:3]}")
    model.load_state_dict(tensors, strict=False)


def load_weights(model: nn.Module, path: Path, strict: bool = True) -> None:
    load_state(model, read_weights(path), str(path), strict)


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()]
    return sorted(found)


def save_checkpoint(
    directory: Path,
    step: int,
    model_state: dict[str, torch.Tensor],
    training_state: dict[str, Any],
    trainer_state: dict[str, Any],
    keep_last: int,
    keep_every: int = 0,
) -> Path:
    """Write `step-N/` (called on rank 0 only). Built under `.step-N.tmp` and renamed, so a crash or a
    full disk never leaves a checkpoint that looks complete, and never touches an older one."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"step-{step}"
    tmp = directory / f".step-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        tensors = {k: v.detach().cpu().contiguous() for k, v in model_state.items()}
        save_safetensors(tensors, tmp / WEIGHTS, metadata={"format": "pt", "producer": "bertkit"})
        torch.save(training_state, tmp / TRAINING_STATE)
        write_json_atomic(tmp / TRAINER_JSON, {"step": step, **trainer_state})
        if final.exists():
            # Same step saved twice (e.g. a signal right after a periodic save): swap, never delete first.
            aside = directory / f".step-{step}.old"
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(final, aside)
            os.replace(tmp, final)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        kept = [p.name for _, p in list_checkpoints(directory)]
        raise BertkitError(
            f"could not write checkpoint step-{step} in {directory}: {err.strerror or err}; "
            f"existing checkpoints are untouched ({', '.join(kept) or 'none'}); free space and --resume"
        ) from None
    for old_step, old in list_checkpoints(directory)[:-keep_last]:
        if not (keep_every and old_step % keep_every == 0):
            shutil.rmtree(old, ignore_errors=True)
    return final


def read_checkpoint(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any], dict[str, Any]]:
    """Model weights, training state (optimizer, scheduler, RNG; weights-only load) and trainer state."""
    trainer_state = read_json(path / TRAINER_JSON, "checkpoint trainer state")
    model_state = read_weights(path / WEIGHTS)
    try:
        training_state = torch.load(path / TRAINING_STATE, map_location="cpu", weights_only=True)
    except Exception as err:
        raise BertkitError(f"checkpoint {path} is damaged or incompatible: {str(err).splitlines()[0]}") from None
    if not isinstance(training_state, dict) or "optimizer" not in training_state or "step" not in trainer_state:
        raise BertkitError(f"checkpoint {path} is damaged or incompatible: training state is incomplete")
    return model_state, training_state, trainer_state

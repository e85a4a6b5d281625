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
from safetensors.torch import load_file, save_file
from torch import nn

from bertkit.errors import BertkitError
from bertkit.fsutil import read_json, write_json_atomic

WEIGHTS = "model.safetensors"
TRAINING_STATE = "training_state.pt"
TRAINER_JSON = "trainer_state.json"
_STEP_DIR = re.compile(r"^step-(\d+)$")


def save_weights(model: nn.Module, path: Path, prefix: str = "") -> None:
    """Save the state dict (contiguous CPU copies) as safetensors, via a temporary name."""
    tensors = {prefix + k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    tmp = path.with_name(f".{path.name}.tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt", "producer": "bertkit"})
    os.replace(tmp, path)


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise BertkitError(f"weights not found: {path}")
    try:
        return load_file(str(path))
    except Exception as err:  # safetensors raises plain errors on a corrupt or truncated file
        raise BertkitError(f"cannot read {path}: {str(err).splitlines()[0]}") from None


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
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    trainer_state: dict[str, Any],
    keep_last: int,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"step-{step}"
    tmp = directory / f".step-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_weights(model, tmp / WEIGHTS)
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    torch.save(
        {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": rng}, tmp / TRAINING_STATE
    )
    write_json_atomic(tmp / TRAINER_JSON, {"step": step, **trainer_state})
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for _, old in list_checkpoints(directory)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any) -> dict[str, Any]:
    """Restore model, optimizer, scheduler and RNG; return the trainer state (step, loader position...)."""
    load_weights(model, path / WEIGHTS)
    try:
        state = torch.load(path / TRAINING_STATE, map_location="cpu", weights_only=True)
    except Exception as err:
        raise BertkitError(f"checkpoint {path} is damaged or incompatible: {str(err).splitlines()[0]}") from None
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"]["torch"])
    if "cuda" in state["rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    return read_json(path / TRAINER_JSON, "trainer state")

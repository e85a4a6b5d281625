"""Model weights on disk: one safetensors file (`model.safetensors`), written under a temporary name and renamed,
and read back with one clear error for a missing, corrupt or truncated file. Model directories
(bertkit/modelio/modeldir.py), Hugging Face checkpoints (bertkit/modelio/hf_dir.py) and training checkpoints
(bertkit/engine/checkpoint.py) all go through it."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

from bertkit.errors import BertkitError
from bertkit.fsutil import save_safetensors_atomic

WEIGHTS = "model.safetensors"


def save_weights(model: nn.Module | dict[str, torch.Tensor], path: Path, prefix: str = "") -> None:
    """Save a module's state dict, or a state dict, (contiguous CPU copies) as safetensors, via a temporary name."""
    state = model.state_dict() if isinstance(model, nn.Module) else model
    save_safetensors_atomic(path, {prefix + k: v for k, v in state.items()}, {"format": "pt", "producer": "bertkit"})


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise BertkitError(f"weights not found: {path}")
    try:
        return load_file(str(path))
    except Exception as err:  # safetensors raises plain errors on a corrupt or truncated file
        raise BertkitError(f"cannot read {path}: {str(err).splitlines()[0]}") from None

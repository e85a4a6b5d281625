"""Saving and restoring a run's state as one table of named parts (bertkit/engine/state.py).

A checkpoint is `step-N/`: the model's weights (safetensors), the tensor parts in training_state.pt (weights-only
torch file, one entry per part: optimizer, scheduler, scaler, rng) and the other parts in trainer_state.json. Each
JSON part owns its keys there (flat, so the file reads as it always has); the parts are restored in the order they
were added, so a part may read the ones before it (the budget reads the counters and the clock).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any, Protocol

import torch

from bertkit.engine import dist
from bertkit.engine.checkpoint import list_checkpoints, read_checkpoint, save_checkpoint
from bertkit.engine.state import Mismatch
from bertkit.errors import BertkitError


class Part(Protocol):
    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> None: ...


class Checkpointer:
    def __init__(self, directory: Path, keep_last: int, main: bool, keep_every: int = 0) -> None:
        self.directory, self.keep_last, self.main, self.keep_every = directory, keep_last, main, keep_every
        self.records: dict[str, Part] = {}  # -> trainer_state.json
        self.tensors: dict[str, Part] = {}  # -> training_state.pt

    def add(self, name: str, part: Part, tensors: bool = False) -> None:
        (self.tensors if tensors else self.records)[name] = part

    def latest(self) -> tuple[int, Path] | None:
        found = list_checkpoints(self.directory)
        return found[-1] if found else None

    def read(self, path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any], dict[str, Any]]:
        """(weights, tensor parts' states, trainer_state.json) of `path`."""
        return read_checkpoint(path)

    def save(self, step: int, model_state: dict[str, torch.Tensor]) -> Path:
        """Collective: every rank gives its share of the tensor parts (sharded optimizer state, RNG states); rank 0
        writes; a write error stops every rank with the same line."""
        tensors = {name: part.state_dict() for name, part in self.tensors.items()}
        error = None
        if self.main:
            records = {key: value for part in self.records.values() for key, value in part.state_dict().items()}
            try:
                save_checkpoint(self.directory, step, model_state, tensors, records, self.keep_last, self.keep_every)
            except BertkitError as err:
                error = str(err)
        error = dist.broadcast_object(error)
        if error:
            raise BertkitError(error)
        return self.directory / f"step-{step}"

    def restore(self, path: Path, tensors: dict[str, Any], records: dict[str, Any],
                only: Collection[str] | None = None) -> None:  # fmt: skip
        """Every part from a checkpoint read with `read` (the weights go into the model before the engine wraps
        it; this restores the rest, after), or the parts named in `only` (a decay from another run's checkpoint
        takes its optimizer state, not its counters or schedule)."""
        try:
            for name, part in self.records.items():
                if only is None or name in only:
                    part.load_state_dict(records)
            for name, part in self.tensors.items():
                if only is None or name in only:
                    part.load_state_dict(tensors.get(name))
        except Mismatch as err:
            raise BertkitError(f"checkpoint {path} {err}") from None
        except (KeyError, ValueError, RuntimeError, IndexError) as err:
            raise BertkitError(
                f"checkpoint {path} does not fit this optimizer/model: {str(err).splitlines()[0]}"
            ) from None

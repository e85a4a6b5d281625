"""The teacher-output cache of the task stage's prediction phase.

The prediction phase's targets are the teacher's logits of each training example, which never change:
the teacher is frozen and in eval mode. So they are computed once, in one batched pass, and the phase
reads them with its batches instead of running the teacher every step (on augmented data that pass is
most of the phase's time). The file is keyed by what the logits depend on: the teacher's weights and
configuration, and the exact token ids (and segment ids) of every example. Another teacher or other data
gives another key, so another file, computed anew; the same key is a hit, so a resumed or repeated run
reads the very same targets. A file whose checksum no longer matches its contents is an error, never
silently trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from bertkit.errors import BertkitError
from bertkit.fsutil import save_safetensors
from bertkit.progress import Tracker


def teacher_fingerprint(teacher: torch.nn.Module) -> str:
    """sha256 over the teacher's configuration, classifier pooling and every tensor of its state dict."""
    digest = hashlib.sha256()
    config = getattr(teacher, "config", None)
    digest.update(json.dumps(config.model_dump(mode="json") if config is not None else {}, sort_keys=True).encode())
    digest.update(str(getattr(teacher, "pool", "cls")).encode())
    for key, value in sorted(teacher.state_dict().items()):
        digest.update(key.encode())
        digest.update(value.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()


def examples_fingerprint(input_ids: list[np.ndarray], token_type_ids: list[np.ndarray] | None) -> str:
    digest = hashlib.sha256()
    for rows in (input_ids, token_type_ids or []):
        for row in rows:
            digest.update(np.asarray(row, dtype=np.int64).tobytes())
            digest.update(b"|")
        digest.update(b"#")
    return digest.hexdigest()


def _checksum(logits: torch.Tensor) -> str:
    return hashlib.sha256(logits.contiguous().numpy().tobytes()).hexdigest()


class TeacherLogitsCache:
    """`cache_dir/teacher-logits-<key>.safetensors`: the fp32 logits, (N, C) of sequences or (N, T, C) of
    tokens and QA windows padded to the longest, and, in its metadata, the key and the checksum of the logits."""

    def __init__(self, cache_dir: Path, teacher_key: str, data_key: str) -> None:
        self.key = hashlib.sha256(f"{teacher_key}:{data_key}".encode()).hexdigest()
        self.path = Path(cache_dir) / f"teacher-logits-{self.key[:16]}.safetensors"

    def load(self, expected_rows: int) -> torch.Tensor | None:
        """The cached logits, None on a miss; a corrupt or foreign file is one error naming the fix."""
        if not self.path.exists():
            return None
        fix = f"delete {self.path} (it is rebuilt from the teacher) or run with --overwrite"
        try:
            from safetensors import safe_open

            with safe_open(str(self.path), "pt") as handle:
                meta = handle.metadata() or {}
            logits = load_file(str(self.path))["logits"]
        except (SafetensorError, OSError, KeyError, ValueError) as err:
            raise BertkitError(f"the teacher-output cache {self.path} cannot be read ({err}); {fix}") from None
        if meta.get("key") != self.key:
            raise BertkitError(f"the teacher-output cache {self.path} belongs to another teacher or data set; {fix}")
        if logits.ndim not in (2, 3) or logits.shape[0] != expected_rows or meta.get("sha256") != _checksum(logits):
            raise BertkitError(f"the teacher-output cache {self.path} is corrupt (its checksum does not match); {fix}")
        return logits

    def save(self, logits: torch.Tensor) -> None:
        """Written under a temporary name, then renamed: a killed run never leaves a half-written cache."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        logits = logits.float().contiguous().cpu()
        fd, name = tempfile.mkstemp(prefix=f".{self.path.name}.tmp-", dir=self.path.parent)
        os.close(fd)
        try:
            save_safetensors({"logits": logits}, name, metadata={"key": self.key, "sha256": _checksum(logits)})
            os.replace(name, self.path)
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise


def compute_teacher_logits(
    logits_of: Callable[[dict[str, torch.Tensor]], torch.Tensor],
    batches: Any,
    lengths: list[int],
    batch_size: int,
    device: torch.device,
    quiet: bool,
) -> torch.Tensor:
    """The teacher's logits (`logits_of(batch)`, a task kind's layout) of examples 0..N-1 (`lengths`: their
    token counts), in order, `batch_size` at a time (sorted by length, so that little of each batch is
    padding), as fp32 on the CPU. Per-token logits are padded to the longest example with zeros, which no
    target reads (task_kinds.py cuts and masks them)."""
    count = len(lengths)
    order = np.argsort(np.asarray(lengths), kind="stable")
    out: torch.Tensor | None = None
    with Tracker("teacher logits", total=count, quiet=quiet, unit="examples") as tracker:
        for start in range(0, count, batch_size):
            indices = order[start : start + batch_size].tolist()
            batch = {k: v.to(device) for k, v in batches.batch_of(indices).items()}
            logits = logits_of(batch).float().cpu()
            if out is None:  # the layout is known from the first batch: (N, C), or (N, longest, C)
                tail = logits.shape[1:] if logits.ndim == 2 else (max(lengths), *logits.shape[2:])
                out = torch.zeros((count, *tail), dtype=torch.float32)
            if logits.ndim == 2:
                out[indices] = logits
            else:
                out[indices, : logits.shape[1]] = logits
            tracker.advance(len(indices))
    if out is None:
        raise BertkitError("no training examples to compute the teacher's logits of")
    return out

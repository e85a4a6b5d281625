"""What `bertkit predict` shares across tasks: where predictions go, the device to run on and the window
length. `predict.py` (sequence and token tasks, and the dispatch on the model's architecture) and
`predict_qa.py` import it; it imports neither."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import torch

from bertkit.config.schema import ModelConfig


@contextlib.contextmanager
def jsonl_sink(output: Path | None) -> Iterator[IO[str]]:
    """Where predictions go: stdout (`None` or `-`), or a temporary file beside `output` that is renamed to
    it only when the block ends without an error, so an interrupted run leaves nothing that looks complete."""
    if output is None or str(output) == "-":
        yield sys.stdout
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{output.name}.tmp-", dir=output.parent)
    tmp = Path(name)
    sink = os.fdopen(fd, "w", encoding="utf-8")
    try:
        yield sink
    except BaseException:
        sink.close()
        tmp.unlink(missing_ok=True)
        raise
    sink.close()
    os.replace(tmp, output)


def inference_device(device: str) -> torch.device:
    """`auto` is the GPU when there is one, else the CPU; `cpu` and `cuda` are taken as given."""
    return torch.device("cuda" if device == "auto" and torch.cuda.is_available() else device.replace("auto", "cpu"))


def window_length(cfg: ModelConfig, task: dict[str, Any], max_seq_len: int | None) -> int:
    """Tokens per input: --max-seq-len, else what the model was fine-tuned with, never more than its positions."""
    limit = cfg.max_position_embeddings - cfg.position_offset
    return min(max_seq_len or task.get("max_seq_len") or limit, limit)

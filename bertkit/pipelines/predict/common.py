"""What `bertkit predict` shares across tasks: the model to run (a bertkit model in PyTorch, or an ONNX export in
ONNX Runtime behind the same call), where predictions go, the device and threads to run on. `run.py` (sequence
and token tasks, and the dispatch on the model's architecture), `qa.py`, `speed.py` and bertkit/pipelines/embed.py
import it; it imports none of them. The task architectures, building a fine-tuned model from its weights and the
window length are bertkit/tasks/architectures.py's, which the ONNX export shares."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

from bertkit.config.model import ModelConfig, saved_model_config
from bertkit.config.task_kinds import HEADED_ARCHITECTURES
from bertkit.errors import BertkitError
from bertkit.tasks.architectures import build_task_model
from bertkit.tokenizers.base import Tokenizer


@dataclass
class InferenceModel:
    """A model ready to run: `model(input_ids, attention_mask, token_type_ids)` returns the outputs of the task's
    torch module (`logits`, or `start_logits`/`end_logits`) whichever back-end answers it."""

    model_dir: Path
    meta: dict[str, Any]
    cfg: ModelConfig
    tokenizer: Tokenizer
    model: Any  # an nn.Module in eval mode on `device`, or an OnnxRunner
    device: torch.device
    backend: str  # "pytorch" or "onnxruntime"


def load_task_model(model_path: Path, device: str = "auto", threads: int = 0) -> InferenceModel:
    """A fine-tuned model for `predict`: a bertkit/HF model directory (PyTorch on `device`) or an ONNX export
    (ONNX Runtime on the CPU, `threads` intra-op threads), recognised by its metadata."""
    from bertkit.modelio.modeldir import load_model_dir, onnx_export_dir

    onnx_dir = onnx_export_dir(model_path)
    if onnx_dir is not None:
        loaded = load_onnx_export(onnx_dir, threads)
        architecture = loaded.meta.get("architecture")
    else:
        model_dir, meta, cfg, weights, tokenizer = load_model_dir(model_path)
        architecture = meta.get("architecture")
        if architecture in HEADED_ARCHITECTURES:
            target = inference_device(device)
            model = build_task_model(architecture, meta, cfg, weights, str(model_dir)).to(target)
            loaded = InferenceModel(model_dir, meta, cfg, tokenizer, model, target, "pytorch")
    if architecture not in HEADED_ARCHITECTURES and onnx_dir is None and meta.get("embedding"):
        raise BertkitError(f"{model_path} is a bi-encoder: it predicts by searching a corpus, so give predict a "
                           "--corpus (a BEIR folder or text lines); `bertkit embed` gives its vectors")  # fmt: skip
    if architecture not in HEADED_ARCHITECTURES:
        raise BertkitError(
            f"{onnx_dir or model_path} is a {architecture} model without a task head; predict needs a run of "
            "`bertkit finetune` (or its ONNX export)"
        )
    return loaded


def load_onnx_export(onnx_dir: Path, threads: int = 0) -> InferenceModel:
    """An ONNX export's session, metadata, model configuration and tokenizer."""
    from bertkit.export.onnx_runtime import ONNX_GRAPH, OnnxRunner
    from bertkit.fsutil import read_json
    from bertkit.modelio.modeldir import MODEL_META
    from bertkit.tokenizers.base import load_tokenizer

    meta = read_json(onnx_dir / MODEL_META, "model metadata")
    try:
        cfg = saved_model_config(meta["model"])
    except Exception as err:
        raise BertkitError(f"{onnx_dir / MODEL_META} has an invalid model section: {err}") from None
    if not (onnx_dir / ONNX_GRAPH).is_file():
        raise BertkitError(f"{onnx_dir} has ONNX metadata but no {ONNX_GRAPH}; export the model again")
    runner = OnnxRunner(onnx_dir / ONNX_GRAPH, threads)
    return InferenceModel(onnx_dir, meta, cfg, load_tokenizer(onnx_dir), runner, torch.device("cpu"), "onnxruntime")


@contextlib.contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """torch's CPU threads set to `threads` (0: left as they are) for the block, then restored: a library call
    leaves the process as it found it."""
    if threads < 0:
        raise BertkitError(f"--threads must be 0 (the library's default) or more, not {threads}")
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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
    """`--device` (auto, cpu or cuda): `auto` is the GPU when there is one, else the CPU; `cuda` only where torch
    sees a GPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise BertkitError("--device cuda but no GPU is available; use --device auto or cpu")
    return torch.device(device)

"""`bertkit embed`: sentence embeddings from any model directory bertkit reads.

Texts are sorted by length and batched (so a batch pads little), encoded, pooled (mean over the
non-padding tokens, or the [CLS] state) from a chosen layer, and written in input order to `.npy`
(float32, one row per text) or `.parquet` (columns `text` and `embedding`), under a temporary name that is
renamed at the end: an interrupted run leaves no output.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.config.task_kinds import HEADED_ARCHITECTURES
from bertkit.engine.checkpoint import load_state
from bertkit.errors import BertkitError
from bertkit.inputs.delimited import Quoting, checked_quoting
from bertkit.modelio.modeldir import encoder_weights, load_model_dir, onnx_export_dir
from bertkit.modelio.st_dir import trained_pooling
from bertkit.models.pooling import PooledEncoder
from bertkit.models.pretraining import build_encoder
from bertkit.pipelines.predict.common import InferenceModel, inference_device, load_onnx_export, torch_threads
from bertkit.progress import Tracker
from bertkit.tasks.data import read_texts

OUTPUT_SUFFIXES = (".npy", ".parquet")


def check_output(output: Path, overwrite: bool) -> None:
    if output.suffix.lower() not in OUTPUT_SUFFIXES:
        raise BertkitError(f"--output {output} must end in .npy or .parquet (the format is chosen by the name)")
    if output.is_dir():
        raise BertkitError(f"--output {output} is a directory; give a file name ending in .npy or .parquet")
    if output.exists() and not overwrite:
        raise BertkitError(f"output {output} already exists; pass --overwrite to replace it or choose another path")


def load_embedder(model_path: Path, layer: int = -1, device: str = "auto", threads: int = 0) -> InferenceModel:
    """What embed runs: a model directory's encoder pooled at `layer` (PyTorch on `device`), or an ONNX export
    of an encoder (ONNX Runtime; its graph pools the last layer)."""
    onnx_dir = onnx_export_dir(model_path)
    if onnx_dir is not None:
        loaded = load_onnx_export(onnx_dir, threads)
        if loaded.meta.get("architecture") in HEADED_ARCHITECTURES:
            raise BertkitError(
                f"{onnx_dir} is the ONNX export of a {loaded.meta['architecture']} model, whose graph ends in its "
                "task head; embed an ONNX export of an encoder (bertkit export ENCODER --to onnx), or the bertkit run"
            )
        if layer not in (-1, loaded.cfg.num_layers):
            raise BertkitError(
                f"an ONNX export pools the last layer inside its graph; --layer {layer} needs the bertkit model "
                "it was exported from"
            )
        return loaded
    model_dir, meta, cfg, weights, tokenizer = load_model_dir(model_path)
    if not -(cfg.num_layers + 1) <= layer <= cfg.num_layers:
        raise BertkitError(
            f"--layer {layer} is outside this model's {cfg.num_layers} layers; use 0 (embeddings) to "
            f"{cfg.num_layers}, or -1 (the last) to -{cfg.num_layers + 1}"
        )
    encoder = build_encoder(cfg)
    load_state(encoder, encoder_weights(weights), str(model_dir))
    target = inference_device(device)
    model = PooledEncoder(encoder, layer).to(target).eval()
    return InferenceModel(model_dir, meta, cfg, tokenizer, model, target, "pytorch")


def embed(
    model_path: Path,
    input_path: Path,
    output: Path,
    pool: str | None = None,
    layer: int = -1,
    max_seq_len: int | None = None,
    batch_size: int = 32,
    text_field: str = "text",
    split: str | None = None,
    skip_bad_rows: bool = False,
    overwrite: bool = False,
    device: str = "auto",
    quiet: bool = False,
    threads: int = 0,
    quoting: Quoting = "csv",
    normalize: bool | None = None,
) -> dict[str, Any]:
    """Embeddings of every text of `input_path`; `model_path` is a model directory (PyTorch on `device`) or the
    ONNX export of an encoder (ONNX Runtime); `threads` sets either's CPU threads (0: the library's default);
    `quoting` reads a CSV/TSV input ("none": GLUE's unquoted TSV files)."""
    quoting = checked_quoting(quoting)
    if pool is not None and pool not in ("mean", "cls"):
        raise BertkitError(f"--pool takes mean or cls, not '{pool}'")
    if batch_size < 1:
        raise BertkitError(f"--batch-size must be at least 1, not {batch_size}")
    check_output(output, overwrite)
    with torch_threads(threads):
        loaded = load_embedder(model_path, layer, device, threads)
        # How the model was trained to embed (a bi-encoder's bertkit_model.json, a sentence-transformers directory's
        # modules) fills what the caller left open.
        trained = loaded.meta.get("embedding") or {}
        pool = pool or trained_pooling(loaded.meta, loaded.model_dir) or "mean"
        normalize = bool(trained.get("normalize", False)) if normalize is None else normalize
        max_seq_len = max_seq_len if max_seq_len is not None else trained.get("max_seq_length")
        result = _embed(loaded, input_path, output, pool, layer, max_seq_len, batch_size, text_field, split,
                        skip_bad_rows, quiet, quoting, normalize)  # fmt: skip
        return {**result, "normalize": normalize}


def _embed(
    loaded: InferenceModel,
    input_path: Path,
    output: Path,
    pool: str,
    layer: int,
    max_seq_len: int | None,
    batch_size: int,
    text_field: str,
    split: str | None,
    skip_bad_rows: bool,
    quiet: bool,
    quoting: Quoting,
    normalize: bool = False,
) -> dict[str, Any]:
    cfg, tokenizer, model, target = loaded.cfg, loaded.tokenizer, loaded.model, loaded.device
    limit = cfg.max_position_embeddings - cfg.position_offset
    max_len = min(limit if max_seq_len is None else max_seq_len, limit)
    if max_len < 3:
        raise BertkitError(f"--max-seq-len must be at least 3 ([CLS] text [SEP]), not {max_seq_len}")
    data = read_texts(input_path, text_field, split, skip_bad_rows, quoting)
    xlnet = cfg.family == "xlnet"  # XLNet's layout: text [SEP] [CLS], the [CLS] (last token) its own segment
    ids = tokenizer.encode_batch(data.texts)
    truncated = sum(len(t) > max_len - 2 for t in ids)
    if xlnet:
        ids = [[*t[: max_len - 2], tokenizer.sep_id, tokenizer.cls_id] for t in ids]
    else:
        ids = [[tokenizer.cls_id, *t[: max_len - 2], tokenizer.sep_id] for t in ids]
    order = np.argsort([len(t) for t in ids], kind="stable")
    vectors = np.empty((len(ids), cfg.hidden_size), dtype=np.float32)
    started = time.perf_counter()
    with Tracker("embed", total=len(ids), quiet=quiet, unit="texts") as tracker, torch.no_grad():
        for start in range(0, len(ids), batch_size):
            rows = order[start : start + batch_size]
            longest = max(len(ids[i]) for i in rows)
            input_ids = torch.full((len(rows), longest), tokenizer.pad_id, dtype=torch.long)
            mask = torch.zeros((len(rows), longest), dtype=torch.bool)
            for j, i in enumerate(rows):
                input_ids[j, : len(ids[i])] = torch.tensor(ids[i])
                mask[j, : len(ids[i])] = True
            input_ids, mask = input_ids.to(target), mask.to(target)
            types = torch.zeros_like(input_ids) if cfg.type_vocab_size or xlnet else None
            if xlnet:
                types[torch.arange(len(rows)), mask.sum(1) - 1] = 2
            pooled = model(input_ids, mask, types)[pool].float()
            if normalize:
                pooled = torch.nn.functional.normalize(pooled, dim=-1)
            vectors[rows] = pooled.cpu().numpy()
            tracker.advance(len(rows))
    seconds = time.perf_counter() - started
    _write_atomic(output, vectors, data.texts)
    return {
        "output": str(output),
        "model": str(loaded.model_dir),
        "backend": loaded.backend,
        "rows": len(data.texts),
        "dim": cfg.hidden_size,
        "pool": pool,
        "layer": layer,
        "max_seq_len": max_len,
        "truncated": truncated,
        "rows_read": data.rows_read,
        "rows_skipped": data.skipped,
        "seconds": round(seconds, 2),
        "texts_per_s": round(len(ids) / seconds, 1) if seconds > 0 else None,
    }


def _write_atomic(output: Path, vectors: np.ndarray, texts: list[str]) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{output.name}.tmp-", dir=output.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            if output.suffix.lower() == ".npy":
                np.save(handle, vectors)
            else:
                import pyarrow as pa
                import pyarrow.parquet as pq

                flat = pa.array(vectors.reshape(-1), type=pa.float32())
                column = pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])
                pq.write_table(pa.table({"text": texts, "embedding": column}), handle)
        os.replace(tmp, output)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

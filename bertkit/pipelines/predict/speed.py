"""Sentences per second and accuracy of classifiers on the same texts, whatever runs them: a bertkit run in
PyTorch, or its ONNX export (fp32 or int8) in ONNX Runtime, each loaded as `bertkit predict` loads it.

Timing is in interleaved rounds: every round times one full pass of every model at every batch size in turn,
and each keeps its best round, so load on a shared machine that changes over time cannot reorder the models.
Used by the quickstart's last row and by `make bench` (tests/bench/test_onnx_bench.py).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.pipelines.predict.common import load_task_model, torch_threads

MAX_LEN, ROUNDS = 128, 3


def speed_table(
    models: list[tuple[str, Path]],
    texts: list[str],
    labels: list[str],
    batch_sizes: tuple[int, ...] = (1, 32),
    threads: int = 1,
    single_texts: int = 200,
    max_len: int = MAX_LEN,
    rounds: int = ROUNDS,
) -> list[dict[str, Any]]:
    """One row per (name, model directory): `sentences_per_s` at each batch size (batch 1 over the first
    `single_texts` texts, larger batches over all of them, in file order), the accuracy of the largest batch
    size's labels against `labels`, the back-end and the model file's size. `threads`: torch's and ONNX
    Runtime's intra-op threads alike (0: each library's default)."""
    from bertkit.corpus.loader import pad_batch
    from bertkit.tasks.classification import encode_examples

    with torch_threads(threads):
        loaded = []
        for name, path in models:
            model = load_task_model(path, "cpu", threads)
            tok = model.tokenizer
            encoded = encode_examples(texts, None, np.zeros(len(texts)), tok, max_len).input_ids
            batches = {}
            for size in batch_sizes:
                count = min(single_texts, len(texts)) if size == 1 else len(texts)
                batches[size] = [pad_batch(encoded[i : min(i + size, count)], tok.pad_id)
                                 for i in range(0, count, size)]  # fmt: skip
            best = dict.fromkeys(batch_sizes, math.inf)
            loaded.append({"name": name, "model": model, "batches": batches, "best": best})
        largest = max(batch_sizes)
        with torch.inference_mode():
            for item in loaded:  # warm-up: first calls allocate memory and pick kernels
                for size in batch_sizes:
                    for ids, mask in item["batches"][size][:2]:
                        item["model"].model(ids, mask)
            for _ in range(rounds):
                for item in loaded:
                    for size in batch_sizes:
                        begin = time.perf_counter()
                        logits = [item["model"].model(ids, mask)["logits"] for ids, mask in item["batches"][size]]
                        item["best"][size] = min(item["best"][size], time.perf_counter() - begin)
                        if size == largest:
                            item["predicted"] = torch.cat(logits).argmax(-1).tolist()
    rows = []
    for item in loaded:
        model = item["model"]
        names = list(model.meta.get("labels") or [])
        correct = [names[p] == gold for p, gold in zip(item["predicted"], labels, strict=True)]
        weights = model.model_dir / ("model.onnx" if model.backend == "onnxruntime" else "model.safetensors")
        speeds = {}
        for size in batch_sizes:
            count = sum(len(ids) for ids, _ in item["batches"][size])
            speeds[str(size)] = round(count / item["best"][size], 1)
        rows.append({"model": item["name"], "path": str(model.model_dir), "backend": model.backend,
                     "quantize": (model.meta.get("onnx") or {}).get("quantize", "none"),
                     "megabytes": round(weights.stat().st_size / 2**20, 1) if weights.exists() else None,
                     "sentences_per_s": speeds, "accuracy": round(float(np.mean(correct)), 4)})  # fmt: skip
    return rows

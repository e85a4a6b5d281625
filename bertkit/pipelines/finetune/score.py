"""Scoring a fine-tuned sequence model on another labelled file: the metrics `bertkit finetune` reports on its
dev set, for a second dev set (MNLI's mismatched one) without training again."""

from __future__ import annotations

from pathlib import Path

import torch

from bertkit.config.recipe import FinetuneRecipe
from bertkit.engine.device import resolve_device
from bertkit.modelio.modeldir import load_model_dir
from bertkit.tasks.architectures import build_task_model
from bertkit.tasks.classification import (
    ClassificationBatches,
    encode_examples,
    evaluate_classifier,
    evaluate_multi_label,
    evaluate_regressor,
    label_indices,
    multi_hot,
)
from bertkit.tasks.data import read_task_file

SEQUENCE_ARCHITECTURES = {
    "classification": "sequence-classification",
    "multi-label": "sequence-multi-label",
    "regression": "sequence-regression",
}


def score_sequence_model(
    model_path: Path, eval_file: Path, recipe: FinetuneRecipe, batch_size: int = 64
) -> dict[str, float]:
    """The dev metrics of the fine-tuned model in `model_path` on `eval_file`, read with the recipe's task fields on
    the recipe's device."""
    import numpy as np

    task = recipe.task
    model_dir, meta, cfg, weights, tokenizer = load_model_dir(model_path)
    architecture = SEQUENCE_ARCHITECTURES[task.kind]
    data = read_task_file(eval_file, task, task.eval_split)
    labels = list(meta.get("labels") or [])
    if task.kind == "regression":
        targets = np.asarray(data.labels, dtype=np.float32)
    elif task.kind == "multi-label":
        targets = multi_hot(data.labels or [], labels, eval_file)
    else:
        targets = label_indices(data.labels or [], labels, eval_file)
    xlnet = cfg.family == "xlnet"
    max_len = min(task.max_seq_len, cfg.max_position_embeddings - cfg.position_offset)
    examples = encode_examples(data.texts, data.pairs, targets, tokenizer, max_len, xlnet)
    use_types = xlnet or (task.text_pair_field is not None and cfg.type_vocab_size > 1)
    batches = ClassificationBatches(examples, batch_size, tokenizer.pad_id, 0, use_types, xlnet)
    device = resolve_device(recipe.engine)
    model = build_task_model(architecture, meta, cfg, weights, str(model_dir)).to(device)
    with torch.no_grad():
        if task.kind == "multi-label":
            return evaluate_multi_label(model, batches, device, task.threshold)
        if task.kind == "regression":
            return evaluate_regressor(model, batches, device)
        return evaluate_classifier(model, batches, device)

"""Scoring a fine-tuned sequence model on another labelled file: the metrics `bertkit finetune` reports on its
dev set, for a second dev set (MNLI's mismatched one) without training again."""

from __future__ import annotations

from pathlib import Path

import torch

from bertkit.config.recipe import FinetuneRecipe
from bertkit.engine.device import resolve_device
from bertkit.modelio.modeldir import load_model_dir
from bertkit.tasks.architectures import build_task_model
from bertkit.tasks.classification import ClassificationBatches, encode_examples, evaluate_sequence, sequence_targets
from bertkit.tasks.data import read_task_file
from bertkit.tasks.kinds import task_kind


def score_sequence_model(model_path: Path, eval_file: Path, recipe: FinetuneRecipe, batch_size: int = 64) -> dict:
    """The dev metrics of the fine-tuned model in `model_path` on `eval_file`, read with the recipe's task fields,
    encoded as `finetune` encodes its dev set, on the recipe's device."""
    task = recipe.task
    model_dir, meta, cfg, weights, tokenizer = load_model_dir(model_path)
    data = read_task_file(eval_file, task, task.eval_split)
    targets = sequence_targets(task.kind, data.labels or [], list(meta.get("labels") or []), eval_file)
    xlnet = cfg.family == "xlnet"
    max_len = min(task.max_seq_len, cfg.max_position_embeddings - cfg.position_offset)
    examples = encode_examples(data.texts, data.pairs, targets, tokenizer, max_len, xlnet)
    use_types = xlnet or (task.text_pair_field is not None and cfg.type_vocab_size > 1)
    batches = ClassificationBatches(examples, batch_size, tokenizer.pad_id, 0, use_types, xlnet)
    device = resolve_device(recipe.engine)
    model = build_task_model(task_kind(task.kind).architecture, meta, cfg, weights, str(model_dir)).to(device)
    with torch.no_grad():
        return evaluate_sequence(task.kind, model, batches, device, task.threshold)

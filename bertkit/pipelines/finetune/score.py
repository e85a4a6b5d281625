"""Scoring a fine-tuned sequence model on another labelled file: the metrics `bertkit finetune` reports on its
dev set, for a second dev set (MNLI's mismatched one) without training again."""

from __future__ import annotations

from pathlib import Path

import torch

from bertkit.config.recipe import FinetuneRecipe
from bertkit.config.task_kinds import SPECS
from bertkit.engine.checkpoint import load_state
from bertkit.engine.device import resolve_device
from bertkit.errors import BertkitError
from bertkit.modelio.modeldir import encoder_weights, load_model_dir
from bertkit.models.pretraining import build_encoder
from bertkit.tasks.architectures import build_task_model
from bertkit.tasks.classification import ClassificationBatches, encode_examples
from bertkit.tasks.data import read_task_file
from bertkit.tasks.kinds import task_kind
from bertkit.tasks.kinds.embedding import checkpoint_task, sentence_encoder


def score_sequence_model(model_path: Path, eval_file: Path, recipe: FinetuneRecipe, batch_size: int = 64) -> dict:
    """The dev metrics of the fine-tuned model in `model_path` on `eval_file`, read with the recipe's task fields,
    encoded as `finetune` encodes its dev set, on the recipe's device."""
    task = recipe.task
    kind = task_kind(task.kind)
    model_dir, meta, cfg, weights, tokenizer = load_model_dir(model_path)
    data = read_task_file(eval_file, task, task.eval_split)
    targets = kind.outputs.targets(data.labels or [], list(meta.get("labels") or []), eval_file)
    xlnet = cfg.family == "xlnet"
    max_len = min(task.max_seq_len, cfg.max_position_embeddings - cfg.position_offset)
    examples = encode_examples(data.texts, data.pairs, targets, tokenizer, max_len, xlnet)
    use_types = xlnet or (task.text_pair_field is not None and cfg.type_vocab_size > 1)
    batches = ClassificationBatches(examples, batch_size, tokenizer.pad_id, 0, use_types, xlnet)
    device = resolve_device(recipe.engine)
    model = build_task_model(kind.architecture, meta, cfg, weights, str(model_dir)).to(device)
    with torch.no_grad():
        return kind.outputs.evaluate(model, batches, device, task)


def score_as_is(model_path: Path, eval_file: Path, recipe: FinetuneRecipe) -> dict:
    """The dev metrics of the model in `model_path` as it is, without training (a zero-shot suite task): kinds whose
    model is the encoder itself with its pooling (retrieval, similarity) score it directly."""
    task = recipe.task
    kind = task_kind(task.kind)
    if not SPECS[task.kind].scores_as_is:
        raise BertkitError(f"a {task.kind} task trains a head before it can be scored; give the task a train file")
    model_dir, meta, cfg, weights, tokenizer = load_model_dir(model_path)
    task = checkpoint_task(task, meta)
    window = (meta.get("embedding") or {}).get("max_seq_length")
    if window:  # scored as MTEB scores a model: with the window it was trained for
        task = task.model_copy(update={"max_seq_len": int(window)})
    scorer = kind.scorer(task, cfg, tokenizer, eval_file)
    model = sentence_encoder(task)(build_encoder(cfg))
    load_state(model.encoder, encoder_weights(weights), str(model_dir))
    device = resolve_device(recipe.engine)
    with torch.no_grad():
        return scorer.evaluate(model.to(device).eval(), device)

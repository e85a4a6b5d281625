"""`bertkit finetune`: a pretrained model and a labelled file in, a fine-tuned classifier out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from bertkit.config.recipe import FinetuneRecipe
from bertkit.corpus.loader import split_indices
from bertkit.engine.checkpoint import load_state
from bertkit.engine.device import resolve_device
from bertkit.engine.dist import is_main
from bertkit.engine.loop import train
from bertkit.errors import BertkitError
from bertkit.modeldir import encoder_weights, load_model_dir, save_model_dir
from bertkit.models.bert import BertEncoder
from bertkit.pipelines.rundir import prepare_run_dir, write_summary
from bertkit.tasks.classification import (
    ClassificationBatches,
    SequenceClassifier,
    classification_objective,
    encode_examples,
    evaluate_classifier,
    read_records,
)


def finetune(
    recipe: FinetuneRecipe,
    model_path: Path,
    train_file: Path,
    output: Path,
    eval_file: Path | None = None,
    overwrite: bool = False,
    resume: bool | str | None = False,
    quiet: bool = False,
) -> dict[str, Any]:
    task = recipe.task
    model_dir, _, model_cfg, weights, tokenizer = load_model_dir(model_path)
    records = read_records(train_file, task)
    if eval_file is not None:
        eval_records = read_records(eval_file, task)
    else:
        train_idx, eval_idx = split_indices(len(records), task.eval_fraction, recipe.train.seed)
        records, eval_records = [records[i] for i in train_idx], [records[i] for i in eval_idx]
    labels = sorted({r[2] for r in records})
    if len(labels) < 2:
        raise BertkitError(f"{train_file} has a single label ({labels[0]!r}); classification needs at least two")
    max_len = min(task.max_seq_len, model_cfg.max_position_embeddings - model_cfg.position_offset)
    train_examples = encode_examples(records, tokenizer, labels, max_len)
    eval_examples = encode_examples(eval_records, tokenizer, labels, max_len) if eval_records else None
    resumed = prepare_run_dir(output, recipe, overwrite, resume)

    torch.manual_seed(recipe.train.seed)  # reproducible initial weights (and the same on every rank)
    model = SequenceClassifier(BertEncoder(model_cfg), len(labels), task.classifier_dropout)
    load_state(model.encoder, encoder_weights(weights), str(model_dir))
    if task.mode == "feature":
        # Feature-based: the encoder is a frozen feature extractor; only the head learns.
        model.encoder.requires_grad_(False)
    use_types = task.text_pair_field is not None and model_cfg.type_vocab_size > 1
    micro = recipe.train.batch_size // recipe.train.grad_accum
    source = ClassificationBatches(train_examples, micro, tokenizer.pad_id, recipe.train.seed, use_types)
    evaluate = None
    if eval_examples is not None:
        eval_batches = ClassificationBatches(eval_examples, micro, tokenizer.pad_id, recipe.train.seed, use_types)
        device = resolve_device(recipe.engine)
        evaluate = lambda m: evaluate_classifier(m, eval_batches, device)  # noqa: E731
    result = train(
        model,
        classification_objective,
        source,
        output,
        recipe.train,
        recipe.optim,
        recipe.schedule,
        recipe.engine,
        evaluate,
        resume=resumed,
        quiet=quiet,
        description="finetune",
    )
    saved = output / "model"
    if is_main():  # under a distributed engine only rank 0 writes
        save_model_dir(
            output / "model",
            model.cpu(),
            model_cfg,
            "sequence-classification",
            tokenizer,
            {"labels": labels, "task": task.model_dump(mode="json")},
        )
    first, last = result.first_last("loss")
    summary = {
        "run_dir": str(output),
        "model_dir": str(saved),
        "labels": labels,
        "train_examples": len(records),
        "eval_examples": len(eval_records),
        "steps": result.steps,
        "seconds": round(result.seconds, 1),
        "loss_first": first,
        "loss_last": last,
        "eval": result.eval,
        "resumed_from": result.resumed_from,
        "mode": task.mode,
    }
    write_summary(output, summary)
    return summary

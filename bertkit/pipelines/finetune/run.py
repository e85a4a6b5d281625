"""`bertkit finetune`: a pretrained model and a labelled file in, a fine-tuned classifier (or regressor) out.

Order matters: the model and every data file are read and checked before the run directory is created, so
bad input leaves nothing behind. With `train.epochs` the step count comes from the training-set size, the
model is evaluated after each epoch, and `model/` holds the weights of the best evaluation by `task.metric`
(optionally stopping early after `task.early_stopping_patience` evaluations without improvement).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.config.recipe import FinetuneRecipe
from bertkit.corpus.loader import split_indices
from bertkit.engine.checkpoint import load_state
from bertkit.engine.device import resolve_device
from bertkit.engine.dist import is_main
from bertkit.engine.loop import train
from bertkit.errors import BertkitError
from bertkit.modelio.modeldir import encoder_weights, load_model_dir, save_model_dir
from bertkit.models.pretraining import build_encoder
from bertkit.pipelines.finetune.common import BestModel, plan_epochs, skipped_summary, subset, training_summary
from bertkit.pipelines.finetune.qa import finetune_qa
from bertkit.pipelines.finetune.tokens import finetune_tokens
from bertkit.pipelines.rundir import join_job, prepare_run_dir, write_summary
from bertkit.tasks.classification import (
    ClassificationBatches,
    FeatureBatches,
    SequenceClassifier,
    classification_objective,
    encode_examples,
    evaluate_sequence,
    multi_label_objective,
    regression_objective,
    sentence_features,
    sequence_targets,
)
from bertkit.tasks.data import TaskData, read_task_file

# What bertkit_model.json calls each task's model (predict and export read it).
ARCHITECTURES = {
    "classification": "sequence-classification",
    "multi-label": "sequence-multi-label",
    "regression": "sequence-regression",
}


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
    join_job(
        recipe,
        {"output": output, "model": model_path, "train": train_file, "eval": eval_file, "overwrite": overwrite,
         "resume": resume},
        {"model": model_path, "training file": train_file, "evaluation file": eval_file},
    )  # fmt: skip
    if task.kind == "token-classification":
        return finetune_tokens(recipe, model_path, train_file, output, eval_file, overwrite, resume, quiet)
    if task.kind == "question-answering":
        return finetune_qa(recipe, model_path, train_file, output, eval_file, overwrite, resume, quiet)
    regression = task.kind == "regression"
    multi_label = task.kind == "multi-label"
    model_dir, _, model_cfg, weights, tokenizer = load_model_dir(model_path)
    train_data = read_task_file(train_file, task, task.split)
    if regression:
        labels: list[str] = []
        if len(set(train_data.labels or [])) < 2:
            raise BertkitError(f"{train_file}: every score is the same; regression needs varied scores")
    elif multi_label:
        label_sets = {tuple(sorted(row)) for row in train_data.labels or []}
        labels = sorted({label for row in label_sets for label in row})
        if len(label_sets) < 2 or not labels:
            raise BertkitError(
                f"{train_file}: every one of its {len(train_data)} rows has the labels {sorted(label_sets)[0]!r}; "
                f"there is nothing to learn (is --label-field '{task.label_field}' the right column, and "
                f"task.label_separator '{task.label_separator}' the separator?)"
            )
    else:
        labels = sorted(set(train_data.labels or []))
        if len(labels) < 2:
            raise BertkitError(
                f"{train_file}: every one of its {len(train_data)} rows has the label {labels[0]!r}; classification "
                f"needs at least two labels (is --label-field '{task.label_field}' the right column?)"
            )
        # Checked now, not at the first evaluation: the run directory does not exist yet.
        if task.metric == "f1" and len(labels) != 2:
            raise BertkitError(
                f"task.metric f1 is the positive class's F1 of a two-class task, but {train_file} has "
                f"{len(labels)} labels; use task.metric=macro_f1 instead"
            )
    eval_read: TaskData | None = None
    if eval_file is not None:
        eval_read = eval_data = read_task_file(eval_file, task, task.eval_split)
        train_part = train_data
    else:
        train_idx, eval_idx = split_indices(len(train_data), task.eval_fraction, recipe.train.seed)
        train_part, eval_data = subset(train_data, train_idx), subset(train_data, eval_idx)

    def targets(data: TaskData, source: object) -> np.ndarray:
        return sequence_targets(task.kind, data.labels or [], labels, source)

    max_len = min(task.max_seq_len, model_cfg.max_position_embeddings - model_cfg.position_offset)
    # XLNet: text <sep> <cls> with <cls> last, padded on the left, pooled at <cls> through a fresh summary layer
    # (XLNetForSequenceClassification's sequence_summary); segment ids always, since <cls> has its own.
    xlnet = model_cfg.family == "xlnet"
    if xlnet and not model_cfg.pooler:
        model_cfg = model_cfg.model_copy(update={"pooler": True})
    train_examples = encode_examples(
        train_part.texts, train_part.pairs, targets(train_part, train_file), tokenizer, max_len, xlnet
    )
    eval_examples = None
    if len(eval_data):
        eval_targets = targets(eval_data, eval_file or train_file)
        eval_examples = encode_examples(eval_data.texts, eval_data.pairs, eval_targets, tokenizer, max_len, xlnet)

    train_cfg, steps_per_epoch = plan_epochs(recipe.train, len(train_part))
    # Everything is read and valid: only now does the run directory appear.
    resumed = prepare_run_dir(output, recipe, overwrite, resume)

    torch.manual_seed(recipe.train.seed)  # reproducible initial weights (and the same on every rank)
    outputs = 1 if regression else len(labels)
    model = SequenceClassifier(build_encoder(model_cfg), outputs, task.classifier_dropout, task.pool)
    own = encoder_weights(weights)
    # A pretrained XLNet has no summary layer yet: it starts fresh, as transformers starts it.
    load_state(model.encoder, own, str(model_dir), strict=not (xlnet and "pooler.dense.weight" not in own))
    use_types = xlnet or (task.text_pair_field is not None and model_cfg.type_vocab_size > 1)
    micro = train_cfg.batch_size // train_cfg.grad_accum
    source = ClassificationBatches(train_examples, micro, tokenizer.pad_id, train_cfg.seed, use_types, xlnet)
    eval_batches = None
    if eval_examples is not None:
        eval_batches = ClassificationBatches(eval_examples, micro, tokenizer.pad_id, train_cfg.seed, use_types, xlnet)
    device = resolve_device(recipe.engine)
    if task.mode == "feature":
        # Feature-based: the encoder is a frozen feature extractor, so it runs once per example (in evaluation
        # mode), and only the head learns, from those features, epoch after epoch.
        model.encoder.requires_grad_(False)
        source = FeatureBatches(train_examples, sentence_features(model, source, device), micro, train_cfg.seed)
        if eval_batches is not None:
            eval_batches = FeatureBatches(eval_examples, sentence_features(model, eval_batches, device), micro, 0)
        model.cpu()
    evaluate = best = None
    if eval_batches is not None:
        evaluate = lambda m: evaluate_sequence(task.kind, m, eval_batches, device, task.threshold)  # noqa: E731
        best = BestModel.start(output, task.best_metric, task.early_stopping_patience, resumed)
    result = train(
        model,
        regression_objective if regression else multi_label_objective if multi_label else classification_objective,
        source,
        output,
        train_cfg,
        recipe.optim,
        recipe.schedule,
        recipe.engine,
        evaluate,
        resume=resumed,
        quiet=quiet,
        description="finetune",
        on_eval=best,
    )
    saved = output / "model"
    best_info = best.info if best is not None else None
    if is_main():  # under a distributed engine only rank 0 writes
        model = model.cpu()
        if best is not None:
            best.finish(model, result.steps)
        save_model_dir(
            saved,
            model,
            model_cfg,
            ARCHITECTURES[task.kind],
            tokenizer,
            {"labels": labels, "task": task.model_dump(mode="json"), "best": best_info},
        )
    summary: dict[str, Any] = {
        "run_dir": str(output),
        "model_dir": str(saved),
        "task": task.kind,
        "recipe": recipe.name,  # the task's own (finetune-KIND) unless --recipe named one
        "labels": labels,
        "rows_read": train_data.rows_read,
        "rows_skipped": train_data.skipped,
        "label_counts": train_part.label_counts() if not regression else {},
        "train_examples": len(train_part),
        "eval_examples": len(eval_data),
        **training_summary(result, best, train_cfg, steps_per_epoch),
        "mode": task.mode,
        "pool": task.pool,
    }
    if multi_label:
        summary["threshold"] = task.threshold
    summary.update(skipped_summary(train_data, eval_read))
    write_summary(output, summary)
    return summary

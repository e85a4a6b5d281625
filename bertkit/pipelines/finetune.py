"""`bertkit finetune`: a pretrained model and a labelled file in, a fine-tuned classifier (or regressor) out.

Order matters: the model and every data file are read and checked before the run directory is created, so
bad input leaves nothing behind. With `train.epochs` the step count comes from the training-set size, the
model is evaluated after each epoch, and `model/` holds the weights of the best evaluation by `task.metric`
(optionally stopping early after `task.early_stopping_patience` evaluations without improvement).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.config.recipe import FinetuneRecipe
from bertkit.config.schema import LOWER_IS_BETTER, TaskConfig, TrainConfig
from bertkit.corpus.loader import split_indices
from bertkit.engine.checkpoint import list_checkpoints, load_state, read_weights
from bertkit.engine.device import resolve_device
from bertkit.engine.dist import is_main
from bertkit.engine.loop import TrainResult, train
from bertkit.errors import BertkitError
from bertkit.modeldir import encoder_weights, load_model_dir, save_model_dir
from bertkit.models.pretraining import build_encoder
from bertkit.pipelines.rundir import prepare_run_dir, write_summary
from bertkit.tasks.classification import (
    ClassificationBatches,
    SequenceClassifier,
    classification_objective,
    encode_examples,
    evaluate_classifier,
    evaluate_multi_label,
    evaluate_regressor,
    label_indices,
    multi_hot,
    multi_label_objective,
    regression_objective,
)
from bertkit.tasks.data import TaskData, read_task_data

# What bertkit_model.json calls each task's model (predict and export read it).
ARCHITECTURES = {
    "classification": "sequence-classification",
    "multi-label": "sequence-multi-label",
    "regression": "sequence-regression",
}
BEST_WEIGHTS = "best.safetensors"  # the best evaluation's weights while training; model/ gets them at the end


def read_task_file(path: Path, task: TaskConfig, split: str | None) -> TaskData:
    return read_task_data(
        path,
        task.text_field,
        task.label_field,
        task.text_pair_field,
        split,
        task.skip_bad_rows,
        {"regression": "float", "multi-label": "list"}.get(task.kind, "str"),
        task.label_separator,
    )


def subset(data: TaskData, indices: np.ndarray) -> TaskData:
    pick = [int(i) for i in indices]
    return TaskData(
        data.path,
        [data.texts[i] for i in pick],
        [data.pairs[i] for i in pick] if data.pairs is not None else None,
        [data.labels[i] for i in pick] if data.labels is not None else None,
    )


def plan_epochs(train_cfg: TrainConfig, examples: int) -> tuple[TrainConfig, int]:
    """With `train.epochs`, the steps they take over `examples` (and an evaluation after each epoch)."""
    steps_per_epoch = math.ceil(examples / train_cfg.batch_size)
    if train_cfg.epochs is not None:
        update: dict[str, Any] = {"steps": train_cfg.epochs * steps_per_epoch}
        if not train_cfg.eval_every:
            update["eval_every"] = steps_per_epoch  # evaluate after each epoch
        train_cfg = train_cfg.model_copy(update=update)
    return train_cfg, steps_per_epoch


class BestModel:
    """The `on_eval` callback: remembers the best evaluation by `metric`, keeps its weights in RUN_DIR, and
    asks the loop to stop after `patience` evaluations without improvement (0: never)."""

    def __init__(self, run_dir: Path, metric: str, patience: int) -> None:
        self.path, self.metric, self.patience = run_dir / BEST_WEIGHTS, metric, patience
        self.sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
        self.best: float | None = None
        self.best_step: int | None = None
        self.best_metrics: dict[str, float] = {}
        self.since_best = 0

    @classmethod
    def start(cls, run_dir: Path, metric: str, patience: int, resumed: bool) -> BestModel:
        """A tracker for this run: a resumed run replays its logged evaluations up to its checkpoint; a fresh
        one removes a stale best-weights file left by an earlier attempt."""
        best = cls(run_dir, metric, patience)
        if resumed:
            checkpoints = list_checkpoints(run_dir / "checkpoints")
            best.replay(run_dir / "metrics.jsonl", checkpoints[-1][0] if checkpoints else 0)
        elif best.path.exists():
            best.path.unlink()
        return best

    @property
    def info(self) -> dict[str, Any] | None:
        """What `bertkit_model.json` and the summary record of the best evaluation."""
        return None if self.best_step is None else {"step": self.best_step, "metric": self.metric, "value": self.best}

    def finish(self, model: nn.Module, last_step: int) -> None:
        """Rank 0, after training: put the best evaluation's weights into `model` (when an earlier evaluation
        beat the last one) and remove the file that kept them."""
        if self.path.is_file():
            if self.best_step != last_step:
                load_state(model, read_weights(self.path), str(self.path))
            self.path.unlink()

    def replay(self, metrics_path: Path, up_to_step: int) -> None:
        """On resume: the evaluations logged up to the checkpoint decide the best so far, if its weights
        were kept (a run that never improved, or lost the file, starts tracking afresh)."""
        if not self.path.is_file() or not metrics_path.is_file():
            return
        for line in metrics_path.read_text("utf-8").splitlines():
            row = json.loads(line) if line.strip() else {}
            if f"eval_{self.metric}" in row and row["step"] <= up_to_step:
                self._update(row["step"], {k.removeprefix("eval_"): v for k, v in row.items() if k != "step"})

    def _update(self, step: int, metrics: dict[str, float]) -> bool:
        value = float(metrics[self.metric])
        improved = self.best is None or self.sign * value > self.sign * self.best
        if improved:
            self.best, self.best_step, self.best_metrics, self.since_best = value, step, dict(metrics), 0
        else:
            self.since_best += 1
        return improved

    def __call__(self, step: int, metrics: dict[str, float], snapshot: Any) -> bool:
        if self._update(step, metrics):
            state = snapshot()  # collective: every rank takes it; rank 0 holds the weights
            if is_main() and state:
                from safetensors.torch import save_file

                tmp = self.path.with_name(f".{self.path.name}.tmp")
                save_file({k: v.contiguous() for k, v in state.items()}, str(tmp))
                os.replace(tmp, self.path)
        return bool(self.patience) and self.since_best >= self.patience


def training_summary(
    result: TrainResult, best: BestModel | None, train_cfg: TrainConfig, steps_per_epoch: int
) -> dict[str, Any]:
    """The summary entries every fine-tuning task shares: the schedule, what the loop did, and what model/
    holds (the best evaluation's metrics, or the last one's when none was better)."""
    first, last = result.first_last("loss")
    return {
        "epochs": train_cfg.epochs,
        "steps_per_epoch": steps_per_epoch,
        "steps": result.steps,
        "stopped": result.stopped,
        "seconds": round(result.seconds, 1),
        "loss_first": first,
        "loss_last": last,
        "eval": best.best_metrics if best is not None and best.best_metrics else result.eval,
        "eval_last": result.eval,
        "best": best.info if best is not None else None,
        "resumed_from": result.resumed_from,
    }


def skipped_summary(train_read: Any, eval_read: Any | None) -> dict[str, Any]:
    """What reading skipped (`--skip-bad-rows`), for readers that count it: the eval file's rows, and the
    first few skipped rows with their reasons."""
    out: dict[str, Any] = {}
    if eval_read is not None:
        out["eval_rows_read"], out["eval_rows_skipped"] = eval_read.rows_read, eval_read.skipped
    skipped = train_read.skipped_rows + (eval_read.skipped_rows if eval_read is not None else [])
    if skipped:
        out["skipped_examples"] = skipped[:3]
    return out


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
    if task.kind == "token-classification":
        from bertkit.pipelines.finetune_tokens import finetune_tokens

        return finetune_tokens(recipe, model_path, train_file, output, eval_file, overwrite, resume, quiet)
    if task.kind == "question-answering":
        from bertkit.pipelines.finetune_qa import finetune_qa

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
    eval_read: TaskData | None = None
    if eval_file is not None:
        eval_read = eval_data = read_task_file(eval_file, task, task.eval_split)
        train_part = train_data
    else:
        train_idx, eval_idx = split_indices(len(train_data), task.eval_fraction, recipe.train.seed)
        train_part, eval_data = subset(train_data, train_idx), subset(train_data, eval_idx)

    def targets(data: TaskData, source: object) -> np.ndarray:
        if regression:
            return np.asarray(data.labels, dtype=np.float32)
        if multi_label:
            return multi_hot(data.labels or [], labels, source)
        return label_indices(data.labels or [], labels, source)

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
    if task.mode == "feature":
        # Feature-based: the encoder is a frozen feature extractor; only the head learns.
        model.encoder.requires_grad_(False)
    use_types = xlnet or (task.text_pair_field is not None and model_cfg.type_vocab_size > 1)
    micro = train_cfg.batch_size // train_cfg.grad_accum
    source = ClassificationBatches(train_examples, micro, tokenizer.pad_id, train_cfg.seed, use_types, xlnet)
    evaluate = best = None
    if eval_examples is not None:
        eval_batches = ClassificationBatches(eval_examples, micro, tokenizer.pad_id, train_cfg.seed, use_types, xlnet)
        device = resolve_device(recipe.engine)
        if multi_label:
            evaluate = lambda m: evaluate_multi_label(m, eval_batches, device, task.threshold)  # noqa: E731
        else:
            scorer = evaluate_regressor if regression else evaluate_classifier
            evaluate = lambda m: scorer(m, eval_batches, device)  # noqa: E731
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

"""Sequence tasks: one label (classification), several (multi-label) or a number (regression) per text or pair
of texts, read from CSV/TSV, JSON lines, Parquet or a datasets directory. What the three differ in (the outputs,
targets, objective, metrics and predictions) is their SequenceOutputs (bertkit/tasks/kinds/sequence_outputs.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.config.schema import ModelConfig, TaskConfig
from bertkit.config.task_kinds import kind_spec
from bertkit.corpus.loader import split_indices
from bertkit.errors import BertkitError
from bertkit.models.with_heads import EncoderWithHeads
from bertkit.tasks.classification import (
    ClassificationBatches,
    FeatureBatches,
    SequenceClassifier,
    encode_examples,
    evaluate_classifier,
    label_indices,
    sentence_features,
)
from bertkit.tasks.data import TaskData, read_task_file
from bertkit.tasks.kinds.base import (
    DistillData,
    Evaluate,
    FineTuned,
    GateScore,
    Part,
    PredictRequest,
    Prepared,
    RowPredictor,
    RunModel,
    check_outputs,
    model_inputs,
    row_text,
    saved_task,
    shared_window,
    window,
)
from bertkit.tasks.kinds.sequence_outputs import OneClass
from bertkit.tasks.probe import ProbeData
from bertkit.tokenizers.base import Tokenizer


def subset(data: TaskData, indices: np.ndarray) -> TaskData:
    pick = [int(i) for i in indices]
    return TaskData(
        data.path,
        [data.texts[i] for i in pick],
        [data.pairs[i] for i in pick] if data.pairs is not None else None,
        [data.labels[i] for i in pick] if data.labels is not None else None,
    )


class SequenceKind:
    """One kind of sequence task: `name` (its task.kind) with its `outputs` (one class, a set of labels, a score)."""

    predicts_from = "rows"

    def __init__(self, name: str, outputs: OneClass) -> None:
        self.name, self.outputs, self.spec = name, outputs, kind_spec(name)
        self.architecture = self.spec.architecture

    def check_data(self, task: TaskConfig, path: Path, what: str, metrics: tuple[str, ...]) -> None:
        data = read_task_file(path, task, task.split if what == "train" else task.eval_split)
        classes = len(set(data.labels or []))
        if what == "train" and "f1" in metrics and classes != 2:  # f1: the positive class's, of two classes
            raise BertkitError(
                f"f1 is the positive class's F1 of a two-class task, and this one has {classes} classes; "
                "rank and score it by macro_f1 or accuracy"
            )

    def prepare(self, task: TaskConfig, model_cfg: ModelConfig, tokenizer: Tokenizer, train_file: Path,
                eval_file: Path | None, seed: int) -> Prepared:  # fmt: skip
        train_data, train_part, eval_data, eval_read = _read(task, train_file, eval_file, seed)
        labels = self.outputs.labels_of(train_data, task, train_file)
        # XLNet: text <sep> <cls> with <cls> last, padded on the left, pooled at <cls> through a fresh summary layer
        # (XLNetForSequenceClassification's sequence_summary); segment ids always, since <cls> has its own.
        xlnet = model_cfg.family == "xlnet"
        if xlnet and not model_cfg.pooler:
            model_cfg = model_cfg.model_copy(update={"pooler": True})
        max_len = window(task, model_cfg)

        def encoded(data: TaskData, source: Path) -> Any:
            targets = self.outputs.targets(data.labels or [], labels, source)
            return encode_examples(data.texts, data.pairs, targets, tokenizer, max_len, xlnet)

        train_examples = encoded(train_part, train_file)
        eval_examples = encoded(eval_data, eval_file or train_file) if len(eval_data) else None
        use_types = xlnet or (task.text_pair_field is not None and model_cfg.type_vocab_size > 1)
        pad = tokenizer.pad_id

        def sources(model: nn.Module, micro: int, seed: int, device: torch.device) -> tuple[Any, Evaluate | None]:
            source: Any = ClassificationBatches(train_examples, micro, pad, seed, use_types, xlnet)
            held_out: Any = None
            if eval_examples is not None:
                held_out = ClassificationBatches(eval_examples, micro, pad, seed, use_types, xlnet)
            if task.mode == "feature":
                # Feature-based: the encoder is a frozen feature extractor, so it runs once per example (in
                # evaluation mode), and only the head learns, from those features, epoch after epoch.
                model.encoder.requires_grad_(False)
                source = FeatureBatches(train_examples, sentence_features(model, source, device), micro, seed)
                if held_out is not None:
                    held_out = FeatureBatches(eval_examples, sentence_features(model, held_out, device), micro, 0)
                model.cpu()
            if held_out is None:
                return source, None
            return source, lambda m: self.outputs.evaluate(m, held_out, device, task)

        outputs = self.outputs.width(labels)

        def probe(model: nn.Module, device: torch.device) -> ProbeData:
            """What the classifier layer of the frozen model reads for each training example, computed once."""
            features = sentence_features(model, ClassificationBatches(train_examples, 64, pad, 0, use_types, xlnet),
                                         device)  # fmt: skip
            if model.head is not None:  # ModernBERT's dense-activation-norm head, frozen at its initial weights
                with torch.no_grad():
                    features = model.head.eval().to(device)(features.to(device)).float().cpu()
            evaluate = None
            if eval_examples is not None:
                held_out = ClassificationBatches(eval_examples, 64, pad, 0, use_types, xlnet)
                evaluate = lambda m: self.outputs.evaluate(m, held_out, device, task)  # noqa: E731
            return ProbeData(features, torch.from_numpy(train_examples.labels), self.outputs.probe_loss, outputs,  # type: ignore[arg-type]
                             evaluate)  # fmt: skip

        summary: dict[str, Any] = {
            "labels": labels,
            "rows_read": train_data.rows_read,
            "rows_skipped": train_data.skipped,
            "label_counts": train_part.label_counts() if self.spec.label_type != "float" else {},  # not scores
            "train_examples": len(train_part),
            "eval_examples": len(eval_data),
            "mode": task.mode,
            "pool": task.pool,
            **skipped_summary(train_data, eval_read),
        }
        if "threshold" in self.spec.fields:
            summary["threshold"] = task.threshold
        return Prepared(
            labels=labels,
            model_cfg=model_cfg,
            examples=len(train_part),
            metric=task.best_metric,
            build=lambda encoder: SequenceClassifier(encoder, outputs, task.classifier_dropout, task.pool),
            objective=self.outputs.objective,
            sources=sources,
            task_meta=task.model_dump(mode="json"),
            summary=summary,
            # A pretrained XLNet has no summary layer yet: it starts fresh, as transformers starts it.
            fresh=("pooler.dense.weight", "pooler.dense.bias") if xlnet else (),
            probe=probe,
        )

    def task_model(self, encoder: nn.Module, labels: list[str], task: dict[str, Any]) -> nn.Module:
        """The fine-tuned model on `encoder` (dropout off), as a model directory's metadata describes it."""
        return SequenceClassifier(encoder, self.outputs.width(labels), 0.0, task.get("pool", "cls"))

    def gate_scorer(self, meta: dict[str, Any], model_cfg: ModelConfig, tokenizer: Tokenizer, eval_file: Path,
                    max_len: int) -> tuple[str, GateScore]:  # fmt: skip
        """The metric the export's int8 gate judges by, and its score in points of a model on `eval_file` (read,
        checked against the model's labels and encoded once, now)."""
        task, labels = saved_task(meta), list(meta.get("labels") or [])
        data = read_task_file(eval_file, task, task.eval_split)
        targets = self.outputs.targets(data.labels or [], labels, eval_file)
        use_types = data.pairs is not None and model_cfg.type_vocab_size > 1
        examples = encode_examples(data.texts, data.pairs, targets, tokenizer, max_len)
        batches = ClassificationBatches(examples, 1, tokenizer.pad_id, 0, use_types)  # its batch size: only to train
        metric, cpu = self.spec.metrics[0], torch.device("cpu")
        return metric, lambda m, n: 100 * self.outputs.evaluate(m, batches, cpu, task, n)[metric]

    # -- distillation: one distribution over the classes per sequence ---------------------------------------
    def distill_data(self, teacher: FineTuned, task: TaskConfig, student_cfg: ModelConfig, train_file: Path,
                     eval_file: Path | None, seed: int) -> DistillData:  # fmt: skip
        """The teacher's classes, in its order; the student is the encoder with a fresh classifier, its output the
        teacher's (hidden states for TinyBERT's intermediate phase, logits for the prediction phase)."""
        if self.spec.distill_recipe is None:  # a classifier's soft targets are one softmax over the classes
            raise BertkitError(f"the distillation task stage distils classifiers, not {self.name} models")
        labels = teacher.outputs
        train_data, train_part, eval_data, _ = _read(task, train_file, eval_file, seed)
        max_len = shared_window(teacher, student_cfg, task.max_seq_len)

        def encoded(data: TaskData, source: Path) -> Any:
            check_outputs(teacher, data.labels or [], source, "classes")
            return encode_examples(data.texts, data.pairs, label_indices(data.labels or [], labels, source),
                                   teacher.tokenizer, max_len)  # fmt: skip

        train = encoded(train_part, train_file)
        evaluation = encoded(eval_data, eval_file or train_file) if len(eval_data) else None
        use_types = task.text_pair_field is not None and student_cfg.type_vocab_size > 1
        pad = teacher.tokenizer.pad_id
        evaluate = None
        if evaluation is not None:
            evaluate = lambda m, device: evaluate_classifier(  # noqa: E731
                _LogitsView(m), ClassificationBatches(evaluation, 64, pad, 0, use_types), device
            )
        return DistillData(
            labels=labels,
            input_ids=train.input_ids,
            token_types=train.token_type_ids,
            batches=lambda micro, seed: ClassificationBatches(train, micro, pad, seed, use_types),
            student=lambda: EncoderWithHeads(
                student_cfg, num_labels=len(labels), classifier_dropout=task.classifier_dropout, pool=task.pool
            ),  # fmt: skip
            evaluate=evaluate,
            train_count=len(train_part),
            eval_count=len(eval_data),
            meta=task.model_dump(mode="json"),
            summary={"label_counts": {name: int(np.sum(train.labels == i)) for i, name in enumerate(labels)}},
        )

    def logits(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(*model_inputs(batch)).logits

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return float(batch["input_ids"].shape[0])

    def rows(self, student: torch.Tensor, teacher: torch.Tensor, batch: dict[str, torch.Tensor]) -> list[Part]:
        return [(student, teacher, batch["labels"], 1.0)]

    # -- prediction: a label with its probabilities, the labels above the threshold, or a score ------------------
    def predictor(self, request: PredictRequest) -> RowPredictor:
        task, source = request.meta.get("task") or {}, request.source
        labels: list[str] = list(request.meta.get("labels") or [])
        text_field = request.text_field or task.get("text_field", "text")
        pair_field = request.pair_field or task.get("text_pair_field")
        if request.plain_text and pair_field:
            raise BertkitError(f"this model reads text pairs ({pair_field}); give JSON lines, CSV/TSV or Parquet input")
        use_types = pair_field is not None and request.type_vocab_size > 1
        threshold = float(task.get("threshold", 0.5))

        def records(rows: list[tuple[str, Any]], run: RunModel) -> list[dict[str, Any]]:
            texts = [row_text(source, where, row, None if request.plain_text else text_field) for where, row in rows]
            pairs = [row_text(source, where, row, pair_field) for where, row in rows] if pair_field else None
            examples = encode_examples(texts, pairs, np.zeros(len(texts)), request.tokenizer, request.max_len)
            logits = np.stack(run(examples.input_ids, examples.token_type_ids if use_types else None))
            return self.outputs.records(logits, labels, threshold)

        return RowPredictor([f for f in (text_field, pair_field) if f], records)

def _read(task: TaskConfig, train_file: Path, eval_file: Path | None,
          seed: int) -> tuple[TaskData, TaskData, TaskData, TaskData | None]:  # fmt: skip
    """(the training file read, the part of it that trains, the evaluation examples, the evaluation file read):
    --eval's rows, or a held-out share of --train's (task.eval_fraction, split by `seed`)."""
    train_data = read_task_file(train_file, task, task.split)
    if eval_file is not None:
        eval_data = read_task_file(eval_file, task, task.eval_split)
        return train_data, train_data, eval_data, eval_data
    train_idx, eval_idx = split_indices(len(train_data), task.eval_fraction, seed)
    return train_data, subset(train_data, train_idx), subset(train_data, eval_idx), None


class _LogitsView(nn.Module):
    """A model with `.logits` in its output (EncoderWithHeads) as `evaluate_classifier` calls a classifier."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:  # fmt: skip
        return {"logits": self.model(input_ids, attention_mask, token_type_ids).logits}


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

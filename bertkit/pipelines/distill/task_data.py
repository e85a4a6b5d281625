"""The data, student and evaluation of the task stage, for the kind of model the teacher was fine-tuned as.

`prepare_task` reads the training (and evaluation) file the way `bertkit finetune` reads it for that kind
and returns a `TaskSetup`: the batches both phases draw from, a student with a fresh head of the teacher's
shape, the evaluation, and what the distilled model records. The teacher decides the kind, its classes and,
for taggers and QA models, the tag scheme and the windows it was trained on, so that the teacher's logits
of every example line up with the student's positions:

- sequence classification (single texts or pairs): the classes are the teacher's, in its order;
- token classification: the teacher's tags and tag scheme; each word's first sub-word is a target;
- extractive QA: the teacher's window length and stride, so every window is one the teacher has read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.config.recipe import DistillRecipe
from bertkit.config.schema import ModelConfig
from bertkit.corpus.loader import split_indices
from bertkit.distill.cache import examples_fingerprint
from bertkit.distill.student import DistillStudent
from bertkit.distill.teacher import Teacher
from bertkit.errors import BertkitError
from bertkit.models.pretraining import build_encoder
from bertkit.tasks.classification import ClassificationBatches, encode_examples, evaluate_classifier, label_indices
from bertkit.tasks.data import read_task_file
from bertkit.tasks.kinds import task_kind
from bertkit.tasks.kinds.sequence import subset


@dataclass
class TaskSetup:
    architecture: str  # what the distilled model is saved as: the teacher's
    labels: list[str]  # classes or tags in the teacher's order; [] for QA
    lengths: list[int]  # token count of every training example (the teacher-output cache's layout)
    fingerprint: str  # of the training inputs: the data half of the cache's key
    batches: Callable[[int, int], Any]  # (micro-batch size, seed) -> resumable batches of the training examples
    student: Callable[[], nn.Module]  # the prediction phase's student: encoder + a fresh head
    evaluate: Callable[[nn.Module, torch.device], dict[str, float]] | None
    train_count: int
    eval_count: int
    meta: dict[str, Any] = field(default_factory=dict)  # bertkit_model.json's labels and task
    summary: dict[str, Any] = field(default_factory=dict)  # what the run summary adds (label counts, windows)

    @property
    def sequences(self) -> int:
        """What an epoch passes over: the training examples, or for QA their windows (as finetune plans it)."""
        return len(self.lengths)

    @property
    def kind(self) -> Any:
        return task_kind(self.architecture)


class LogitsView(nn.Module):
    """The student as `evaluate_classifier` calls a classifier: `{"logits": ...}` from the batch tensors."""

    def __init__(self, student: nn.Module) -> None:
        super().__init__()
        self.student = student

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:  # fmt: skip
        return {"logits": self.student(input_ids, attention_mask, token_type_ids).logits}


def check_labels(teacher: Teacher, data_labels: list[str], known: list[str], source: Path, what: str) -> None:
    """Every label of the task data must be one the teacher predicts: the gold labels and the teacher's
    outputs are matched by name. A mismatch names where the teacher's names come from."""
    unknown = sorted(set(data_labels) - set(known))
    if not unknown:
        return
    if teacher.huggingface:
        fix = (
            f"if they are the same {what} under other names, write the data's names into id2label in "
            f"{Path(teacher.source) / 'config.json'}, in the order of the teacher's class ids"
        )
    else:
        fix = f"distil on data labelled with the teacher's {what}"
        fix += " (task.label_field picks the column)" if what == "classes" else ""
    raise BertkitError(
        f"{source} has {'labels' if what == 'classes' else 'tags'} {unknown[:5]} that the teacher {teacher.source} "
        f"does not predict (its {what}: {known[:10]}); {fix}"
    )


def prepare_task(
    teacher: Teacher,
    recipe: DistillRecipe,
    student_cfg: ModelConfig,
    train_file: Path,
    eval_file: Path | None,
) -> TaskSetup:
    architecture = teacher.architecture
    expected = {"sequence-classification": "classification"}.get(str(architecture), architecture)
    if "kind" in recipe.task.model_fields_set and recipe.task.kind != expected:
        raise BertkitError(
            f"task.kind is {recipe.task.kind}, but the teacher {teacher.source} is fine-tuned for {expected}; the task "
            "stage distils what the teacher does: leave task.kind unset"
        )
    try:
        recipe.task.refuse_fields_of_other_kinds(expected)
    except ValueError as err:
        raise BertkitError(f"{err} (the teacher {teacher.source} is fine-tuned for {expected})") from None
    longest = min(c.max_position_embeddings - c.position_offset for c in (student_cfg, teacher.config))
    if architecture == "token-classification":
        return _tokens(teacher, recipe, student_cfg, train_file, eval_file, longest)
    if architecture == "question-answering":
        return _spans(teacher, recipe, student_cfg, train_file, eval_file, longest)
    return _sequences(teacher, recipe, student_cfg, train_file, eval_file, longest)


def _sequences(teacher: Teacher, recipe: DistillRecipe, student_cfg: ModelConfig, train_file: Path,
               eval_file: Path | None, longest: int) -> TaskSetup:  # fmt: skip
    task, labels = recipe.task, teacher.labels or []
    train_data = read_task_file(train_file, task, task.split)
    if eval_file is not None:
        eval_data = read_task_file(eval_file, task, task.eval_split)
    else:
        train_idx, eval_idx = split_indices(len(train_data), task.eval_fraction, recipe.train.seed)
        train_data, eval_data = subset(train_data, train_idx), subset(train_data, eval_idx)
    max_len = min(task.max_seq_len, longest)

    def encoded(data: Any, source: Path) -> Any:
        check_labels(teacher, data.labels or [], labels, source, "classes")
        return encode_examples(data.texts, data.pairs, label_indices(data.labels or [], labels, source),
                               teacher.tokenizer, max_len)  # fmt: skip

    train = encoded(train_data, train_file)
    evaluation = encoded(eval_data, eval_file or train_file) if len(eval_data) else None
    use_types = task.text_pair_field is not None and student_cfg.type_vocab_size > 1
    pad = teacher.tokenizer.pad_id
    evaluate = None
    if evaluation is not None:
        evaluate = lambda m, device: evaluate_classifier(  # noqa: E731
            LogitsView(m), ClassificationBatches(evaluation, 64, pad, 0, use_types), device
        )
    return TaskSetup(
        architecture="sequence-classification",
        labels=labels,
        lengths=[len(row) for row in train.input_ids],
        fingerprint=examples_fingerprint(train.input_ids, train.token_type_ids),
        batches=lambda micro, seed: ClassificationBatches(train, micro, pad, seed, use_types),
        student=lambda: DistillStudent(
            student_cfg, num_labels=len(labels), classifier_dropout=task.classifier_dropout, pool=task.pool
        ),  # fmt: skip
        evaluate=evaluate,
        train_count=len(train_data),
        eval_count=len(eval_data),
        meta={"labels": labels, "task": task.model_dump(mode="json")},
        summary={"label_counts": {name: int(np.sum(train.labels == i)) for i, name in enumerate(labels)}},
    )


def _tokens(teacher: Teacher, recipe: DistillRecipe, student_cfg: ModelConfig, train_file: Path,
            eval_file: Path | None, longest: int) -> TaskSetup:  # fmt: skip
    from bertkit.tasks.token_classification import (
        TokenBatches,
        TokenClassifier,
        TokenData,
        encode_sentences,
        evaluate_tagger,
        read_token_file,
        resolve_tags,
    )

    tags = teacher.tags or []
    scheme = str(teacher.task.get("tag_scheme", "auto"))
    train_data = read_token_file(train_file)
    train_tags = resolve_tags(train_data, scheme)
    check_labels(teacher, [t for sentence in train_tags for t in sentence], tags, train_file, "tags")
    if eval_file is not None:
        eval_data = read_token_file(eval_file)
        eval_tags = resolve_tags(eval_data, scheme if scheme != "auto" else train_data.scheme)
        check_labels(teacher, [t for sentence in eval_tags for t in sentence], tags, eval_file, "tags")
    else:
        train_idx, eval_idx = split_indices(len(train_data), recipe.task.eval_fraction, recipe.train.seed)
        eval_data, eval_tags = train_data.subset(eval_idx), [train_tags[i] for i in eval_idx]
        train_data, train_tags = train_data.subset(train_idx), [train_tags[i] for i in train_idx]
    # The teacher's window, which its tags were trained at (a longer one would give the student positions
    # the teacher never saw in training).
    max_len = min(int(teacher.task.get("max_seq_len", recipe.task.max_seq_len)), longest)
    train = encode_sentences(train_data.words, train_tags, tags, teacher.tokenizer, max_len)
    evaluation = None
    if len(eval_data):
        evaluation = encode_sentences(eval_data.words, eval_tags, tags, teacher.tokenizer, max_len)
    pad = teacher.tokenizer.pad_id
    with_entities = train_data.scheme != "none"
    evaluate = None
    if evaluation is not None:
        evaluate = lambda m, device: evaluate_tagger(  # noqa: E731
            m, evaluation, eval_tags, tags, device, pad, with_entities
        )
    return TaskSetup(
        architecture="token-classification",
        labels=tags,
        lengths=[len(row) for row in train.input_ids],
        fingerprint=examples_fingerprint(train.input_ids, None),
        batches=lambda micro, seed: TokenBatches(train, micro, pad, seed),
        student=lambda: TokenClassifier(build_encoder(student_cfg), len(tags), recipe.task.classifier_dropout),
        evaluate=evaluate,
        train_count=len(train_data),
        eval_count=len(eval_data),
        meta={"labels": tags, "task": {**teacher.task, "max_seq_len": max_len}},
        summary={
            "label_counts": TokenData(train_file, train_data.words, train_tags).tag_counts(),
            "tag_scheme": train_data.scheme,
            "train_words": sum(len(w) for w in train_data.words),
        },
    )


def _spans(teacher: Teacher, recipe: DistillRecipe, student_cfg: ModelConfig, train_file: Path,
           eval_file: Path | None, longest: int) -> TaskSetup:  # fmt: skip
    from bertkit.config.schema import qa_doc_stride
    from bertkit.tasks.qa import QABatches, QuestionAnswerer, encode_qa, evaluate_qa, read_qa_split

    task = recipe.task
    train_read, _, train_examples, eval_examples = read_qa_split(
        train_file, eval_file, task.skip_bad_rows, task.eval_fraction, recipe.train.seed
    )
    # The teacher's windows (length and stride, as its fine-tuning resolved them), so each is one it has read.
    max_len = min(int(teacher.task.get("max_seq_len", task.max_seq_len)), longest)
    stride = qa_doc_stride(max_len, teacher.task.get("doc_stride", task.doc_stride))
    use_types = teacher.config.type_vocab_size > 1
    if use_types and student_cfg.type_vocab_size < 2:
        raise BertkitError(
            f"the teacher {teacher.source} reads question and context as two segments, but the student has "
            "no segment embeddings (model.type_vocab_size 1); distil a student with the teacher's type_vocab_size"
        )
    with_null = bool(teacher.task.get("version_2_with_negative", train_read.has_impossible))
    # Answer extraction as the teacher's fine-tuning scored it.
    post = task.model_copy(update={k: teacher.task[k] for k in ("n_best", "max_answer_length", "null_threshold")
                                   if k in teacher.task})  # fmt: skip
    tokenizer = teacher.tokenizer
    train = encode_qa(train_examples, tokenizer, max_len, stride, use_types)
    evaluation = encode_qa(eval_examples, tokenizer, max_len, stride, use_types) if eval_examples else None
    pad = tokenizer.pad_id
    evaluate = None
    if evaluation is not None:
        evaluate = lambda m, device: evaluate_qa(  # noqa: E731
            m, eval_examples, evaluation, device, pad, use_types, post, with_null
        )
    return TaskSetup(
        architecture="question-answering",
        labels=[],
        lengths=[len(row) for row in train.input_ids],
        fingerprint=examples_fingerprint(train.input_ids, train.token_types),
        batches=lambda micro, seed: QABatches(train, micro, pad, seed, use_types),
        student=lambda: QuestionAnswerer(build_encoder(student_cfg)),
        evaluate=evaluate,
        train_count=len(train_examples),
        eval_count=len(eval_examples),
        meta={
            "labels": [],
            "task": {
                **teacher.task,
                "max_seq_len": max_len,
                "doc_stride": stride,
                "version_2_with_negative": with_null,
            },
        },  # fmt: skip
        summary={
            "train_windows": len(train),
            "eval_windows": len(evaluation) if evaluation is not None else 0,
            "unreachable_answers": train.unreachable,
        },  # fmt: skip
    )

"""Extractive question answering (SQuAD v1.1 / v2.0): the answer is a span of the context, read from windows
`[CLS] question [SEP] context [SEP]`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.config.schema import ModelConfig, TaskConfig, qa_context_room, qa_doc_stride
from bertkit.config.task_kinds import SPECS
from bertkit.errors import BertkitError
from bertkit.models.pretraining import build_encoder
from bertkit.tasks.kinds.base import (
    DistillData,
    Evaluate,
    FineTuned,
    GateScore,
    Part,
    Prepared,
    model_inputs,
    saved_task,
    shared_window,
    window,
)
from bertkit.tasks.kinds.sequence import skipped_summary
from bertkit.tasks.qa import (
    QABatches,
    QuestionAnswerer,
    encode_qa,
    evaluate_qa,
    qa_objective,
    read_qa_file,
    read_qa_split,
)
from bertkit.tokenizers.base import Tokenizer

# A logit no softmax can pick, finite so that 0 * log p stays 0 at any temperature (-inf would give NaN).
MASKED = -1.0e4


class SpanKind:
    name = "question-answering"
    architecture = SPECS[name].architecture
    predicts_from = "questions"  # SQuAD JSON or JSON lines of question and context (bertkit/pipelines/predict/qa.py)

    # -- fine-tuning -------------------------------------------------------------------------------------------
    def check_data(self, task: TaskConfig, path: Path, what: str, metrics: tuple[str, ...]) -> None:
        read_qa_file(path, task.skip_bad_rows)

    def prepare(self, task: TaskConfig, model_cfg: ModelConfig, tokenizer: Tokenizer, train_file: Path,
                eval_file: Path | None, seed: int) -> Prepared:  # fmt: skip
        if model_cfg.family == "xlnet":
            raise BertkitError(
                "question answering builds [CLS] question [SEP] context [SEP] windows; XLNet's layout differs. "
                "Use a BERT-family model"
            )
        train_data, eval_read, train_examples, eval_examples = read_qa_split(
            train_file, eval_file, task.skip_bad_rows, task.eval_fraction, seed
        )
        with_null = train_data.has_impossible
        max_len = window(task, model_cfg)
        use_types = model_cfg.type_vocab_size > 1
        # Derived from the window actually used (the model's positions may cap task.max_seq_len) when not set.
        stride = qa_doc_stride(max_len, task.doc_stride)
        train_features = encode_qa(train_examples, tokenizer, max_len, stride, use_types)
        eval_features = encode_qa(eval_examples, tokenizer, max_len, stride, use_types) if eval_examples else None
        pad = tokenizer.pad_id

        def sources(model: nn.Module, micro: int, seed: int, device: torch.device) -> tuple[Any, Evaluate | None]:
            source = QABatches(train_features, micro, pad, seed, use_types)
            if eval_features is None:
                return source, None
            return source, lambda m: evaluate_qa(m, eval_examples, eval_features, device, pad, use_types, task,
                                                 with_null)  # fmt: skip

        summary: dict[str, Any] = {
            "labels": [],
            "version_2_with_negative": with_null,
            "rows_read": train_data.rows_read,
            "rows_skipped": train_data.skipped,
            "answers_shifted": train_data.shifted,
            "train_examples": len(train_examples),
            "eval_examples": len(eval_examples),
            "train_windows": len(train_features),
            "eval_windows": len(eval_features) if eval_features is not None else 0,
            "unreachable_answers": train_features.unreachable,
            **skipped_summary(train_data, eval_read),
        }
        # The window and stride the model was trained with, resolved (a derived stride is saved as a number).
        meta = {**task.model_dump(mode="json"), "max_seq_len": max_len, "doc_stride": stride,
                "version_2_with_negative": with_null}  # fmt: skip
        return Prepared(
            labels=[],
            model_cfg=model_cfg,
            examples=len(train_features),
            metric=task.best_metric,
            build=QuestionAnswerer,
            objective=qa_objective,
            sources=sources,
            task_meta=meta,
            summary=summary,
        )

    # -- distillation ------------------------------------------------------------------------------------------
    def task_model(self, encoder: nn.Module, labels: list[str], task: dict[str, Any]) -> nn.Module:
        """The fine-tuned QA model on `encoder`: a start and an end logit per token."""
        return QuestionAnswerer(encoder)

    def gate_scorer(self, meta: dict[str, Any], model_cfg: ModelConfig, tokenizer: Tokenizer, eval_file: Path,
                    max_len: int) -> tuple[str, GateScore]:  # fmt: skip
        """SQuAD's F1 (already in points) on `eval_file`, its windows encoded once, now, with the doc stride and the
        unanswerable questions the model was fine-tuned with (its metadata's task)."""
        task, saved = saved_task(meta), meta.get("task") or {}
        examples = read_qa_file(eval_file).examples
        stride = saved.get("doc_stride")
        stride = int(stride) if stride is not None and int(stride) < qa_context_room(max_len) else None
        use_types = model_cfg.type_vocab_size > 1
        features = encode_qa(examples, tokenizer, max_len, stride, use_types)
        with_null = bool(saved.get("version_2_with_negative"))
        cpu, pad = torch.device("cpu"), tokenizer.pad_id
        return "f1", lambda m, n: evaluate_qa(m, examples, features, cpu, pad, use_types, task, with_null, n)["f1"]

    def distill_data(self, teacher: FineTuned, task: TaskConfig, student_cfg: ModelConfig, train_file: Path,
                     eval_file: Path | None, seed: int) -> DistillData:  # fmt: skip
        """The teacher's windows (length and stride, as its fine-tuning resolved them), so that each is one it has
        read, and its answer extraction for the evaluation."""
        train_read, _, train_examples, eval_examples = read_qa_split(
            train_file, eval_file, task.skip_bad_rows, task.eval_fraction, seed
        )
        max_len = shared_window(teacher, student_cfg, int(teacher.task.get("max_seq_len", task.max_seq_len)))
        stride = qa_doc_stride(max_len, teacher.task.get("doc_stride", task.doc_stride))
        use_types = teacher.config.type_vocab_size > 1
        if use_types and student_cfg.type_vocab_size < 2:
            raise BertkitError(
                f"the teacher {teacher.source} reads question and context as two segments, but the student has "
                "no segment embeddings (model.type_vocab_size 1); distil a student with the teacher's type_vocab_size"
            )
        with_null = bool(teacher.task.get("version_2_with_negative", train_read.has_impossible))
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
        return DistillData(
            labels=[],
            input_ids=train.input_ids,
            token_types=train.token_types,
            batches=lambda micro, seed: QABatches(train, micro, pad, seed, use_types),
            student=lambda: QuestionAnswerer(build_encoder(student_cfg)),
            evaluate=evaluate,
            train_count=len(train_examples),
            eval_count=len(eval_examples),
            meta={**teacher.task, "max_seq_len": max_len, "doc_stride": stride, "version_2_with_negative": with_null},
            summary={
                "train_windows": len(train),
                "eval_windows": len(evaluation) if evaluation is not None else 0,
                "unreachable_answers": train.unreachable,
            },
        )

    # -- per window, a distribution over its positions for the answer's start and one for its end,
    # each weighted 1/2 as in the gold QA loss, padding masked out of both softmaxes -------------------------------
    def logits(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        out = model(*model_inputs(batch))
        return torch.stack([out["start_logits"], out["end_logits"]], dim=-1)

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return float(batch["input_ids"].shape[0])

    def rows(self, student: torch.Tensor, teacher: torch.Tensor, batch: dict[str, torch.Tensor]) -> list[Part]:
        padding = ~batch["attention_mask"].bool()[..., None]
        student = student.float().masked_fill(padding, MASKED)
        teacher = teacher[:, : student.shape[1]].float().masked_fill(padding, MASKED)
        gold = (batch["start_positions"], batch["end_positions"])
        return [(student[..., i], teacher[..., i], gold[i], 0.5) for i in range(2)]

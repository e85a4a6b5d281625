"""What a task kind is to bertkit: how its data is read and encoded, the model it trains, its objective and
metrics (`prepare`, for `finetune`), the same data lined up with a teacher fine-tuned for it and the student the
distillation task stage trains (`distill_data`), what that teacher gives it (`logits`, `count`, `rows`), and what
`predict` writes for each input row (`predictor`). One file per kind
(sequence.py, tokens.py, spans.py); bertkit/tasks/kinds/__init__.py is the registry.

The distillation half: TinyBERT's L_pred is a soft cross-entropy between teacher's and student's output
distributions; a kind gives its logits in one layout, the one the teacher-output cache stores (bertkit/distill/
cache.py): (B, C) for sequences, (B, T, C) for tokens, (B, T, 2) for spans (start, end). `rows` turns a batch of
student logits and the teacher's (cached ones padded to the longest example, so cut to the batch's length) into
(student rows, teacher rows, gold targets, weight) parts, each row one distribution.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import torch
from torch import nn

from bertkit.config.schema import ModelConfig, TaskConfig
from bertkit.config.task_config import saved_task_config
from bertkit.config.task_kinds import SPEC_BY_ARCHITECTURE
from bertkit.errors import BertkitError
from bertkit.tokenizers.base import Tokenizer

Part = tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]
Evaluate = Callable[[nn.Module], dict[str, float]]


@dataclass
class Prepared:
    """A task's data read and encoded for one fine-tuning run, everything checked, nothing written yet."""

    labels: list[str]  # classes or tags in the model's output order; [] for regression and QA
    model_cfg: ModelConfig  # the encoder's configuration (XLNet's classifiers add a summary layer)
    examples: int  # what an epoch passes over: examples, or QA windows
    metric: str  # the evaluation metric that picks the best model
    # The task model around a freshly built encoder, and whether the pretrained encoder must fill it exactly.
    build: Callable[[nn.Module], nn.Module]
    objective: Any
    # (model, micro-batch size, seed, device) -> (training source, evaluation or None): a kind that freezes the
    # encoder (feature-based) computes its features here.
    sources: Callable[[nn.Module, int, int, torch.device], tuple[Any, Evaluate | None]]
    task_meta: dict[str, Any]  # what bertkit_model.json records of the task (predict and export read it)
    summary: dict[str, Any] = field(default_factory=dict)  # what the run summary adds
    # Encoder keys a pretrained checkpoint may lack: they start fresh (XLNet's sequence summary).
    fresh: tuple[str, ...] = ()
    model_meta: dict[str, Any] = field(default_factory=dict)  # what bertkit_model.json adds (a bi-encoder's pooling)
    # The loss compares the examples of a batch with each other (in-batch negatives, CoSENT): the batch must be
    # one pass, so gradient accumulation is refused.
    whole_batch: bool = False
    # The frozen encoder's features of every training target, for a head fitted by L-BFGS (task.mode=feature,
    # task.head_solver=lbfgs): (model, device) -> ProbeData (bertkit/tasks/probe.py); None: the kind has no head
    # of that kind to fit.
    probe: Callable[[nn.Module, torch.device], Any] | None = None


@dataclass
class FineTuned:
    """What the distillation task stage tells a kind of its teacher, the model fine-tuned for the kind."""

    source: str  # where it was loaded from (named in errors)
    outputs: list[str]  # its classes or tags, in the order of its logits; [] for QA
    task: dict[str, Any]  # the task settings it was fine-tuned with (bertkit_model.json's `task`)
    tokenizer: Tokenizer
    config: ModelConfig
    huggingface: bool  # a transformers checkpoint: its output names are config.json's id2label


@dataclass
class DistillData:
    """A task's data read for the distillation task stage as `finetune` reads it for the kind, lined up with the
    teacher (its classes or tags in its order, its windows), and the student that learns the teacher's outputs."""

    labels: list[str]  # the teacher's outputs
    input_ids: list[np.ndarray]  # every training sequence (an example, a sentence, a QA window), in order
    token_types: list[np.ndarray] | None  # their segment ids, where the batches give them
    batches: Callable[[int, int], Any]  # (micro-batch size, seed) -> resumable batches of those sequences
    student: Callable[[], nn.Module]  # the student's encoder with a fresh head of the teacher's shape
    evaluate: Callable[[nn.Module, torch.device], dict[str, float]] | None
    train_count: int
    eval_count: int
    meta: dict[str, Any]  # the distilled model's bertkit_model.json `task`
    summary: dict[str, Any] = field(default_factory=dict)  # what the run summary adds


def check_outputs(teacher: FineTuned, data_labels: list[str], source: Path, what: str) -> None:
    """Every label of the task data must be one the teacher predicts: gold labels and the teacher's outputs are
    matched by name. A mismatch names where the teacher's names come from."""
    unknown = sorted(set(data_labels) - set(teacher.outputs))
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
        f"does not predict (its {what}: {teacher.outputs[:10]}); {fix}"
    )


# What `bertkit predict` gives a kind to run its model: token ids of each row (and segment ids, or None) in, that
# row's logits out, in input order ((C,) for a sequence, (T, C) for tokens); batching and the device are its own.
RunModel = Callable[[list[np.ndarray], list[np.ndarray] | None], list[np.ndarray]]


@dataclass
class PredictRequest:
    """What a kind's predictor needs to know of the model and the input."""

    meta: dict[str, Any]  # the fine-tuned model's bertkit_model.json (task settings, labels)
    tokenizer: Tokenizer
    max_len: int  # tokens per input
    type_vocab_size: int
    source: Path  # the input file (named in errors)
    plain_text: bool  # text lines, not a table or JSON lines
    text_field: str | None  # --text-field (None: the kind's default)
    pair_field: str | None  # --text-pair-field


@dataclass
class RowPredictor:
    """A kind's prediction over rows of a table, JSON lines or text lines: the fields it reads, and the records
    (one JSON object per row) of a chunk of (where, row) pairs."""

    fields: list[str]
    records: Callable[[list[tuple[str, Any]], RunModel], list[dict[str, Any]]]


def row_text(source: Path, where: str, row: Any, field: str | None) -> str:
    """The text of one input row (a line of a text file, or `field` of a record); one line when it has none."""
    value = row if field is None else row.get(field)
    if not isinstance(value, str) or not value.strip():
        what = "missing or empty" if value is None or isinstance(value, str) else f"a {type(value).__name__}"
        named = f"({field!r}) " if field else ""
        raise BertkitError(f"{source} {where}: text {named}is {what}; fix the row")
    return value


# A model's score in points (0-100) on a file encoded once, given the model and the batch size to score it in: what
# the ONNX export's int8 gate compares (the PyTorch module, or an ONNX graph run in bertkit's call).
GateScore = Callable[[Any, int], float]


class TaskKind(Protocol):
    name: str  # task.kind
    architecture: str  # bertkit_model.json's name of a model fine-tuned for it (predict and export read it)
    # What `bertkit predict` reads for it: rows (tables, JSON lines, text lines), or SQuAD's question files.
    predicts_from: Literal["rows", "questions"]

    def check_data(self, task: TaskConfig, path: Path, what: str, metrics: tuple[str, ...]) -> None:
        """Read a suite's `what` file (train, eval, an extra dev set) as its cells will, so that `bertkit evaluate`
        fails before the first cell; `metrics` are what the suite ranks and scores the task by, the first ranking."""
        ...

    def prepare(self, task: TaskConfig, model_cfg: ModelConfig, tokenizer: Tokenizer, train_file: Path,
                eval_file: Path | None, seed: int) -> Prepared: ...  # fmt: skip

    def distill_data(self, teacher: FineTuned, task: TaskConfig, student_cfg: ModelConfig, train_file: Path,
                     eval_file: Path | None, seed: int) -> DistillData: ...  # fmt: skip

    def logits(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...

    def count(self, batch: dict[str, torch.Tensor]) -> float: ...

    def rows(self, student: torch.Tensor, teacher: torch.Tensor, batch: dict[str, torch.Tensor]) -> list[Part]: ...

    def predictor(self, request: PredictRequest) -> RowPredictor: ...  # the kinds that predict from rows

    # The kinds with a task head (config/task_kinds.py's KindSpec.head): their fine-tuned model on an encoder, as
    # its metadata describes it (`labels`, the saved `task`), and the export gate's scorer on an evaluation file.
    def task_model(self, encoder: nn.Module, labels: list[str], task: dict[str, Any]) -> nn.Module: ...

    def gate_scorer(self, meta: dict[str, Any], model_cfg: ModelConfig, tokenizer: Tokenizer, eval_file: Path,
                    max_len: int) -> tuple[str, GateScore]: ...  # fmt: skip


def saved_task(meta: dict[str, Any]) -> TaskConfig:
    """The task a model was fine-tuned with, as its kind's class, from its metadata (which adds resolved entries of
    its own, such as the QA window's `version_2_with_negative`: only the class's fields are read)."""
    saved = dict(meta.get("task") or {})
    architecture = meta.get("architecture")
    if "kind" not in saved and isinstance(architecture, str) and architecture in SPEC_BY_ARCHITECTURE:
        saved["kind"] = SPEC_BY_ARCHITECTURE[architecture].name
    return saved_task_config(saved)


def model_inputs(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    return batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids")


def window(task: TaskConfig, model_cfg: ModelConfig) -> int:
    """Tokens per example: task.max_seq_len, never more than the model's positions."""
    return min(task.max_seq_len, positions(model_cfg))


def positions(model_cfg: ModelConfig) -> int:
    """The longest input the model reads."""
    return model_cfg.max_position_embeddings - model_cfg.position_offset


def shared_window(teacher: FineTuned, student_cfg: ModelConfig, wanted: int) -> int:
    """Tokens per example when distilling: `wanted`, never more than teacher or student can read."""
    return min(wanted, positions(teacher.config), positions(student_cfg))

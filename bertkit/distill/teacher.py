"""The teacher: found from a name or a directory, loaded once, frozen.

`--teacher` is a bertkit run or model directory, a Hugging Face checkpoint directory, or a Hugging Face hub
name (downloaded into the hub cache, or read from it offline): bertkit/modelio/modeldir.py's
`resolve_model_path(spec, hub=True)` turns it into a local directory. `Teacher` is a plain frozen nn.Module
with the student's output structure; placing it on a device or sharding it is the engine's job, not its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.config.schema import ModelConfig
from bertkit.config.task_kinds import SPEC_BY_ARCHITECTURE, SPECS, head_of
from bertkit.engine.checkpoint import load_state
from bertkit.errors import BertkitError
from bertkit.modelio.modeldir import load_model_dir
from bertkit.models.with_heads import EncoderWithHeads, HeadsOutput
from bertkit.tokenizers.base import Tokenizer

# The heads of fine-tuned taggers (`classifier.*` on every token) and QA models (`qa_outputs.*`).
TASK_HEAD_KEYS = ("classifier.", "qa_outputs.", "head.")  # `head.`: ModernBERT's dense-act-norm before them
# The task heads (config/task_kinds.py's KindSpec.head) read on every token: a teacher keeps them apart from the
# sequence classifier EncoderWithHeads has, and `task_head` puts them back on its encoder.
PER_TOKEN_HEADS = ("token", "span")


def teacher_kind(spec: str) -> str | None:
    """The task kind a bertkit fine-tuned teacher records, from its metadata alone (no weights read); None for a
    model that records none (a Hugging Face checkpoint, a pretraining run)."""
    from bertkit.fsutil import read_json
    from bertkit.modelio.modeldir import MODEL_META, resolve_model_path

    meta_path = resolve_model_path(spec, hub=True) / MODEL_META
    architecture = read_json(meta_path, "model metadata").get("architecture") if meta_path.is_file() else None
    spec_ = SPEC_BY_ARCHITECTURE.get(architecture) if isinstance(architecture, str) else None
    return spec_.name if spec_ is not None else None


def teacher_task(spec: str) -> str:
    """Whose task-stage recipe a teacher takes: the kind of a bertkit tagger or QA model (`token-classification`,
    `question-answering`), else `classification` (the task stage then checks that it is a classifier)."""
    kind = teacher_kind(spec)
    if kind is not None and head_of(SPECS[kind].architecture) in PER_TOKEN_HEADS:
        return kind
    return "classification"


class Teacher(EncoderWithHeads):
    """A frozen teacher: encoder + MLM head (if its checkpoint has one) + classifier (if it is a bertkit
    fine-tuned classifier, or a Hugging Face BERT/ALBERT/RoBERTa *ForSequenceClassification checkpoint, whose
    head bertkit/interop/hf.py maps onto the same one), in eval mode for good, every forward under no_grad.

    Build it with `Teacher.load(spec)`. Its output is the student's `HeadsOutput` (`projected` is
    `hidden_states`: the teacher's width is the target).
    """

    def __init__(
        self,
        cfg: ModelConfig,
        weights: dict[str, torch.Tensor],
        tokenizer: Tokenizer,
        labels: list[str] | None = None,
        source: str = "teacher",
        pool: str = "cls",
        huggingface: str | None = None,
        architecture: str | None = None,
        task: dict[str, Any] | None = None,
    ) -> None:
        has_mlm = "mlm_head.dense.weight" in weights
        has_classifier = labels is not None and "classifier.weight" in weights
        num_labels = len(labels) if has_classifier and labels else None
        super().__init__(cfg, mlm_head=has_mlm, num_labels=num_labels, pool=pool)
        self.tokenizer, self.labels, self.source = tokenizer, labels if has_classifier else None, source
        # The HF class of a Hugging Face checkpoint (its labels then come from config.json's id2label).
        self.huggingface = huggingface
        # What the teacher was fine-tuned for (bertkit_model.json's architecture and task): the task stage
        # distils a tagger's or a QA model's head too (`task_head`), with the windows it was trained on.
        self.architecture, self.task = architecture, dict(task or {})
        per_token = head_of(architecture) in PER_TOKEN_HEADS
        self.head_state = {k: v for k, v in weights.items() if k.startswith(TASK_HEAD_KEYS) and per_token}
        own = self.state_dict()
        # Heads the teacher does not use (NSP, SOP, ELECTRA's generator) stay behind.
        load_state(self, {k: v for k, v in weights.items() if k in own}, source)
        self.requires_grad_(False)
        self.eval()

    @classmethod
    def load(cls, spec: str | Path) -> Teacher:
        model_dir, meta, cfg, weights, tokenizer = load_model_dir(str(spec), hub=True)
        if cfg.family == "xlnet":
            raise BertkitError(
                f"the teacher {model_dir} is an XLNet model; distillation reads BERT-family encoders (BERT, RoBERTa, "
                "ALBERT, ELECTRA, DistilBERT, BigBird), not XLNet's two-stream attention: pick another teacher"
            )
        architecture = str(meta.get("architecture"))
        # A sequence classifier the task stage distils (softmax over classes) brings its classes; a tagger its tags.
        spec = SPEC_BY_ARCHITECTURE.get(architecture)
        distilled = spec is not None and spec.distill_recipe is not None and spec.head == "sequence"
        labels = _labels(meta, model_dir) if distilled else None
        # A classifier fine-tuned with task.pool=mean reads the mean of the hidden states, not [CLS].
        pool = str((meta.get("task") or {}).get("pool", "cls"))
        huggingface = meta.get("huggingface") or (
            architecture.removeprefix("huggingface:") if architecture.startswith("huggingface:") else None
        )
        task = meta.get("task") if isinstance(meta.get("task"), dict) else None
        teacher = cls(cfg, weights, tokenizer, labels, str(model_dir), pool, huggingface, architecture, task)
        if head_of(architecture) == "token":
            teacher.tags = _labels(meta, model_dir)
        return teacher

    tags: list[str] | None = None  # a tagger's tags, in the order of its classifier's outputs

    def task_head(self) -> nn.Module:
        """A tagger's or QA model's head on this teacher's encoder, frozen, as the fine-tuned model ran it:
        TokenClassifier's `{"logits"}` or QuestionAnswerer's `{"start_logits", "end_logits"}`."""
        from bertkit.tasks.kinds import task_kind

        if not self.head_state:
            raise BertkitError(f"the teacher {self.source} has no token-classification or question-answering head")
        model = task_kind(str(self.architecture)).task_model(self.encoder, self.tags or [], self.task)
        # The encoder is this teacher's own, already loaded: only the head's weights go in (all of them).
        own = {k: v for k, v in model.state_dict().items() if k.startswith("encoder.")}
        load_state(model, {**own, **self.head_state}, self.source)
        return FrozenHead(model, self.config)

    @property
    def has_mlm_head(self) -> bool:
        return self.mlm_head is not None

    @property
    def has_classifier(self) -> bool:
        return self.classifier is not None

    def train(self, mode: bool = True) -> Teacher:
        # Always eval: a caller switching a whole model tree to training must not turn on its dropout.
        return super().train(False)

    def forward(self, *args: Any, **kwargs: Any) -> HeadsOutput:
        """EncoderWithHeads.forward under no_grad: nothing the teacher computes is ever differentiated."""
        with torch.no_grad():
            return super().forward(*args, **kwargs)


class FrozenHead(nn.Module):
    """A fine-tuned model used as a teacher: eval mode for good, every forward under no_grad. `config` is the
    encoder's, which the teacher-output cache's key reads."""

    def __init__(self, model: nn.Module, config: ModelConfig) -> None:
        super().__init__()
        self.model, self.config = model.requires_grad_(False).eval(), config

    def train(self, mode: bool = True) -> FrozenHead:
        return super().train(False)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self.model(*args, **kwargs)


def _labels(meta: dict[str, Any], model_dir: Path) -> list[str]:
    labels = meta.get("labels")
    if not isinstance(labels, list) or len(labels) < 2:
        where = "config.json's id2label" if meta.get("huggingface") else "bertkit_model.json"
        raise BertkitError(f"the teacher {model_dir} is a sequence classifier without two or more labels in {where}")
    return [str(label) for label in labels]

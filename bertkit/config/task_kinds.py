"""What each task kind is, in one description apiece: its configuration class (the task keys it reads, its metrics;
config/task_config.py), and what the commands may do with it (probe it, score more dev sets, distil it, fine-tune
XLNet for it, score it as it is).

Light on purpose (no torch): recipes and suites are validated against these descriptions before any model code is
imported. The code that runs a kind (reading, encoding, the model, the objective) is its module under
bertkit/tasks/kinds/, registered under the same name. A command asks the description; it never compares the name.
"""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.config.task_config import (
    COMMON_TASK_FIELDS,
    ClassificationTask,
    MultiLabelTask,
    QuestionAnsweringTask,
    RegressionTask,
    RetrievalTask,
    SimilarityTask,
    TaskConfig,
    TokenClassificationTask,
)
from bertkit.errors import BertkitError


@dataclass(frozen=True)
class KindSpec:
    """One task kind, as configuration and the commands see it."""

    config: type[TaskConfig]  # the class of its `task:` section: the keys it reads, its metrics
    architecture: str  # what bertkit_model.json calls a model fine-tuned for it
    probe: bool = False  # `evaluate --probe` fits a linear head on the frozen encoder for it
    extra_eval: bool = False  # a fine-tuned model scores more dev sets (a suite task's `extra_eval`)
    xlnet: bool = True  # bertkit fine-tunes an XLNet for it
    percent: bool = False  # its metrics are percentages already (SQuAD's script), not fractions
    scores_as_is: bool = False  # its model is the encoder itself: a suite task without a train file scores it as is
    # The distillation task stage's recipe for a teacher of this kind; None: the stage does not distil it.
    distill_recipe: str | None = None
    # What a row's label holds: one class name (str), a number (float) or a list of label names (list).
    label_type: str = "str"
    # The named outputs of its fine-tuned model (the ONNX export's output names).
    outputs: tuple[str, ...] = ("logits",)
    # The head of its fine-tuned model: "sequence" (one row of outputs per input, read at [CLS] or the mean),
    # "token" (one row per token), "span" (a start and an end logit per token), or None (a bi-encoder: the
    # encoder and its pooling are the model).
    head: str | None = "sequence"
    # transformers' name for it: the class after the family's prefix (BertForSequenceClassification) and
    # config.json's problem_type; None where transformers has none.
    hf_class: str | None = None
    hf_problem_type: str | None = None

    @property
    def name(self) -> str:
        """task.kind."""
        return str(self.config.model_fields["kind"].default)

    @property
    def metrics(self) -> tuple[str, ...]:
        """What it reports; the first is the default `task.metric`."""
        return self.config.METRICS

    @property
    def fields(self) -> frozenset[str]:
        """The task keys it reads beyond COMMON_TASK_FIELDS."""
        return frozenset(self.config.model_fields) - COMMON_TASK_FIELDS


SPECS: dict[str, KindSpec] = {
    spec.name: spec
    for spec in (
        KindSpec(ClassificationTask, "sequence-classification", probe=True, extra_eval=True,
                 distill_recipe="distill-task", hf_class="ForSequenceClassification",
                 hf_problem_type="single_label_classification"),
        KindSpec(MultiLabelTask, "sequence-multi-label", probe=True, extra_eval=True, label_type="list",
                 hf_class="ForSequenceClassification", hf_problem_type="multi_label_classification"),
        KindSpec(RegressionTask, "sequence-regression", probe=True, extra_eval=True, label_type="float",
                 hf_class="ForSequenceClassification", hf_problem_type="regression"),
        # CoNLL / CoNLL-U / JSON lines of tokens and tags: no columns to name; the encoder may be frozen.
        KindSpec(TokenClassificationTask, "token-classification", probe=True,
                 distill_recipe="distill-task-token-classification", head="token", hf_class="ForTokenClassification"),
        KindSpec(QuestionAnsweringTask, "question-answering", xlnet=False, percent=True,
                 distill_recipe="distill-task-question-answering", outputs=("start_logits", "end_logits"),
                 head="span", hf_class="ForQuestionAnswering"),
        # Bi-encoders: pairs files (any table format) or a BEIR folder to score on; the vectors are the model.
        KindSpec(RetrievalTask, "retrieval-bi-encoder", xlnet=False, scores_as_is=True, head=None),
        KindSpec(SimilarityTask, "similarity-bi-encoder", xlnet=False, scores_as_is=True, head=None),
    )  # fmt: skip
}


def kind_spec(name: str) -> KindSpec:
    """The description of `task.kind` `name`; one line naming the kinds for an unknown one."""
    try:
        return SPECS[name]
    except KeyError:
        raise BertkitError(f"'{name}' is not a task kind; use one of {', '.join(SPECS)}") from None


SPEC_BY_ARCHITECTURE: dict[str, KindSpec] = {spec.architecture: spec for spec in SPECS.values()}


def spec_of_architecture(architecture: str) -> KindSpec:
    """The description of the kind whose fine-tuned models record `architecture`."""
    try:
        return SPEC_BY_ARCHITECTURE[architecture]
    except KeyError:
        raise BertkitError(f"'{architecture}' is not the architecture of a task kind bertkit fine-tunes") from None

# The architectures of the fine-tuned models with a task head (what `predict`, the ONNX export and `--head
# classifier` serve as task models; bi-encoders are served as encoders).
HEADED_ARCHITECTURES = tuple(spec.architecture for spec in SPECS.values() if spec.head is not None)


def head_of(architecture: object) -> str | None:
    """The task head of a model whose metadata names `architecture` (see KindSpec.head); None for a bi-encoder or
    a model that is not fine-tuned for a task kind (a pretraining model, a Hugging Face checkpoint)."""
    spec = SPEC_BY_ARCHITECTURE.get(architecture) if isinstance(architecture, str) else None
    return spec.head if spec is not None else None


def kinds_that(capability: str) -> list[str]:
    """The kinds with `capability` set (for messages that list them)."""
    return [name for name, spec in SPECS.items() if getattr(spec, capability)]

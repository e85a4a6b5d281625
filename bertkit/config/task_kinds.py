"""What each task kind is, in one description apiece: its metrics, the task keys it reads, and what the commands may
do with it (probe it, score more dev sets, distil it, fine-tune XLNet for it, score it as it is).

Light on purpose (no torch): recipes and suites are validated against these descriptions before any model code is
imported. The code that runs a kind (reading, encoding, the model, the objective) is its module under
bertkit/tasks/kinds/, registered under the same name. A command asks the description; it never compares the name.
"""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.errors import BertkitError

# Every kind reads these task keys (TaskConfig.refuse_fields_of_other_kinds refuses the others' keys).
COMMON_TASK_FIELDS = frozenset({"kind", "metric", "early_stopping_patience", "eval_fraction", "max_seq_len"})
_SEQUENCE_FIELDS = frozenset({"text_field", "text_pair_field", "label_field", "split", "eval_split", "skip_bad_rows",
                              "columns", "quoting", "pool", "classifier_dropout", "mode", "head_solver",
                              "probe_l2"})  # fmt: skip
_BI_ENCODER_FIELDS = frozenset({"split", "eval_split", "skip_bad_rows", "pooling", "normalize", "scale"})


@dataclass(frozen=True)
class KindSpec:
    """One task kind, as configuration and the commands see it."""

    name: str  # task.kind
    architecture: str  # what bertkit_model.json calls a model fine-tuned for it
    metrics: tuple[str, ...]  # what it reports; the first is the default `task.metric`
    fields: frozenset[str]  # the task keys it reads beyond COMMON_TASK_FIELDS
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


SPECS: dict[str, KindSpec] = {
    spec.name: spec
    for spec in (
        # mcc: Matthews correlation (GLUE's CoLA metric); f1: the positive class's F1 (index 1 of the sorted labels)
        # of a two-class task only (GLUE's MRPC and QQP metric).
        KindSpec("classification", "sequence-classification", ("accuracy", "macro_f1", "mcc", "f1"), _SEQUENCE_FIELDS,
                 probe=True, extra_eval=True, distill_recipe="distill-task", hf_class="ForSequenceClassification",
                 hf_problem_type="single_label_classification"),
        # Per (example, label) decisions at task.threshold: micro/macro F1 over the labels, exact-match accuracy.
        KindSpec("multi-label", "sequence-multi-label", ("micro_f1", "macro_f1", "subset_accuracy"),
                 _SEQUENCE_FIELDS | {"label_separator", "threshold"}, probe=True, extra_eval=True, label_type="list",
                 hf_class="ForSequenceClassification", hf_problem_type="multi_label_classification"),
        KindSpec("regression", "sequence-regression", ("pearson", "spearman", "mse"), _SEQUENCE_FIELDS, probe=True,
                 extra_eval=True, label_type="float", hf_class="ForSequenceClassification",
                 hf_problem_type="regression"),
        # Entity-level micro precision/recall/F1 by exact span (seqeval's default), and word-level tag accuracy.
        # CoNLL / CoNLL-U / JSON lines of tokens and tags: no columns to name; the encoder may be frozen.
        KindSpec("token-classification", "token-classification", ("f1", "precision", "recall", "accuracy"),
                 frozenset({"tag_scheme", "classifier_dropout", "mode", "head_solver", "probe_l2"}), probe=True,
                 distill_recipe="distill-task-token-classification", head="token", hf_class="ForTokenClassification"),
        # SQuAD's exact match and token F1 (percent), each the maximum over a question's gold answers; windows over
        # the context, and how answers are read off them.
        KindSpec("question-answering", "question-answering", ("f1", "exact_match"),
                 frozenset({"skip_bad_rows", "doc_stride", "n_best", "max_answer_length", "null_threshold"}),
                 xlnet=False, percent=True, distill_recipe="distill-task-question-answering",
                 outputs=("start_logits", "end_logits"), head="span", hf_class="ForQuestionAnswering"),
        # Ranking metrics of exact search over the corpus, as trec_eval (pytrec_eval, BEIR) computes them; pairs
        # files (any table format) or a BEIR folder to score on; the vectors and the ranking loss.
        KindSpec("retrieval", "retrieval-bi-encoder", ("ndcg@10", "mrr@10", "recall@100", "map@100"),
                 _BI_ENCODER_FIELDS | {"query_field", "positive_field", "negative_field", "qrels_split", "symmetric",
                                       "matryoshka_dims", "cache_chunk", "gather_negatives", "teacher",
                                       "distill_weight", "distill_loss"},
                 xlnet=False, scores_as_is=True, head=None),
        # Correlation of the cosine similarity with the gold score (MTEB scores STS by Spearman).
        KindSpec("similarity", "similarity-bi-encoder", ("spearman", "pearson"),
                 _BI_ENCODER_FIELDS | {"text_field", "text_pair_field", "label_field", "columns", "quoting",
                                       "similarity_loss"},
                 xlnet=False, scores_as_is=True, head=None),
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

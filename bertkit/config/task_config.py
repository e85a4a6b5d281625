"""A recipe's `task:` section: one configuration class per task kind, chosen by `kind` (classification when left
out), as the `model:` section's class is chosen by `family`. Each class holds the keys its kind reads and no
other, so a key of another kind is refused by the class itself, with the kinds that read it.

    TaskConfig ─┬─ SequenceTask ─┬─ ClassificationTask, RegressionTask
                │                └─ MultiLabelTask (label_separator, threshold)
                ├─ TokenClassificationTask
                ├─ QuestionAnsweringTask
                └─ BiEncoderTask ─┬─ RetrievalTask
                                  └─ SimilarityTask

The shared keys live in small bases (a table's columns, a DatasetDict's splits, a trained head), each with the
checks of its own keys. `TaskConfig.model_validate(mapping)` and `TaskConfig(kind=..., ...)` build the kind's
class. Light on purpose (pydantic only): recipes and suites are validated before any model code is imported.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import Discriminator, Field, Tag, ValidationError, model_validator

from bertkit.config.strict import ChosenByKey, StrictModel

DEFAULT_KIND = "classification"
# Question answering reads windows `[CLS] question [SEP] context [SEP]`: 3 special tokens, a question of at most
# BERT's max_query_length (64) tokens and half the window, and the rest for the context.
QA_SPECIAL_TOKENS = 3


def qa_question_tokens(max_len: int) -> int:
    """Question tokens a window of `max_len` keeps: at most 64 (BERT's max_query_length) and half the window."""
    return max(1, min(64, (max_len - QA_SPECIAL_TOKENS) // 2))


def qa_context_room(max_len: int) -> int:
    """The least context a window of `max_len` holds: what the longest question kept leaves."""
    return max_len - QA_SPECIAL_TOKENS - qa_question_tokens(max_len)


def qa_doc_stride(max_len: int, doc_stride: int | None) -> int:
    """Context tokens two windows share: `doc_stride` when set, else derived from the window, a third of it (128
    for 384, as transformers' run_qa.py) and always less than the context room, so it fits by construction."""
    if doc_stride is not None:
        return doc_stride
    return max(0, min(max_len // 3, qa_context_room(max_len) - 1))


class TaskConfig(ChosenByKey):
    """A fine-tuning task: the keys every kind reads. Each kind's class adds its own (see the module's notes)."""

    # What the task learns. classification: labels are classes (cross-entropy). regression: labels are numbers
    # (MSE; STS-B). multi-label: any number of labels per row (a JSON list, or one string joined by
    # label_separator); a sigmoid per label, binary cross-entropy per (example, label). token-classification: one
    # tag per word (NER, POS) from CoNLL, CoNLL-U or JSON lines (tokens, tags). question-answering: extractive QA
    # (the answer is a span of the context) from SQuAD JSON or JSON lines. retrieval: a bi-encoder trained on
    # (query, positive[, negative]) pairs with in-batch negatives, scored by exact search over a BEIR folder or a
    # pairs file. similarity: a bi-encoder trained on scored sentence pairs (CoSENT), scored by the Spearman
    # correlation of the cosine (MTEB's STS protocol).
    kind: str = DEFAULT_KIND
    # Evaluation metric that picks the best model (model/ holds the best evaluation's weights); None: the kind's
    # first metric (accuracy for classification, pearson for regression, ndcg@10 for retrieval).
    metric: str | None = None
    # Stop after this many evaluations without improving `metric`; 0 never stops early.
    early_stopping_patience: int = Field(0, ge=0)
    # Held out from the training file when no --eval file is given.
    eval_fraction: float = Field(0.1, ge=0.0, lt=0.5)
    # Tokens per example (per window, for question answering), special tokens included.
    max_seq_len: int = Field(128, gt=2)

    # What the kind reports, each a possible `metric`; the first is the default (each kind's class sets them).
    METRICS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def chosen_class(cls, data: dict[str, Any]) -> type[TaskConfig] | None:
        """`TaskConfig(kind=..., ...)` and `TaskConfig.model_validate(mapping)` build the kind's class."""
        return task_config_class(data.get("kind", DEFAULT_KIND)) if cls is TaskConfig else None

    @model_validator(mode="before")
    @classmethod
    def _keys_of_other_kinds(cls, data: Any) -> Any:
        """A key this kind does not read but another does: one message naming the kinds that read it. At the
        value it has wherever it is read (its default) it changes nothing and is dropped (a shared recipe's
        `text_field: text` on a question-answering task)."""
        if cls is TaskConfig or not isinstance(data, dict):
            return data
        kept = {}
        for key, value in data.items():
            readers = [name for name, other in TASK_CONFIG_CLASSES.items() if key in other.model_fields]
            if key in cls.model_fields or not readers:  # its own, or unknown everywhere (refused as unknown)
                kept[key] = value
            elif any(value != TASK_CONFIG_CLASSES[name].model_fields[key].default for name in readers):
                raise ValueError(
                    f"task.{key} does not apply to a {cls.model_fields['kind'].default} task (it is read by "
                    f"{', '.join(readers)}); remove it"
                )
        return kept

    @model_validator(mode="after")
    def _metric_fits_kind(self) -> TaskConfig:
        if self.metric is not None and self.metric not in self.METRICS:
            raise ValueError(
                f"task.metric '{self.metric}' is not a {self.kind} metric; use one of {', '.join(self.METRICS)}"
            )
        return self

    @property
    def best_metric(self) -> str:
        return self.metric or self.METRICS[0]

    def reads(self, key: str) -> bool:
        """Whether this kind reads task key `key`."""
        return key in type(self).model_fields


class _Splits(StrictModel):
    # The split of a DatasetDict directory (datasets' save_to_disk) to train on / evaluate on.
    split: str | None = None
    # The split of the --eval DatasetDict directory to evaluate on.
    eval_split: str | None = None


class _BadRows(StrictModel):
    # Rows with a missing or empty text or label: an error naming the row (false), or skipped and counted.
    skip_bad_rows: bool = False


class _Columns(StrictModel):
    # Column / field holding the text (the question, for question answering).
    text_field: str = "text"
    # Column / field holding the second text of a pair; None: single texts.
    text_pair_field: str | None = None
    # Column / field holding the label (or labels, for multi-label; the score, for similarity).
    label_field: str = "label"
    # Names for the columns of a CSV/TSV file without a header row, in file order (GLUE's CoLA:
    # [source, label, mark, sentence]); the first row is then data, and every row must have that many fields.
    # None: the first row is the header. CSV/TSV files only (JSON lines, Parquet and datasets name their fields).
    columns: list[str] | None = None
    # How CSV/TSV fields are quoted. "csv": a field may be quoted as spreadsheets write them (commas, quotes and
    # newlines inside quotes). "none": a field is everything between separators, quotes included, and a row is
    # a line (GLUE's TSV files, whose sentences hold unbalanced quotes). CSV/TSV files only.
    quoting: Literal["csv", "none"] = "csv"

    @model_validator(mode="after")
    def _columns_valid(self) -> _Columns:
        """Checked when the recipe is read, not at the first row: a headerless file's names are the only
        way to pick its text and label columns, so an empty or ambiguous list could never work."""
        if self.columns is None:
            return self
        if not self.columns:
            raise ValueError("task.columns is empty; name every column of the headerless file, or leave it unset")
        blank = [i + 1 for i, name in enumerate(self.columns) if not name.strip()]
        if blank:
            raise ValueError(f"task.columns: column {blank[0]} has a blank name; give every column a name")
        repeated = sorted({name for name in self.columns if self.columns.count(name) > 1})
        if repeated:
            raise ValueError(
                f"task.columns names {', '.join(repr(n) for n in repeated)} more than once; names must be unique"
            )
        return self


class _Head(StrictModel):
    # Dropout before the task head.
    classifier_dropout: float = Field(0.1, ge=0.0, lt=1.0)
    # "finetune" trains encoder and head; "feature" freezes the encoder and trains the head alone.
    mode: Literal["finetune", "feature"] = "finetune"
    # Feature mode: how the head is trained. lbfgs fits it to the optimum of its L2-regularised loss on features
    # computed once (a linear probe, as SentEval's; least squares in closed form), with no rate or epochs;
    # optimizer trains it with the recipe's optimizer, rate and epochs, as fine-tuning trains.
    head_solver: Literal["lbfgs", "optimizer"] = "lbfgs"
    # Feature mode with lbfgs: the L2 strengths tried (the one with the lowest loss on a held-out tenth of the
    # training examples wins); None: 1e-4, 1e-3, 1e-2, 0.03, 0.1, 0.3 and 1.
    probe_l2: list[float] | None = None

    @model_validator(mode="after")
    def _probe_settings_need_feature_mode(self) -> _Head:
        if self.mode != "feature" and (self.head_solver != "lbfgs" or self.probe_l2 is not None):
            raise ValueError(
                "task.head_solver and task.probe_l2 train the head of a frozen encoder: set "
                "task.mode=feature (bertkit finetune --feature), or remove them"
            )
        if self.probe_l2 is not None and (not self.probe_l2 or min(self.probe_l2) <= 0):
            raise ValueError("task.probe_l2 must list positive strengths (e.g. [1e-4, 1e-3, 1e-2]), or be left unset")
        return self


class SequenceTask(_Head, _Columns, _BadRows, _Splits, TaskConfig):
    """A label per text or text pair, from a table (CSV/TSV, JSON lines, Parquet, a datasets directory)."""

    # Sentence representation the head reads: the [CLS] token (through the pooler when the model has one),
    # or the mean of the last hidden states over non-padding tokens (what sentence-embedding models train). Unset
    # with mode feature: as the checkpoint pools (a sentence-transformers Pooling module), else the mean.
    pool: Literal["cls", "mean"] = "cls"


class ClassificationTask(SequenceTask):
    """One class per text or text pair (cross-entropy)."""

    kind: Literal["classification"] = "classification"
    # mcc: Matthews correlation (GLUE's CoLA metric); f1: the positive class's F1 (index 1 of the sorted labels) of
    # a two-class task only (GLUE's MRPC and QQP metric).
    METRICS: ClassVar[tuple[str, ...]] = ("accuracy", "macro_f1", "mcc", "f1")


class RegressionTask(SequenceTask):
    """One number per text or text pair (mean squared error; STS-B)."""

    kind: Literal["regression"] = "regression"
    METRICS: ClassVar[tuple[str, ...]] = ("pearson", "spearman", "mse")


class MultiLabelTask(SequenceTask):
    """Any number of labels per text: a sigmoid per label, binary cross-entropy per (example, label)."""

    kind: Literal["multi-label"] = "multi-label"
    # Per (example, label) decisions at `threshold`: micro/macro F1 over the labels, exact-match accuracy.
    METRICS: ClassVar[tuple[str, ...]] = ("micro_f1", "macro_f1", "subset_accuracy")
    # What joins the labels of a row held in one string (CSV/TSV, or a string in JSON/Parquet).
    label_separator: str = Field("|", min_length=1)
    # The probability from which a label is predicted (metrics and bertkit predict).
    threshold: float = Field(0.5, gt=0.0, lt=1.0)


class TokenClassificationTask(_Head, TaskConfig):
    """One tag per word (NER, POS) from CoNLL, CoNLL-U or JSON lines of tokens and tags."""

    kind: Literal["token-classification"] = "token-classification"
    # Entity-level micro precision/recall/F1 by exact span (seqeval's default), and word-level tag accuracy.
    METRICS: ClassVar[tuple[str, ...]] = ("f1", "precision", "recall", "accuracy")
    # How the tags mark entities. auto detects it from the training file; iob1 and iobes are converted to BIO
    # (what the model learns and predicts); none is plain tags (POS: accuracy only).
    tag_scheme: Literal["auto", "bio", "iob1", "iobes", "none"] = "auto"


class QuestionAnsweringTask(_BadRows, TaskConfig):
    """Extractive QA from SQuAD JSON or JSON lines: windows over the context, and how answers are read off them."""

    kind: Literal["question-answering"] = "question-answering"
    # SQuAD's exact match and token F1 (percent), each the maximum over a question's gold answers.
    METRICS: ClassVar[tuple[str, ...]] = ("f1", "exact_match")
    # Context tokens two windows of a long context share; null derives it from the window: max_seq_len // 3, 128
    # for 384 (see qa_doc_stride).
    doc_stride: int | None = Field(None, ge=0)
    # Start and end candidates per window (top start and end logits).
    n_best: int = Field(20, ge=1)
    # The longest answer, in tokens.
    max_answer_length: int = Field(30, ge=1)
    # SQuAD v2.0 data (unanswerable questions): how far the null score must beat the best span's to answer nothing.
    null_threshold: float = 0.0

    @model_validator(mode="after")
    def _window_holds_a_context(self) -> QuestionAnsweringTask:
        """A window must hold some context, and two windows must share less than one holds (else the next window
        would start where this one did): checked here, when the recipe is read, for any question."""
        room = qa_context_room(self.max_seq_len)
        if room < 1:
            raise ValueError(
                f"task.max_seq_len {self.max_seq_len} leaves no room for a context after the question and "
                f"{QA_SPECIAL_TOKENS} special tokens; use 384 (the standard for question answering)"
            )
        if self.doc_stride is not None and self.doc_stride >= room:
            raise ValueError(
                f"task.doc_stride ({self.doc_stride}) must be less than the context room of a window ({room} tokens: "
                f"task.max_seq_len {self.max_seq_len} less a question of up to {qa_question_tokens(self.max_seq_len)} "
                f"tokens and {QA_SPECIAL_TOKENS} special tokens); leave task.doc_stride unset to derive it from the "
                f"window ({qa_doc_stride(self.max_seq_len, None)} here), lower it, or raise task.max_seq_len "
                "(384 with doc_stride 128 is the standard)"
            )
        return self


class BiEncoderTask(_BadRows, _Splits, TaskConfig):
    """An encoder trained to embed: its pooling, normalisation and the scale of its loss."""

    # How a text's vector is pooled from the last layer (auto: as the checkpoint says, a sentence-transformers
    # directory's Pooling module or a bertkit bi-encoder's own, else mean).
    pooling: Literal["auto", "mean", "cls"] = "auto"
    # Whether vectors are scaled to unit length (None: as the checkpoint says, else yes).
    normalize: bool | None = None
    # The factor on cosine similarities in the loss (1 / temperature; sentence-transformers' 20).
    scale: float = Field(20.0, gt=0.0)


class RetrievalTask(BiEncoderTask):
    """(query, positive[, negative]) pairs, in-batch negatives; scored by exact search over a BEIR folder or a
    pairs file."""

    kind: Literal["retrieval"] = "retrieval"
    # Ranking metrics of exact search over the corpus, as trec_eval (pytrec_eval, BEIR) computes them.
    METRICS: ClassVar[tuple[str, ...]] = ("ndcg@10", "mrr@10", "recall@100", "map@100")
    # The column of a pairs file holding the query.
    query_field: str = "query"
    # The column holding the passage that answers the query.
    positive_field: str = "positive"
    # The column holding a hard negative, or a list of them (every row as many); None: in-batch only.
    negative_field: str | None = None
    # The qrels file of a BEIR folder given as --eval (qrels/<qrels_split>.tsv).
    qrels_split: str = "test"
    # Add the passage-to-query direction to the loss (MultipleNegativesSymmetricRankingLoss).
    symmetric: bool = False
    # Matryoshka training; the loss is also taken on the vectors' first d components for each d.
    matryoshka_dims: list[int] | None = None
    # GradCache; embed a batch this many texts at a time (the same gradients as the whole batch in one pass, with
    # one chunk's activations in memory), so a batch of 512 fits one GPU; 0: the batch in one pass.
    cache_chunk: int = Field(0, ge=0)
    # Under several processes: score each process's queries against every process's passages (the step of one
    # process holding the whole batch); false: each process's own share only.
    gather_negatives: bool = True
    # A bi-encoder whose vectors the model learns too (embedding distillation, added to the ranking loss); its
    # vectors of every training text are computed once.
    teacher: str | None = None
    # With a teacher: the weight of the distillation term beside the ranking loss's 1.
    distill_weight: float = Field(1.0, ge=0.0)
    # With a teacher: mse, the squared distance of the unit vectors to the teacher's (a wider teacher's projected
    # onto its principal directions at the model's width); kl, the divergence of the in-batch ranking (each
    # query's softmax over the batch's passages) from the teacher's.
    distill_loss: Literal["mse", "kl"] = "mse"
    # A cross-encoder (a bertkit or Hugging Face model fine-tuned on (query, passage) pairs with one output, or two
    # classes) whose margins, its score of each query with its positive less its score with each hard negative,
    # the model's margins learn (MarginMSE), beside the ranking loss; needs negative_field. Computed once.
    cross_encoder: str | None = None
    # With a cross-encoder: the weight of the MarginMSE term beside the ranking loss's 1. The model's margin is its
    # cosine margin times `scale`, the units its ranking loss reads scores in.
    margin_weight: float = Field(1.0, ge=0.0)

    @model_validator(mode="after")
    def _matryoshka_widths(self) -> RetrievalTask:
        if self.matryoshka_dims is not None and (not self.matryoshka_dims or min(self.matryoshka_dims) < 1):
            raise ValueError("task.matryoshka_dims must list positive widths (e.g. [256, 128, 64]), or be left unset")
        return self


class SimilarityTask(_Columns, BiEncoderTask):
    """Scored sentence pairs (CoSENT), scored by the Spearman correlation of the cosine (MTEB's STS protocol)."""

    kind: Literal["similarity"] = "similarity"
    # Correlation of the cosine similarity with the gold score (MTEB scores STS by Spearman).
    METRICS: ClassVar[tuple[str, ...]] = ("spearman", "pearson")
    # CoSENT (sentence-transformers' CoSENTLoss), or the squared error of the cosine against the gold score scaled
    # to [0, 1] by the training scores' range (CosineSimilarityLoss).
    similarity_loss: Literal["cosent", "cosine_mse"] = "cosent"


TASK_CONFIG_CLASSES: dict[str, type[TaskConfig]] = {
    cls.model_fields["kind"].default: cls
    for cls in (ClassificationTask, MultiLabelTask, RegressionTask, TokenClassificationTask, QuestionAnsweringTask,
                RetrievalTask, SimilarityTask)  # fmt: skip
}
# Every kind reads these task keys; the rest are its class's own.
COMMON_TASK_FIELDS = frozenset(TaskConfig.model_fields)


def task_config_class(kind: Any) -> type[TaskConfig]:
    cls = TASK_CONFIG_CLASSES.get(str(kind))
    if cls is None:
        raise ValueError(f"task.kind must be one of {', '.join(TASK_CONFIG_CLASSES)}, not {kind!r}")
    return cls


def _kind_tag(value: Any) -> str:
    return str(value.get("kind", DEFAULT_KIND) if isinstance(value, dict) else getattr(value, "kind", None))


# A recipe's `task:` section: the kind's class, chosen by `kind` (classification when left out).
TaskSection = Annotated[
    Union[tuple(Annotated[cls, Tag(name)] for name, cls in TASK_CONFIG_CLASSES.items())],  # noqa: UP007
    Discriminator(_kind_tag, custom_error_type="task_kind",
                  custom_error_message=f"task.kind must be one of {', '.join(TASK_CONFIG_CLASSES)}"),  # fmt: skip
]


def saved_task_config(data: dict[str, Any]) -> TaskConfig:
    """A model file's `task` section as its kind's class: keys of other kinds (files written before the
    configurations were per kind hold every key) and keys the file adds (a QA window's version_2_with_negative)
    are dropped."""
    cls = task_config_class(data.get("kind", DEFAULT_KIND))
    return cls.model_validate({k: v for k, v in data.items() if k in cls.model_fields})


def as_kind(task: TaskConfig, kind: str) -> TaskConfig:
    """The settings `task` was given, as a `kind` task (a distillation's task stage takes its teacher's kind); a
    setting the kind does not read is a ValueError naming the kinds that do."""
    try:
        return task_config_class(kind).model_validate({**task.model_dump(exclude_unset=True), "kind": kind})
    except ValidationError as err:
        raise ValueError(str(err.errors()[0]["msg"]).removeprefix("Value error, ")) from None

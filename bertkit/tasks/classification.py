"""Sequence-level tasks on single texts or pairs: classification and regression (STS-B), with heads,
objectives and metrics. Reading the files is bertkit/tasks/data.py's business."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertkit.corpus.loader import EpochSampler, SampledBatches, pad_batch
from bertkit.errors import BertkitError
from bertkit.models.bert import BertEncoder
from bertkit.models.layers import init_weights
from bertkit.models.pooling import mean_pool
from bertkit.models.pretraining import build_task_head
from bertkit.objectives.base import Counts, Metrics, Objective, correct, sequences, share
from bertkit.tokenizers.base import Tokenizer


@dataclass
class Examples:
    input_ids: list[np.ndarray]
    token_type_ids: list[np.ndarray]
    # int64 class indices, float32 scores (regression), or float32 0/1 rows of one column per label (multi-label)
    labels: np.ndarray


def encode_examples(
    texts: list[str],
    pairs: list[str] | None,
    labels: np.ndarray,
    tokenizer: Tokenizer,
    max_len: int,
    cls_last: bool = False,
) -> Examples:
    """Token ids `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]` (at most `max_len`), with `labels` (class indices
    or numbers) alongside. `cls_last` is XLNet's layout, `a [SEP] [CLS]` or `a [SEP] b [SEP] [CLS]`, whose
    segment ids are 0 for a, 1 for b and 2 for [CLS] (XLNet compares them, so [CLS] is a segment of its own)."""
    first = tokenizer.encode_batch(texts)
    second = tokenizer.encode_batch(pairs) if pairs is not None else None
    input_ids, token_types = [], []
    for i, ids_a in enumerate(first):
        if second is None:
            ids = [tokenizer.cls_id, *ids_a[: max_len - 2], tokenizer.sep_id]
            types = [0] * len(ids)
        else:
            ids_b = second[i]
            # Trim the longer side first, as BERT's run_classifier does.
            while len(ids_a) + len(ids_b) > max_len - 3:
                if len(ids_a) >= len(ids_b):
                    ids_a = ids_a[:-1]
                else:
                    ids_b = ids_b[:-1]
            ids = [tokenizer.cls_id, *ids_a, tokenizer.sep_id, *ids_b, tokenizer.sep_id]
            types = [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)
        if cls_last:
            ids = [*ids[1:], tokenizer.cls_id]
            types = [*types[1:], 2]
        input_ids.append(np.asarray(ids, dtype=np.int64))
        token_types.append(np.asarray(types, dtype=np.int64))
    return Examples(input_ids, token_types, labels)


def label_indices(labels: list[str], names: list[str], source: object) -> np.ndarray:
    """Class indices of `labels`; a label the training data never had is an error."""
    index = {name: i for i, name in enumerate(names)}
    unknown = sorted(set(labels) - set(index))
    if unknown:
        raise BertkitError(
            f"{source}: labels {unknown[:5]} do not occur in the training data (known: {names[:10]}); "
            "evaluate on a file with the training labels"
        )
    return np.asarray([index[label] for label in labels], dtype=np.int64)


class ClassificationBatches(SampledBatches):
    """Shuffled, resumable batches of labelled examples."""

    def __init__(
        self,
        examples: Examples,
        batch_size: int,
        pad_id: int,
        seed: int,
        use_token_types: bool,
        pad_left: bool = False,
    ) -> None:
        self.examples, self.batch_size, self.pad_id = examples, batch_size, pad_id
        self.use_token_types, self.pad_left = use_token_types, pad_left  # pad_left: XLNet's <cls> stays last
        self.sampler = EpochSampler(np.arange(len(examples.labels)), seed)

    def batch_of(self, indices: list[int]) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = pad_batch([self.examples.input_ids[i] for i in indices], self.pad_id, self.pad_left)
        batch = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": torch.from_numpy(self.examples.labels[indices]),
        }
        if self.use_token_types:
            types = [self.examples.token_type_ids[i] for i in indices]
            batch["token_type_ids"], _ = pad_batch(types, 3 if self.pad_left else 0, self.pad_left)
        return batch

    def next_batch(self) -> dict[str, torch.Tensor]:
        return self.batch_of([index for _, index in self.sampler.take(self.batch_size)])


class FeatureBatches(ClassificationBatches):
    """Batches of sentence representations computed once (`sentence_features`), for a frozen encoder: its forward
    runs once per example instead of once per example and epoch. The same shuffled, resumable order as the
    examples'; the attention mask rides along so the loop counts the tokens the features stand for."""

    def __init__(self, examples: Examples, features: torch.Tensor, batch_size: int, seed: int) -> None:
        super().__init__(examples, batch_size, 0, seed, use_token_types=False)
        self.features = features

    def batch_of(self, indices: list[int]) -> dict[str, torch.Tensor]:
        _, attention_mask = pad_batch([self.examples.input_ids[i] for i in indices], 0)
        return {
            "features": self.features[indices],
            "attention_mask": attention_mask,
            "labels": torch.from_numpy(self.examples.labels[indices]),
        }


class SequenceClassifier(nn.Module):
    """Encoder + dropout + linear layer on a sentence representation: the pooled [CLS] output (`pool="cls"`;
    the raw [CLS] state for models without a pooler; XLNet's encoder pools its last token, <cls>) or the
    mean of the last hidden states over the non-padding tokens (`pool="mean"`). `num_labels=1` is a
    regression head."""

    def __init__(self, encoder: BertEncoder | nn.Module, num_labels: int, dropout: float, pool: str = "cls") -> None:
        super().__init__()
        if pool not in ("cls", "mean"):
            raise ValueError(f"pool must be cls or mean, not {pool!r}")
        self.encoder, self.pool = encoder, pool
        # ModernBERT's dense-activation-norm `head` on the pooled state (None for the other families).
        self.head = build_task_head(encoder.config)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.hidden_size, num_labels)
        init_weights(self.classifier)

    def represent(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The sentence representation the head reads: the encoder's, pooled."""
        out = self.encoder(input_ids, attention_mask, token_type_ids)
        if self.pool == "mean":
            return mean_pool(out.last_hidden_state, attention_mask)
        return out.pooled if out.pooled is not None else out.last_hidden_state[:, 0]

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        features: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Logits of the texts, or of their `features` (`represent`'s output, computed once by a frozen encoder)."""
        if features is None:
            features = self.represent(input_ids, attention_mask, token_type_ids)  # type: ignore[arg-type]
        if self.head is not None:
            features = self.head(features)
        return {"logits": self.classifier(self.dropout(features))}


def _logits(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    if "features" in batch:
        return model(features=batch["features"])["logits"].float()
    return model(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))["logits"].float()


class ClassificationObjective(Objective):
    """Cross-entropy of the classifier. Target: a sequence (the loop divides by the global batch size)."""

    name = "classification"

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return sequences(batch)

    def __call__(
        self, model: nn.Module, batch: dict[str, torch.Tensor], totals: Counts | None = None
    ) -> tuple[torch.Tensor, Metrics]:
        total = (totals or self.counts(batch))[self.name]
        logits = _logits(model, batch)
        loss = share(F.cross_entropy(logits, batch["labels"], reduction="sum"), total)
        return loss, {"acc": share(correct(logits, batch["labels"]), total)}


classification_objective = ClassificationObjective()


class RegressionObjective(ClassificationObjective):
    """Squared error of the single output against the score (BERT's STS-B head). Target: a sequence."""

    name = "regression"

    def __call__(
        self, model: nn.Module, batch: dict[str, torch.Tensor], totals: Counts | None = None
    ) -> tuple[torch.Tensor, Metrics]:
        total = (totals or self.counts(batch))[self.name]
        errors = _logits(model, batch)[:, 0] - batch["labels"].float()
        return share(errors.pow(2).sum(), total), {}


regression_objective = RegressionObjective()


class MultiLabelObjective(ClassificationObjective):
    """Binary cross-entropy of one sigmoid per label. Target: one (example, label) pair, so a batch has
    examples x labels targets, and the loss is the sum over pairs divided by the global count of pairs."""

    name = "multi_label"

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return float(batch["labels"].numel())

    def __call__(
        self, model: nn.Module, batch: dict[str, torch.Tensor], totals: Counts | None = None
    ) -> tuple[torch.Tensor, Metrics]:
        total = (totals or self.counts(batch))[self.name]
        logits = _logits(model, batch)
        targets = batch["labels"].float()
        loss = share(F.binary_cross_entropy_with_logits(logits, targets, reduction="sum"), total)
        with torch.no_grad():
            right = ((logits > 0).float() == targets).float().sum()  # per-pair accuracy at probability 0.5
        return loss, {"acc": share(right, total)}


multi_label_objective = MultiLabelObjective()


def multi_hot(rows: list[list[str]], names: list[str], source: object) -> np.ndarray:
    """(rows, labels) float32 0/1 matrix; a label the training data never had is an error."""
    index = {name: i for i, name in enumerate(names)}
    unknown = sorted({label for row in rows for label in row} - set(index))
    if unknown:
        raise BertkitError(
            f"{source}: labels {unknown[:5]} do not occur in the training data (known: {names[:10]}); "
            "evaluate on a file with the training labels"
        )
    out = np.zeros((len(rows), len(names)), dtype=np.float32)
    for i, row in enumerate(rows):
        out[i, [index[label] for label in row]] = 1.0
    return out


def multi_label_metrics(predicted: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    """Micro F1 (over every (example, label) decision), macro F1 (the mean of the per-label F1s, over the
    labels that occur in the gold or the predictions: a label absent from both has no defined F1) and
    subset accuracy (every label of the row right), of 0/1 matrices (rows, labels)."""
    predicted, gold = predicted.astype(bool), gold.astype(bool)
    tp = (predicted & gold).sum(0).astype(np.float64)
    fp = (predicted & ~gold).sum(0).astype(np.float64)
    fn = (~predicted & gold).sum(0).astype(np.float64)

    def f1(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> np.ndarray:
        denominator = 2 * tp + fp + fn
        return np.divide(2 * tp, denominator, out=np.zeros_like(tp), where=denominator > 0)

    defined = (tp + fp + fn) > 0
    return {
        "micro_f1": round(float(f1(tp.sum(keepdims=True), fp.sum(keepdims=True), fn.sum(keepdims=True))[0]), 4),
        "macro_f1": round(float(f1(tp, fp, fn)[defined].mean()) if defined.any() else 0.0, 4),
        "subset_accuracy": round(float(np.mean((predicted == gold).all(1))), 4),
    }


def evaluate_multi_label(
    model: nn.Module, batches: ClassificationBatches, device: torch.device, threshold: float = 0.5, batch_size: int = 64
) -> dict[str, float]:
    """Multi-label metrics at `threshold` (see multi_label_metrics) over every example of `batches`."""
    probabilities = torch.sigmoid(_predict(model, batches, device, batch_size)).numpy()
    gold = batches.examples.labels
    return {**multi_label_metrics(probabilities >= threshold, gold), "examples": len(gold)}


def _predict(model: nn.Module, batches: ClassificationBatches, device: torch.device, batch_size: int) -> torch.Tensor:
    outputs = []
    total = len(batches.examples.labels)
    for start in range(0, total, batch_size):
        batch = batches.batch_of(list(range(start, min(total, start + batch_size))))
        batch = {k: v.to(device) for k, v in batch.items()}
        outputs.append(_logits(model, batch).cpu())
    return torch.cat(outputs)


def classification_metrics(predicted: np.ndarray, gold: np.ndarray, num_labels: int) -> dict[str, float]:
    """Accuracy, macro-F1 and Matthews correlation of class indices (as scikit-learn computes them), and for
    two classes `f1`, the F1 of the positive class (index 1): GLUE's CoLA, MRPC and QQP metrics."""
    predicted, gold = np.asarray(predicted, dtype=np.int64), np.asarray(gold, dtype=np.int64)
    # confusion[i, j]: examples of gold class i predicted as j.
    cells = np.bincount(gold * num_labels + predicted, minlength=num_labels * num_labels)
    confusion = cells.reshape(num_labels, num_labels).astype(np.float64)
    tp = np.diag(confusion)
    gold_counts, predicted_counts = confusion.sum(1), confusion.sum(0)
    # 2TP + FP + FN; zero exactly for a label neither in the gold nor predicted, which scikit-learn's default
    # labels (the union of both) leave out of the macro average rather than count as F1 0.
    f1_denominator = gold_counts + predicted_counts
    per_label = np.divide(2 * tp, f1_denominator, out=np.zeros_like(tp), where=f1_denominator > 0)
    present = f1_denominator > 0
    total, right = float(confusion.sum()), float(tp.sum())
    # Multi-class MCC (Gorodkin's R_K): (c*s - t.p) / sqrt((s^2 - p.p) (s^2 - t.t)); 0 when undefined.
    mcc_denominator = np.sqrt(
        (total**2 - float(predicted_counts @ predicted_counts)) * (total**2 - float(gold_counts @ gold_counts))
    )
    mcc = (right * total - float(gold_counts @ predicted_counts)) / mcc_denominator if mcc_denominator > 0 else 0.0
    metrics = {
        "accuracy": round(right / total, 4) if total else 0.0,
        "macro_f1": round(float(per_label[present].mean()), 4) if present.any() else 0.0,
        "mcc": round(float(mcc), 4),
    }
    if num_labels == 2:
        metrics["f1"] = round(float(per_label[1]), 4)
    return metrics


def evaluate_classifier(
    model: nn.Module, batches: ClassificationBatches, device: torch.device, batch_size: int = 64
) -> dict[str, float]:
    """classification_metrics over every example of `batches`, in order."""
    logits = _predict(model, batches, device, batch_size)
    gold = batches.examples.labels
    metrics = classification_metrics(logits.argmax(-1).numpy(), gold, logits.shape[-1])
    return {**metrics, "examples": len(gold)}


def evaluate_regressor(
    model: nn.Module, batches: ClassificationBatches, device: torch.device, batch_size: int = 64
) -> dict[str, float]:
    """MSE, Pearson and Spearman correlation (GLUE's STS-B metrics) over every example of `batches`."""
    predicted = _predict(model, batches, device, batch_size)[:, 0].double().numpy()
    gold = batches.examples.labels.astype(np.float64)
    return {
        "mse": round(float(np.mean((predicted - gold) ** 2)), 4),
        "pearson": round(pearson(predicted, gold), 4),
        "spearman": round(pearson(average_ranks(predicted), average_ranks(gold)), 4),
        "examples": len(gold),
    }


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r; 0 when either side is constant (no linear relation can be measured)."""
    x, y = x - x.mean(), y - y.mean()
    denominator = float(np.sqrt((x * x).sum() * (y * y).sum()))
    return float((x * y).sum() / denominator) if denominator > 0 else 0.0


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing their average rank (so Spearman = Pearson of these ranks)."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.arange(1, len(values) + 1)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


@torch.no_grad()
def sentence_features(
    model: SequenceClassifier, batches: ClassificationBatches, device: torch.device, batch_size: int = 64
) -> torch.Tensor:
    """`model.represent` of every example of `batches`, in order, with the encoder in evaluation mode (no dropout):
    what a frozen encoder gives its head. On the CPU, (examples, hidden)."""
    was_training = model.training
    model.eval().to(device)
    total, out = len(batches.examples.labels), []
    for start in range(0, total, batch_size):
        batch = batches.batch_of(list(range(start, min(total, start + batch_size))))
        batch = {k: v.to(device) for k, v in batch.items() if k != "labels"}
        pooled = model.represent(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
        out.append(pooled.float().cpu())
    model.train(was_training)
    return torch.cat(out)


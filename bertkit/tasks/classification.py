"""Sequence classification (single texts or pairs) read from CSV or JSON lines."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config.schema import TaskConfig
from bertkit.corpus.loader import EpochSampler, LoaderState, pad_batch
from bertkit.corpus.sources import open_binary
from bertkit.errors import BertkitError
from bertkit.models.bert import BertEncoder
from bertkit.objectives.base import Counts, Metrics, Objective, correct, sequences, share
from bertkit.tokenizers.base import Tokenizer


@dataclass
class Examples:
    input_ids: list[np.ndarray]
    token_type_ids: list[np.ndarray]
    labels: np.ndarray


def read_records(path: Path, cfg: TaskConfig) -> list[tuple[str, str | None, str]]:
    """(text, text_pair, label) triples from a CSV (with a header) or a JSON lines file."""
    if not path.is_file():
        raise BertkitError(f"task file not found: {path}")
    fields = [cfg.text_field, cfg.label_field] + ([cfg.text_pair_field] if cfg.text_pair_field else [])
    records: list[tuple[str, str | None, str]] = []
    name = path.name.lower().removesuffix(".gz").removesuffix(".bz2").removesuffix(".zst")
    try:
        with open_binary(path) as raw:
            text = raw.read().decode("utf-8")
    except UnicodeDecodeError as err:
        raise BertkitError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    if name.endswith((".jsonl", ".json", ".ndjson")):
        rows = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise BertkitError(f"{path}:{lineno} is not valid JSON ({err.msg})") from None
    else:
        rows = list(csv.DictReader(text.splitlines()))
    for number, row in enumerate(rows, 1):
        missing = [f for f in fields if f not in row]
        if missing:
            raise BertkitError(
                f"{path} record {number} has no field '{missing[0]}'; "
                f"set task.{'label' if missing[0] == cfg.label_field else 'text'}_field"
            )
        pair = str(row[cfg.text_pair_field]) if cfg.text_pair_field else None
        records.append((str(row[cfg.text_field]), pair, str(row[cfg.label_field])))
    if not records:
        raise BertkitError(f"{path} holds no examples")
    return records


def encode_examples(
    records: list[tuple[str, str | None, str]], tokenizer: Tokenizer, labels: list[str], max_len: int
) -> Examples:
    label_index = {name: i for i, name in enumerate(labels)}
    unknown = sorted({r[2] for r in records} - set(label_index))
    if unknown:
        raise BertkitError(f"labels {unknown[:5]} do not occur in the training data (known: {labels[:10]})")
    first = tokenizer.encode_batch([r[0] for r in records])
    has_pairs = records[0][1] is not None
    second = tokenizer.encode_batch([r[1] or "" for r in records]) if has_pairs else None
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
        input_ids.append(np.asarray(ids, dtype=np.int64))
        token_types.append(np.asarray(types, dtype=np.int64))
    return Examples(input_ids, token_types, np.asarray([label_index[r[2]] for r in records], dtype=np.int64))


class ClassificationBatches:
    """Shuffled, resumable batches of labelled examples."""

    def __init__(self, examples: Examples, batch_size: int, pad_id: int, seed: int, use_token_types: bool) -> None:
        self.examples, self.batch_size, self.pad_id = examples, batch_size, pad_id
        self.use_token_types = use_token_types
        self.sampler = EpochSampler(np.arange(len(examples.labels)), seed)

    @property
    def state(self) -> LoaderState:
        return self.sampler.state

    def load_state(self, state: dict[str, int]) -> None:
        self.sampler.load_state(state)

    def batch_of(self, indices: list[int]) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = pad_batch([self.examples.input_ids[i] for i in indices], self.pad_id)
        batch = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": torch.from_numpy(self.examples.labels[indices]),
        }
        if self.use_token_types:
            batch["token_type_ids"], _ = pad_batch([self.examples.token_type_ids[i] for i in indices], 0)
        return batch

    def next_batch(self) -> dict[str, torch.Tensor]:
        return self.batch_of([index for _, index in self.sampler.take(self.batch_size)])


class SequenceClassifier(nn.Module):
    """Encoder + dropout + linear layer on the pooled [CLS] representation."""

    def __init__(self, encoder: BertEncoder, num_labels: int, dropout: float) -> None:
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.hidden_size, num_labels)
        nn.init.normal_(self.classifier.weight, std=0.02)
        nn.init.zeros_(self.classifier.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        out = self.encoder(input_ids, attention_mask, token_type_ids)
        pooled = out.pooled if out.pooled is not None else out.last_hidden_state[:, 0]
        return {"logits": self.classifier(self.dropout(pooled))}


class ClassificationObjective(Objective):
    """Cross-entropy of the classifier. Target: a sequence (the loop divides by the global batch size)."""

    name = "classification"

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return sequences(batch)

    def __call__(
        self, model: nn.Module, batch: dict[str, torch.Tensor], totals: Counts | None = None
    ) -> tuple[torch.Tensor, Metrics]:
        total = (totals or self.counts(batch))[self.name]
        logits = model(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))["logits"].float()
        loss = share(F.cross_entropy(logits, batch["labels"], reduction="sum"), total)
        return loss, {"acc": share(correct(logits, batch["labels"]), total)}


classification_objective = ClassificationObjective()


def evaluate_classifier(
    model: nn.Module, batches: ClassificationBatches, device: torch.device, batch_size: int = 64
) -> dict[str, float]:
    """Accuracy and macro-F1 over every example of `batches`, in order."""
    predictions = []
    total = len(batches.examples.labels)
    for start in range(0, total, batch_size):
        batch = batches.batch_of(list(range(start, min(total, start + batch_size))))
        batch = {k: v.to(device) for k, v in batch.items()}
        logits = model(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))["logits"]
        predictions.append(logits.argmax(-1).cpu())
    predicted = torch.cat(predictions).numpy()
    gold = batches.examples.labels
    f1s = []
    for label in np.unique(gold):
        tp = np.sum((predicted == label) & (gold == label))
        precision = tp / max(1, np.sum(predicted == label))
        recall = tp / max(1, np.sum(gold == label))
        f1s.append(0.0 if tp == 0 else 2 * precision * recall / (precision + recall))
    return {
        "accuracy": round(float(np.mean(predicted == gold)), 4),
        "macro_f1": round(float(np.mean(f1s)), 4),
        "examples": int(total),
    }

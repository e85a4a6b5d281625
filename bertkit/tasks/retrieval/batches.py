"""Training batches for bi-encoders: (query, positive[, negatives]) pairs in a shuffled, resumable order in which no
text appears twice in a batch (a passage shared by two queries would otherwise be the positive of one and a false
negative of the other), and sentence pairs with their scores."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import torch

from bertkit.corpus.loader import EpochSampler, SampledBatches, pad_batch


def distinct_order(order: np.ndarray, keys: list[frozenset[int]], batch_size: int) -> np.ndarray:
    """`order` rearranged into whole batches of `batch_size` that share no key, where the data allows: an item that
    clashes with the batch being filled waits, and is the first tried for the next batches (sentence-transformers'
    NoDuplicatesBatchSampler, in one pass). Every item comes; a short batch (the items that clashed to the end) is
    filled up with other items of the epoch that do not clash with it, so that every epoch is a whole number of
    batches and no batch straddles two epochs."""
    batches: list[list[int]] = []
    waiting: deque[int] = deque()
    batch: list[int] = []
    seen: set[int] = set()

    def close() -> None:
        """Emit the batch and start the next with the waiting items that fit (emitting it too if they fill it)."""
        nonlocal batch, seen
        while True:
            batches.append(batch)
            batch, seen = [], set()
            for _ in range(len(waiting)):  # waiting items first, in the order they were put aside
                item = waiting.popleft()
                if len(batch) < batch_size and not (keys[item] & seen):
                    batch.append(item)
                    seen.update(keys[item])
                else:
                    waiting.append(item)
            if len(batch) < batch_size:
                return

    for item in order.tolist():
        if keys[item] & seen:
            waiting.append(item)
        else:
            batch.append(item)
            seen.update(keys[item])
        if len(batch) == batch_size:
            close()
    while batch:
        close()
    out: list[int] = []
    for batch in batches:  # a short batch (what clashed to the end) is filled up with earlier, fitting items
        if 0 < len(batch) < batch_size:
            taken = set().union(*(keys[i] for i in batch))
            chosen = set(batch)
            for item in order.tolist():
                if len(batch) == batch_size:
                    break
                if item not in chosen and not (keys[item] & taken):
                    batch.append(item)
                    chosen.add(item)
                    taken.update(keys[item])
            for item in order.tolist():  # a set too small or too alike to fill it cleanly: any items
                if len(batch) == batch_size:
                    break
                batch.append(item)
        out.extend(batch)
    return np.asarray(out, dtype=np.int64)


class DistinctSampler(EpochSampler):
    """An `EpochSampler` whose every epoch is `distinct_order` of its shuffled order: as resumable (the order is a
    function of the seed and the epoch) and reshardable (the batch is taken whole and split over the processes)."""

    def __init__(self, keys: list[frozenset[int]], batch_size: int, seed: int) -> None:
        self.keys, self.batch_size = keys, batch_size
        super().__init__(np.arange(len(keys)), seed)

    def _epoch_order(self) -> np.ndarray:
        if self._order_epoch != self.state.epoch:
            shuffled = np.random.default_rng([self.seed, self.state.epoch]).permutation(self.indices)
            self._order = distinct_order(shuffled, self.keys, self.batch_size)
            self._order_epoch = self.state.epoch
        return self._order


def text_keys(*columns: list[str]) -> list[frozenset[int]]:
    """Per row, the ids of its texts (equal texts, equal ids), across `columns` (each a text per row)."""
    ids: dict[str, int] = {}
    return [frozenset(ids.setdefault(text, len(ids)) for text in row) for row in zip(*columns, strict=True)]


@dataclass
class TeacherVectors:
    """A teacher's unit vectors of every training text: (pairs, dim) queries and positives, (pairs, n, dim)
    negatives; `projection`, when they were narrowed to the student's width, what that kept
    (bertkit/tasks/retrieval/projection.py)."""

    queries: torch.Tensor
    positives: torch.Tensor
    negatives: torch.Tensor | None = None
    projection: dict[str, float | int] | None = None


class PairBatches(SampledBatches):
    """Batches of `query_input_ids`/`query_attention_mask` (the queries) and `input_ids`/`attention_mask` (their
    positives, row i answering query i, then the first hard negative of every row, then the second...)."""

    def __init__(self, queries: list[np.ndarray], positives: list[np.ndarray], negatives: list[list[np.ndarray]] | None,
                 keys: list[frozenset[int]], batch_size: int, pad_id: int, seed: int,
                 teacher: TeacherVectors | None = None, margins: torch.Tensor | None = None) -> None:  # fmt: skip
        self.queries, self.positives, self.negatives = queries, positives, negatives
        self.batch_size, self.pad_id, self.teacher, self.margins = batch_size, pad_id, teacher, margins
        self.sampler = DistinctSampler(keys, batch_size, seed)

    def next_batch(self) -> dict[str, torch.Tensor]:
        picked = [index for _, index in self.sampler.take(self.batch_size)]
        passages = [self.positives[i] for i in picked]
        if self.negatives is not None:
            for column in range(len(self.negatives[0])):
                passages.extend(self.negatives[i][column] for i in picked)
        query_ids, query_mask = pad_batch([self.queries[i] for i in picked], self.pad_id)
        input_ids, attention_mask = pad_batch(passages, self.pad_id)
        batch = {"query_input_ids": query_ids, "query_attention_mask": query_mask,
                 "input_ids": input_ids, "attention_mask": attention_mask}  # fmt: skip
        if self.teacher is not None:  # the teacher's vectors of the same texts, in the same order
            batch["teacher_query"] = self.teacher.queries[picked]
            rows = [self.teacher.positives[picked]]
            if self.teacher.negatives is not None:
                rows += [self.teacher.negatives[picked, column] for column in range(self.teacher.negatives.shape[1])]
            batch["teacher_passage"] = torch.cat(rows)
        if self.margins is not None:  # a cross-encoder's margins of each query's positive over its negatives
            batch["teacher_margin"] = self.margins[picked]
        return batch


class ScoredPairBatches(SampledBatches):
    """Batches of `input_ids`/`attention_mask` (first texts), `pair_input_ids`/`pair_attention_mask` (second texts)
    and `labels` (their gold scores)."""

    def __init__(self, first: list[np.ndarray], second: list[np.ndarray], scores: np.ndarray, batch_size: int,
                 pad_id: int, seed: int) -> None:  # fmt: skip
        self.first, self.second, self.scores = first, second, scores
        self.batch_size, self.pad_id = batch_size, pad_id
        self.sampler = EpochSampler(np.arange(len(first)), seed)

    def next_batch(self) -> dict[str, torch.Tensor]:
        picked = [index for _, index in self.sampler.take(self.batch_size)]
        input_ids, attention_mask = pad_batch([self.first[i] for i in picked], self.pad_id)
        pair_ids, pair_mask = pad_batch([self.second[i] for i in picked], self.pad_id)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "pair_input_ids": pair_ids,
                "pair_attention_mask": pair_mask, "labels": torch.from_numpy(self.scores[picked])}  # fmt: skip

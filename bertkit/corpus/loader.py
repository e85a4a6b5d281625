"""Serve batches: deterministic order, dynamic masking, exact resume without replay.

The order of epoch e is a permutation drawn from (seed, e); the mask of sequence i in epoch e is drawn
from (seed, e, i). So a loader's whole state is two integers (epoch, position): resuming needs no
replay, and a re-served sequence gets a fresh mask each epoch (RoBERTa's dynamic masking) that is still
reproducible from the seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bertkit.corpus.masking import MaskingSpec, mask_sequence
from bertkit.corpus.shards import Corpus


@dataclass
class LoaderState:
    epoch: int = 0
    position: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}


def split_indices(num_items: int, eval_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Deterministically hold out a fraction of the items for evaluation (at least one if asked)."""
    order = np.random.default_rng([seed, 0xE7A1]).permutation(num_items)
    num_eval = int(round(num_items * eval_fraction))
    if eval_fraction > 0 and num_items > 1:
        num_eval = max(1, num_eval)
    return np.sort(order[num_eval:]), np.sort(order[:num_eval])


class EpochSampler:
    """Endless (epoch, index) pairs over `indices`, reshuffled every epoch, resumable from its state.

    Sharded over `world_size` processes, every rank walks the same global order and `take(count)`
    consumes `count` items of it, returning this rank's contiguous share of `count / world_size`.
    So the state (epoch, position) is the same on every rank and means the same thing for any
    world size: a checkpoint resumes under another number of processes, and N ranks with micro-batch
    b see exactly the items one process sees with N accumulation micro-steps of b."""

    def __init__(
        self, indices: np.ndarray, seed: int, shuffle: bool = True, rank: int = 0, world_size: int = 1
    ) -> None:
        if len(indices) == 0:
            raise ValueError("no items to sample")
        self.indices, self.seed, self.shuffle = indices, seed, shuffle
        self.state = LoaderState()
        self._order_epoch = -1
        self._order = indices
        self.shard(rank, world_size)

    def shard(self, rank: int, world_size: int) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside a world of {world_size}")
        self.rank, self.world_size = rank, world_size

    def load_state(self, state: dict[str, int]) -> None:
        self.state = LoaderState(epoch=int(state["epoch"]), position=int(state["position"]))

    def _epoch_order(self) -> np.ndarray:
        if self._order_epoch != self.state.epoch:
            rng = np.random.default_rng([self.seed, self.state.epoch])
            self._order = rng.permutation(self.indices) if self.shuffle else self.indices
            self._order_epoch = self.state.epoch
        return self._order

    def _take_global(self, count: int) -> list[tuple[int, int]]:
        chosen: list[tuple[int, int]] = []
        while len(chosen) < count:
            order = self._epoch_order()
            part = order[self.state.position : self.state.position + count - len(chosen)]
            chosen.extend((self.state.epoch, int(i)) for i in part)
            self.state.position += len(part)
            if self.state.position >= len(order):
                self.state = LoaderState(epoch=self.state.epoch + 1, position=0)
        return chosen

    def take(self, count: int) -> list[tuple[int, int]]:
        if count % self.world_size:
            raise ValueError(f"cannot split {count} items evenly over {self.world_size} processes")
        share = count // self.world_size
        return self._take_global(count)[self.rank * share : (self.rank + 1) * share]


def pad_batch(sequences: list[np.ndarray], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad to the longest sequence of the batch, not to the maximum length: short batches cost less."""
    longest = max(len(s) for s in sequences)
    input_ids = np.full((len(sequences), longest), pad_id, dtype=np.int64)
    attention_mask = np.zeros((len(sequences), longest), dtype=bool)
    for row, ids in enumerate(sequences):
        input_ids[row, : len(ids)] = ids
        attention_mask[row, : len(ids)] = True
    return torch.from_numpy(input_ids), torch.from_numpy(attention_mask)


class MLMBatches:
    """Masked batches over a subset of a corpus; `next_batch` gives flat MLM positions and labels."""

    def __init__(
        self,
        corpus: Corpus,
        indices: np.ndarray,
        batch_size: int,
        spec: MaskingSpec,
        pad_id: int,
        seed: int,
        shuffle: bool = True,
    ) -> None:
        self.corpus, self.batch_size, self.spec, self.pad_id, self.seed = corpus, batch_size, spec, pad_id, seed
        self.sampler = EpochSampler(indices, seed, shuffle)
        self._candidates = spec.random_candidates()

    @property
    def state(self) -> LoaderState:
        return self.sampler.state

    def load_state(self, state: dict[str, int]) -> None:
        self.sampler.load_state(state)

    def masked(self, epoch: int, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch, index])
        return mask_sequence(self.corpus[index], self.spec, rng, self._candidates)

    def next_batch(self) -> dict[str, torch.Tensor]:
        items = [self.masked(epoch, index) for epoch, index in self.sampler.take(self.batch_size)]
        input_ids, attention_mask = pad_batch([ids for ids, _, _ in items], self.pad_id)
        width = input_ids.shape[1]
        positions = np.concatenate([pos + row * width for row, (_, pos, _) in enumerate(items)])
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "mlm_positions": torch.from_numpy(positions),
            "mlm_labels": torch.from_numpy(np.concatenate([labels for _, _, labels in items])),
        }

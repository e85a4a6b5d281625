"""Serve batches: deterministic order, dynamic masking, exact resume without replay.

The order of epoch e is a permutation drawn from (seed, e); the mask of sequence i in epoch e is drawn
from (seed, e, i). So a loader's whole state is two integers (epoch, position): resuming needs no
replay, and a re-served sequence gets a fresh mask each epoch (RoBERTa's dynamic masking) that is still
reproducible from the seed. A statically masked corpus (BERT) is served with the masks stored at build
time, drawn by the very same `mask_tokens`.

Batch contract (all int64 unless said):
  input_ids (B, T); attention_mask (B, T) bool; token_type_ids (B, T) for corpora with segment pairs;
  mlm_positions (N,) flat indices into B*T, sorted; mlm_labels (N,) original ids;
  pair_labels (B,) for NSP/SOP corpora (0 actual next / in order, 1 random / swapped);
  document_ids (B, T) for corpora of packed documents: 1, 2, ... for the documents of a row, 0 on padding
  (attention stays within a document and positions restart at each, bertkit/models/unpad.py);
  span masking only (SpanBERT's span boundary objective): sbo_positions (M,) flat target positions,
  sbo_left (M,) / sbo_right (M,) flat positions of the tokens just outside the span, sbo_offsets (M,)
  0-based position of the target inside its span, sbo_labels (M,) original ids.

Permutation LM (XLNet, `PLMBatches`): sequences in XLNet's layout (A <sep> B <sep> <cls>) padded on the
left, so <cls> is the last column; token_type_ids 0 for A (and its <sep>), 1 for B, 2 for <cls>, 3 for
padding (XLNet's segment ids; the model only compares them); perm_mask (B, T, T) bool, True where query i
may not see key j; target_mapping (B, M, T) float32, one-hot rows, M the most targets of any row;
plm_labels (B, M) the target ids, -100 in the empty slots of rows with fewer targets. The targets and
their order are drawn from (seed, epoch, sequence), like dynamic masks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from bertkit.corpus.masking import MaskedSequence, MaskingSpec, mask_tokens
from bertkit.corpus.permutation import PermutationSpec, PermutedSequence, draw_permutation, permutation_mask
from bertkit.corpus.shards import Corpus
from bertkit.errors import BertkitError


@dataclass
class LoaderState:
    epoch: int = 0
    position: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}


def check_no_copies_held_out(corpus: Corpus, where: object, eval_fraction: float, remedy: str) -> None:
    """A share of a corpus of several static-mask copies is no held-out set: each held-out text is trained on
    in its other copies, and held-out accuracy would measure memory."""
    copies = int(corpus.manifest.get("options", {}).get("dupe_factor", 1))
    if copies > 1 and eval_fraction > 0:
        raise BertkitError(
            f"{where} holds each text {copies} times (--dupe-factor {copies}), so sequences held out of it are "
            f"trained on in their other copies; {remedy}"
        )


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


class SampledBatches:
    """A batch source that draws from one `EpochSampler`: the data-source contract the trainer shards, saves and
    resumes (bertkit/engine/contracts.py). The sampler's position is global, so it is `reshardable`. A wrapper
    that draws from another source's sampler shares it (`self.sampler = inner.sampler`)."""

    sampler: EpochSampler
    reshardable = True

    def shard(self, rank: int, world_size: int) -> None:
        self.sampler.shard(rank, world_size)

    def state_dict(self) -> dict[str, int]:
        return self.sampler.state.to_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.sampler.load_state(state)


def pad_batch(
    sequences: list[np.ndarray], pad_id: int, left: bool = False, length: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad to the longest sequence of the batch, not to the maximum length: short batches cost less.
    `left` pads before the tokens (XLNet, whose <cls> ends the sequence), else after them. `length` pads
    to at least that many tokens: for models whose result depends on the padded width (block-sparse
    attention), so that a sequence's result does not depend on the batch it shares."""
    longest = max(length, *(len(s) for s in sequences))
    input_ids = np.full((len(sequences), longest), pad_id, dtype=np.int64)
    attention_mask = np.zeros((len(sequences), longest), dtype=bool)
    for row, ids in enumerate(sequences):
        span = slice(longest - len(ids), longest) if left else slice(0, len(ids))
        input_ids[row, span] = ids
        attention_mask[row, span] = True
    return torch.from_numpy(input_ids), torch.from_numpy(attention_mask)


def corpus_masking(corpus: Corpus, spec: MaskingSpec) -> MaskingSpec:
    """`spec` with the corpus's mask strategy (and cap) filled in where the caller left them open."""
    stored = corpus.manifest.get("masking") or {}
    if spec.strategy is not None:
        return spec
    return replace(
        spec,
        strategy=stored.get("strategy", "token"),
        max_predictions=spec.max_predictions or int(stored.get("max_predictions", 0)),
    )


def sbo_targets(spans: np.ndarray, row_offset: int) -> dict[str, np.ndarray]:
    """SBO targets of one sequence's spans, as flat positions (row_offset = row * T)."""
    lengths = spans[:, 1] - spans[:, 0]
    if len(spans) == 0:
        empty = np.empty(0, np.int64)
        return {"sbo_positions": empty, "sbo_left": empty, "sbo_right": empty, "sbo_offsets": empty}
    positions = np.concatenate([np.arange(a, b) for a, b in spans])
    return {
        "sbo_positions": positions + row_offset,
        "sbo_left": np.repeat(spans[:, 0] - 1, lengths) + row_offset,
        "sbo_right": np.repeat(spans[:, 1], lengths) + row_offset,
        "sbo_offsets": np.concatenate([np.arange(n) for n in lengths]),
    }


class MLMBatches(SampledBatches):
    """Masked batches over a subset of a corpus, following the batch contract above."""

    def __init__(
        self,
        corpus: Corpus,
        indices: np.ndarray,
        batch_size: int,
        spec: MaskingSpec,
        pad_id: int,
        seed: int,
        shuffle: bool = True,
        *,
        span_targets: bool | None = None,
        pad_to: int = 0,
        stored_masks: bool = True,
    ) -> None:
        self.corpus, self.batch_size, self.pad_id, self.seed = corpus, batch_size, pad_id, seed
        # False masks a static corpus afresh with `spec` (held-out evaluation at its own fixed rate).
        self.stored_masks = stored_masks and corpus.static_masks
        self.pad_to = pad_to  # pad every batch to at least this width (see pad_batch)
        self.spec = corpus_masking(corpus, spec)
        self.sampler = EpochSampler(indices, seed, shuffle)
        self._candidates = self.spec.random_candidates()
        # SBO fields for span masking; a caller may force them off (or on, for another strategy's units).
        self.span_targets = self.spec.strategy == "span" if span_targets is None else span_targets

    def masked_sequence(self, epoch: int, index: int) -> MaskedSequence:
        """The corrupted sequence the model sees for `index` in `epoch` (stored masks for a static corpus)."""
        if self.stored_masks:
            positions, labels, spans = self.corpus.static_mask(index)
            ids = self.corpus[index].astype(np.int64)
            return MaskedSequence(ids, positions, labels, spans, np.empty(0, np.int64))
        rng = np.random.default_rng([self.seed, epoch, index])
        # A static corpus stores its sequences corrupted: masking afresh starts from the original ids.
        ids = self.corpus.original(index) if self.corpus.static_masks else self.corpus[index]
        return mask_tokens(ids, self.corpus.word_starts(index), self.spec, rng, self._candidates)

    def masked(self, epoch: int, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        item = self.masked_sequence(epoch, index)
        return item.ids, item.positions, item.labels

    def next_batch(self) -> dict[str, torch.Tensor]:
        taken = self.sampler.take(self.batch_size)
        items = [self.masked_sequence(epoch, index) for epoch, index in taken]
        input_ids, attention_mask = pad_batch([item.ids for item in items], self.pad_id, length=self.pad_to)
        width = input_ids.shape[1]
        positions = np.concatenate([item.positions + row * width for row, item in enumerate(items)])
        batch = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "mlm_positions": torch.from_numpy(positions.astype(np.int64)),
            "mlm_labels": torch.from_numpy(np.concatenate([item.labels for item in items]).astype(np.int64)),
        }
        if self.corpus.has_pairs:
            token_types = np.zeros(input_ids.shape, np.int64)
            labels = np.zeros(len(items), np.int64)
            for row, (_, index) in enumerate(taken):
                b_start, label = self.corpus.pair(index)
                if b_start:
                    token_types[row, b_start : len(items[row].ids)] = 1
                labels[row] = label
            batch["token_type_ids"] = torch.from_numpy(token_types)
            batch["pair_labels"] = torch.from_numpy(labels)
        if self.corpus.has_documents:
            batch["document_ids"] = document_ids([self.corpus.document_starts(i) for _, i in taken], attention_mask)
        if self.span_targets:
            parts = [sbo_targets(item.spans, row * width) for row, item in enumerate(items)]
            for key in ("sbo_positions", "sbo_left", "sbo_right", "sbo_offsets"):
                batch[key] = torch.from_numpy(np.concatenate([p[key] for p in parts]).astype(np.int64))
            flat = input_ids.reshape(-1).numpy()
            original = flat.copy()
            original[positions] = batch["mlm_labels"].numpy()
            batch["sbo_labels"] = torch.from_numpy(original[batch["sbo_positions"].numpy()])
        return batch


def document_ids(starts: list[np.ndarray], attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) int64: k for the tokens of a row's k-th document (from 1), 0 on padding."""
    marks = np.zeros(attention_mask.shape, np.int64)
    for row, row_starts in enumerate(starts):
        marks[row, row_starts] = 1
    return torch.from_numpy(marks.cumsum(1)) * attention_mask.long()


# XLNet's segment ids: A, B, <cls>, padding (XLNetTokenizer's, whose pad_token_type_id is 3).
SEGMENT_A, SEGMENT_B, SEGMENT_CLS, SEGMENT_PAD = 0, 1, 2, 3


class PLMBatches(SampledBatches):
    """Permutation-LM batches (XLNet) over a subset of a corpus built with `--layout xlnet`, following the
    batch contract above. Same sampler, same state, same resume as `MLMBatches`."""

    def __init__(
        self,
        corpus: Corpus,
        indices: np.ndarray,
        batch_size: int,
        spec: PermutationSpec,
        pad_id: int,
        seed: int,
        shuffle: bool = True,
    ) -> None:
        self.corpus, self.batch_size, self.spec, self.pad_id, self.seed = corpus, batch_size, spec, pad_id, seed
        self.sampler = EpochSampler(indices, seed, shuffle)

    def permuted(self, epoch: int, index: int) -> tuple[np.ndarray, PermutedSequence]:
        """The sequence and its draw (targets and their order) for `index` in `epoch`."""
        ids = self.corpus[index].astype(np.int64)
        return ids, draw_permutation(ids, self.spec, np.random.default_rng([self.seed, epoch, index]))

    def next_batch(self) -> dict[str, torch.Tensor]:
        taken = self.sampler.take(self.batch_size)
        items = [self.permuted(epoch, index) for epoch, index in taken]
        input_ids, attention_mask = pad_batch([ids for ids, _ in items], self.pad_id, left=True)
        rows, width = input_ids.shape
        slots = max(1, max(len(draw.targets) for _, draw in items))
        token_types = np.full((rows, width), SEGMENT_PAD, np.int64)
        perm_mask = np.zeros((rows, width, width), bool)
        target_mapping = np.zeros((rows, slots, width), np.float32)
        labels = np.full((rows, slots), -100, np.int64)
        for row, ((ids, draw), (_, index)) in enumerate(zip(items, taken, strict=True)):
            length = len(ids)
            start = width - length  # left padding
            b_start = self.corpus.pair(index)[0] if self.corpus.has_pairs else 0
            types = token_types[row, start:]
            types[:] = SEGMENT_A
            if b_start:
                types[b_start:] = SEGMENT_B
            types[-1] = SEGMENT_CLS
            perm_mask[row, start:, start:] = permutation_mask(length, draw)
            count = len(draw.targets)
            target_mapping[row, np.arange(count), start + draw.targets] = 1.0
            labels[row, :count] = ids[draw.targets]
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "token_type_ids": torch.from_numpy(token_types),
            "perm_mask": torch.from_numpy(perm_mask),
            "target_mapping": torch.from_numpy(target_mapping),
            "plm_labels": torch.from_numpy(labels),
        }

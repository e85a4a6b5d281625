"""Packing tokenized documents into training sequences, in every input format of the BERT family.

  full-sentences  RoBERTa: contiguous sentences up to the length, crossing documents with a [SEP] between.
  doc-sentences   RoBERTa: the same, but a sequence never crosses a document (its tail is padding).
  segment-pair    BERT: [CLS] A [SEP] B [SEP]; A is the first sentences of a chunk, B the rest of the chunk
                  (label 0) or a stretch of another document (label 1), half of the time each; with
                  probability `short_seq_prob` a chunk aims at a shorter random length (BERT's short_seq_prob).
                  full-sentences, doc-sentences and single-segment take `short_seq_prob` too (0 unless set): each
                  sequence then aims at a random length from 2 to the whole with that probability, so that a
                  long-context corpus keeps short inputs.
  sentence-pair   RoBERTa's SENTENCE-PAIR+NSP: A one sentence, B the next one or a random one from another document.
  sop             ALBERT: A and B two consecutive segments of one document, swapped half of the time (label 1).
  single-segment  SpanBERT / ELECTRA: one contiguous segment of a document filling the whole length.
  packed-documents ModernBERT's sequence packing: each document is cut as single-segment cuts it (full
                  rows, then its tail), every piece its own [CLS] ... [SEP] sequence, and the short ones are
                  placed several to a row (best fit over a few open rows, so little is left as padding); the
                  row records where each starts, and attention stays within each (document_ids in the batch,
                  bertkit/models/unpad.py). Cutting at sentences instead (doc-sentences) leaves pieces of 70-95%
                  of a row that no other piece fits beside: measured 88% efficiency on Python's docs vs 99%.

Every format comes in two layouts of the special tokens: `bert` ([CLS] A [SEP] B [SEP], the default) and
`xlnet` (A [SEP] B [SEP] [CLS], XLNet's: its classification token ends the sequence, and the loader pads
on the left). Same budget, same packing: only where the [CLS] goes differs.

Documents arrive in blocks (a fixed number of documents, whatever the worker count); the "other document"
of NSP is drawn from the current and the previous block, so memory stays bounded on any corpus size
(BERT's script holds the whole corpus in memory to draw it). Every token is accounted for:
    input_tokens == content_tokens - borrowed_tokens + truncated_tokens + dropped_tokens
where borrowed tokens are the random B segments copied from other documents.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import numpy as np

FORMATS = (
    "full-sentences", "doc-sentences", "segment-pair", "sentence-pair", "sop", "single-segment", "packed-documents"
)  # fmt: skip
LAYOUTS = ("bert", "xlnet")
PAIR_FORMATS = ("segment-pair", "sentence-pair", "sop")

# A sentence: token ids and, per token, whether it starts a word.
Sentence = tuple[np.ndarray, np.ndarray]
Document = list[Sentence]


@dataclass
class Packed:
    ids: np.ndarray  # int64, specials included
    word_starts: np.ndarray  # bool per token; False on specials
    b_start: int = 0  # first token of segment B; 0 for single-segment sequences
    label: int = -1  # NSP / SOP label: 0 actual next / in order, 1 random / swapped; -1 none
    doc_starts: np.ndarray | None = None  # packed-documents: int32 first token of each document in the row


@dataclass
class PackStats:
    sequences: int = 0
    input_tokens: int = 0  # tokens the tokenizer produced for the input
    content_tokens: int = 0  # non-special tokens placed in sequences
    special_tokens: int = 0
    borrowed_tokens: int = 0  # random NSP segments copied from another document
    truncated_tokens: int = 0  # own tokens cut to fit a pair into the length (BERT's truncate_seq_pair)
    dropped_tokens: int = 0  # own tokens that could not form a sequence (e.g. a one-token document for SOP)
    split_sentences: int = 0  # sentences longer than a sequence, cut into pieces
    capacity: int = 0  # sequences * max_seq_len: what padding every sequence to the length would cost
    label_counts: list[int] = field(default_factory=lambda: [0, 0])
    random_from_same_document: int = 0  # NSP had no other document to draw from
    packed_documents: int = 0  # packed-documents: [CLS] ... [SEP] documents placed into rows

    @property
    def padding_tokens(self) -> int:
        return self.capacity - self.content_tokens - self.special_tokens

    @property
    def padding_fraction(self) -> float:
        return self.padding_tokens / self.capacity if self.capacity else 0.0

    def report(self) -> dict[str, float | int | list[int]]:
        out: dict = asdict(self)
        out["padding_tokens"] = self.padding_tokens
        out["padding_fraction"] = round(self.padding_fraction, 4)
        # Real tokens (specials included) per token of capacity: what a padded batch of full rows computes on.
        out["packing_efficiency"] = round(1 - self.padding_fraction, 4) if self.capacity else 0.0
        out["truncated_fraction"] = round(self.truncated_tokens / self.input_tokens, 4) if self.input_tokens else 0.0
        return out


class _BalancedCoin:
    """A fair coin for the pair label that repays forced outcomes, keeping labels at 50/50.

    When the actual next segment does not exist (a document's last sentence), the pair must be random;
    the next time the coin says "random" while "actual" is possible, it answers "actual" instead.
    """

    def __init__(self) -> None:
        self.debt = 0

    def random_next(self, rng: np.random.Generator, actual_possible: bool) -> bool:
        want_random = bool(rng.random() < 0.5)
        if not actual_possible:
            self.debt += 0 if want_random else 1
            return True
        if want_random and self.debt > 0:
            self.debt -= 1
            return False
        return want_random


class Packer:
    def __init__(
        self,
        format: str,
        max_seq_len: int,
        cls_id: int,
        sep_id: int,
        rng: np.random.Generator,
        short_seq_prob: float = 0.1,
        stats: PackStats | None = None,
        layout: str = "bert",
    ) -> None:
        if format not in FORMATS:
            raise ValueError(f"unknown format '{format}'; choose one of {', '.join(FORMATS)}")
        if layout not in LAYOUTS:
            raise ValueError(f"unknown layout '{layout}'; choose one of {', '.join(LAYOUTS)}")
        self.cls_last = layout == "xlnet"
        pair = format in PAIR_FORMATS
        self.budget = max_seq_len - (3 if pair else 2)
        if self.budget < 2:
            raise ValueError(f"max_seq_len {max_seq_len} leaves no room for text besides the special tokens")
        self.format, self.max_seq_len, self.cls, self.sep = format, max_seq_len, cls_id, sep_id
        self.rng, self.short_seq_prob = rng, short_seq_prob
        self.stats = stats if stats is not None else PackStats()
        self.rows = DocumentRows(max_seq_len, self.stats) if format == "packed-documents" else None
        self.coin = _BalancedCoin()
        self._previous_block: list[Document] = []
        self._current: list[Sentence] = []
        self._used = 0
        self._separator: Sentence = (np.array([sep_id], np.int64), np.zeros(1, bool))
        self._target = self._next_target()  # the length the contiguous formats' sequence in progress aims at

    # -- helpers ---------------------------------------------------------------------------------------
    def _emit(self, a: list[Sentence], b: list[Sentence] | None = None, label: int = -1) -> Packed:
        ids = [] if self.cls_last else [np.array([self.cls], np.int64)]
        starts = [] if self.cls_last else [np.zeros(1, bool)]
        for ids_part, starts_part in a:
            ids.append(ids_part.astype(np.int64))
            starts.append(starts_part.astype(bool))
        ids.append(np.array([self.sep], np.int64))
        starts.append(np.zeros(1, bool))
        b_start = 0
        if b is not None:
            b_start = int(sum(len(x) for x in ids))
            for ids_part, starts_part in b:
                ids.append(ids_part.astype(np.int64))
                starts.append(starts_part.astype(bool))
            ids.append(np.array([self.sep], np.int64))
            starts.append(np.zeros(1, bool))
        if self.cls_last:
            ids.append(np.array([self.cls], np.int64))
            starts.append(np.zeros(1, bool))
        packed = Packed(np.concatenate(ids), np.concatenate(starts), b_start, label)
        parts = a + (b or [])
        content = int(sum(len(s[0]) for s in parts if s is not self._separator))
        self.stats.content_tokens += content
        self.stats.special_tokens += len(packed.ids) - content
        if self.rows is None:  # packed documents are counted as sequences when their row is emitted
            self.stats.sequences += 1
            self.stats.capacity += self.max_seq_len
        if label >= 0:
            self.stats.label_counts[label] += 1
        return packed

    def _pieces(self, document: Document, limit: int, count: bool = True) -> Document:
        """Cut sentences longer than `limit` into pieces (counted once, never dropped)."""
        out: Document = []
        for ids, starts in document:
            if len(ids) > limit:
                self.stats.split_sentences += int(count)
                out.extend((ids[i : i + limit], starts[i : i + limit]) for i in range(0, len(ids), limit))
            elif len(ids):
                out.append((ids, starts))
        return out

    def _other_document(self, block: list[Document], current: int) -> Document:
        pool = len(self._previous_block) + len(block) - 1
        if pool <= 0:
            self.stats.random_from_same_document += 1
            return block[current]
        pick = int(self.rng.integers(pool))
        if pick < len(self._previous_block):
            return self._previous_block[pick]
        pick -= len(self._previous_block)
        return block[pick if pick < current else pick + 1]

    def _truncate_pair(self, a: list[Sentence], b: list[Sentence], b_is_own: bool) -> tuple[list[Sentence], ...]:
        """BERT's truncate_seq_pair: trim the longer segment, from its front or back at random."""
        a_ids, a_st = np.concatenate([s[0] for s in a]), np.concatenate([s[1] for s in a])
        b_ids, b_st = np.concatenate([s[0] for s in b]), np.concatenate([s[1] for s in b])
        while len(a_ids) + len(b_ids) > self.budget:
            if len(a_ids) > len(b_ids):
                a_ids, a_st = (a_ids[1:], a_st[1:]) if self.rng.random() < 0.5 else (a_ids[:-1], a_st[:-1])
                self.stats.truncated_tokens += 1
            else:
                b_ids, b_st = (b_ids[1:], b_st[1:]) if self.rng.random() < 0.5 else (b_ids[:-1], b_st[:-1])
                self.stats.truncated_tokens += 1 if b_is_own else 0
        return [(a_ids, a_st)], [(b_ids, b_st)]

    def _split_single(self, sentence: Sentence) -> list[Sentence]:
        """A chunk of one sentence still makes a pair: cut it at a random word start (any token if none)."""
        ids, starts = sentence
        cuts = np.flatnonzero(starts[1:]) + 1
        cuts = cuts if cuts.size else np.arange(1, len(ids))
        cut = int(cuts[self.rng.integers(cuts.size)])
        return [(ids[:cut], starts[:cut]), (ids[cut:], starts[cut:])]

    # -- formats ---------------------------------------------------------------------------------------
    def _contiguous(self, document: Document) -> Iterator[Packed]:
        """Full-/doc-sentences and single-segment; a sequence in progress carries over to the next document."""
        if self.format == "single-segment" and self.short_seq_prob > 0:
            # Contiguous segments of the document, each cut at the length its sequence aims at.
            ids, starts = np.concatenate([s[0] for s in document]), np.concatenate([s[1] for s in document])
            i = 0
            while i < len(ids):
                end = i + self._target
                self._current, self._used = [(ids[i:end], starts[i:end])], len(ids[i:end])
                i = end
                yield self._flush()
            return
        if self.format in ("single-segment", "packed-documents"):
            # One contiguous segment: the document's tokens cut exactly at the length, not at sentences.
            ids, starts = np.concatenate([s[0] for s in document]), np.concatenate([s[1] for s in document])
            document = [
                (ids[i : i + self.budget], starts[i : i + self.budget]) for i in range(0, len(ids), self.budget)
            ]
        else:
            document = self._pieces(document, self.budget)
        if self._current:  # only full-sentences keeps a sequence open across documents
            if self._used + 1 >= self._target:
                yield self._flush()
            else:
                self._current.append(self._separator)  # RoBERTa marks a document boundary inside a sequence
                self._used += 1
        for sentence in document:
            # A sentence longer than a short target still makes a sequence of its own (at most the budget).
            if self._current and self._used + len(sentence[0]) > self._target:
                yield self._flush()
            self._current.append(sentence)
            self._used += len(sentence[0])
        if self.format != "full-sentences" and self._current:
            yield self._flush()

    def _flush(self) -> Packed:
        # A document separator left at the end of a sequence separates nothing: drop it.
        while self._current and self._current[-1] is self._separator:
            self._current.pop()
        packed = self._emit(self._current)
        self._current, self._used = [], 0
        self._target = self._next_target()
        return packed

    def _next_target(self) -> int:
        """The length a contiguous format's next sequence aims at: the whole budget, or with `short_seq_prob` a
        random one from 2 to it (no draw at all when the probability is 0, so such corpora are unchanged)."""
        contiguous = self.format in ("full-sentences", "doc-sentences", "single-segment")
        if contiguous and self.short_seq_prob > 0 and self.rng.random() < self.short_seq_prob:
            return int(self.rng.integers(2, self.budget + 1))
        return self.budget

    def _pairs(self, block: list[Document]) -> Iterator[Packed]:
        for index, raw in enumerate(block):
            document = self._pieces(raw, self.budget)
            target = self.budget
            if self.rng.random() < self.short_seq_prob:
                target = int(self.rng.integers(2, self.budget + 1))
            chunk: list[Sentence] = []
            length, i = 0, 0
            while i < len(document):
                chunk.append(document[i])
                length += len(document[i][0])
                if i == len(document) - 1 or length >= target:
                    i = yield from self._pair_from_chunk(block, index, document, chunk, target, i)
                    chunk, length = [], 0
                    target = self.budget
                    if self.rng.random() < self.short_seq_prob:
                        target = int(self.rng.integers(2, self.budget + 1))
                i += 1

    def _pair_from_chunk(
        self, block: list[Document], index: int, document: Document, chunk: list[Sentence], target: int, i: int
    ) -> Iterator[Packed]:
        """Emit one pair from `chunk`; returns the updated sentence index (BERT puts unused sentences back)."""
        split_single = len(chunk) == 1 and len(chunk[0][0]) >= 2
        if split_single:
            chunk = self._split_single(chunk[0])
        if len(chunk) == 1:  # a single one-token sentence
            if self.format == "sop":
                self.stats.dropped_tokens += len(chunk[0][0])
                return i
            a_end = 1
        else:
            a_end = int(self.rng.integers(1, len(chunk)))
        a = chunk[:a_end]
        if self.format == "sop":
            b = chunk[a_end:]
            swapped = bool(self.rng.random() < 0.5)
            a, b = self._truncate_pair(a, b, b_is_own=True)
            yield self._emit(b, a, 1) if swapped else self._emit(a, b, 0)
            return i
        random_next = self.coin.random_next(self.rng, actual_possible=len(chunk) > 1)
        if not random_next:
            a, b = self._truncate_pair(a, chunk[a_end:], b_is_own=True)
            yield self._emit(a, b, 0)
            return i
        other = self._pieces(self._other_document(block, index), self.budget, count=False)
        target_b = max(1, target - sum(len(s[0]) for s in a))
        start = int(self.rng.integers(len(other)))
        b: list[Sentence] = []
        for sentence in other[start:]:
            b.append(sentence)
            if sum(len(s[0]) for s in b) >= target_b:
                break
        if split_single:
            document[i] = chunk[1]  # the unused second half of the sentence starts the next chunk
            i -= 1
        else:
            i -= len(chunk) - a_end  # the rest of the chunk was not used: it starts the next chunk
        a, b = self._truncate_pair(a, b, b_is_own=False)
        self.stats.borrowed_tokens += int(len(b[0][0]))
        yield self._emit(a, b, 1)
        return i

    def _sentence_pairs(self, block: list[Document]) -> Iterator[Packed]:
        for index, raw in enumerate(block):
            document = self._pieces(raw, self.budget)
            i = 0
            while i < len(document):
                a = [document[i]]
                random_next = self.coin.random_next(self.rng, actual_possible=i + 1 < len(document))
                if random_next:
                    other = self._pieces(self._other_document(block, index), self.budget, count=False)
                    b = [other[int(self.rng.integers(len(other)))]]
                    a, b = self._truncate_pair(a, b, b_is_own=False)
                    self.stats.borrowed_tokens += int(len(b[0][0]))
                    yield self._emit(a, b, 1)
                    i += 1
                else:
                    a, b = self._truncate_pair(a, [document[i + 1]], b_is_own=True)
                    yield self._emit(a, b, 0)
                    i += 2

    def pack_block(self, block: list[Document]) -> Iterator[Packed]:
        """The sequences of one block of documents (lists of sentences); a sequence or row still open waits for the
        next block or `finish`. The block itself is left as it was, so several packers can pack the same one."""
        block = [doc for doc in block if any(len(s[0]) for s in doc)]
        for document in block:
            self.stats.input_tokens += int(sum(len(s[0]) for s in document))
        if not block:
            return
        if self.rows is not None:
            for document in block:
                for packed in self._contiguous(document):
                    yield from self.rows.add(packed)
        elif self.format in ("full-sentences", "doc-sentences", "single-segment"):
            for document in block:
                yield from self._contiguous(document)
        elif self.format == "sentence-pair":
            yield from self._sentence_pairs(block)
        else:
            yield from self._pairs(block)
        self._previous_block = block

    def finish(self) -> Iterator[Packed]:
        """What is left open after the last block."""
        if self._current:
            yield self._flush()
        if self.rows is not None:
            yield from self.rows.flush()


class DocumentRows:
    """Places [CLS] ... [SEP] documents into rows of `max_seq_len` tokens (ModernBERT's sequence packing).

    Best fit over at most `open_rows` rows being filled: a document goes into the fullest open row it fits in;
    when none has room and all are open, the fullest row is emitted first. A full row is emitted at once. More
    open rows pack tighter but hold more documents back; 8 already leaves little padding on short documents,
    and the order stays deterministic (no randomness: the corpus's order is the input's, as for other formats).
    """

    def __init__(self, max_seq_len: int, stats: PackStats, open_rows: int = 8) -> None:
        self.max_seq_len, self.stats, self.open_rows = max_seq_len, stats, open_rows
        self._rows: list[list[Packed]] = []
        self._used: list[int] = []

    def add(self, document: Packed) -> Iterator[Packed]:
        size = len(document.ids)
        fits = [i for i, used in enumerate(self._used) if used + size <= self.max_seq_len]
        if fits:
            row = max(fits, key=lambda i: self._used[i])
        else:
            if len(self._rows) == self.open_rows:
                yield self._emit(max(range(len(self._rows)), key=lambda i: self._used[i]))
            self._rows.append([])
            self._used.append(0)
            row = len(self._rows) - 1
        self._rows[row].append(document)
        self._used[row] += size
        self.stats.packed_documents += 1
        if self._used[row] == self.max_seq_len:
            yield self._emit(row)

    def flush(self) -> Iterator[Packed]:
        while self._rows:
            yield self._emit(0)

    def _emit(self, row: int) -> Packed:
        documents = self._rows.pop(row)
        self._used.pop(row)
        lengths = np.array([len(d.ids) for d in documents], np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int32)
        self.stats.sequences += 1
        self.stats.capacity += self.max_seq_len
        ids = np.concatenate([d.ids for d in documents])
        word_starts = np.concatenate([d.word_starts for d in documents])
        return Packed(ids, word_starts, doc_starts=starts)

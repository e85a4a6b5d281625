"""What the throughput benchmarks share: MLM batches from a built corpus, and a batch source that times them."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from bertkit.corpus.loader import SampledBatches


def mlm_batches(corpus_dir: Path, batch_size: int):
    """BERT's masking (15 %, 80/10/10) over every sequence of the corpus, shuffled from seed 0; and its
    tokenizer."""
    from bertkit.corpus.build import TOKENIZER_SUBDIR
    from bertkit.corpus.loader import MLMBatches
    from bertkit.corpus.masking import MaskingSpec
    from bertkit.corpus.shards import Corpus
    from bertkit.tokenizers.base import load_tokenizer

    corpus = Corpus(corpus_dir)
    tok = load_tokenizer(corpus_dir / TOKENIZER_SUBDIR)
    spec = MaskingSpec(0.15, 0.8, 0.1, tok.mask_id, tok.special_ids, tok.vocab_size)
    return MLMBatches(corpus, np.arange(len(corpus)), batch_size, spec, tok.pad_id, seed=0), tok


class Timed(SampledBatches):
    """A batch source that starts the clock after the warm-up batches (first calls allocate and pick
    kernels) and counts the non-padding tokens served after them. With `steps`, it times exactly that many
    optimizer steps: the clock stops (`seconds`) when batch warm-up + steps is fetched (a step fetches its
    batch first, so that is when the previous step's update has finished), and only the batches in between
    are counted, so nothing after the last timed step (a final checkpoint) is counted for one side only."""

    def __init__(self, source, warmup_batches: int, steps: int | None = None) -> None:
        self.source, self.warmup, self.steps, self.served, self.tokens = source, warmup_batches, steps, 0, 0
        self.start = self.seconds = 0.0
        self.sampler = source.sampler  # the trainer shards and resumes the wrapped order

    def next_batch(self):
        end = None if self.steps is None else self.warmup + self.steps
        if self.served == self.warmup:
            self.start = time.perf_counter()
        elif self.served == end:
            self.seconds = time.perf_counter() - self.start
        batch = self.source.next_batch()
        if self.served >= self.warmup and (end is None or self.served < end):
            self.tokens += int(batch["attention_mask"].sum())
        self.served += 1
        return batch

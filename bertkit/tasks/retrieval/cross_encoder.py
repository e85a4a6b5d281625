"""A cross-encoder's scores of (query, passage) pairs: the teacher of MarginMSE (Hofstätter et al. 2020, "Improving
Efficient Neural Ranking Models with Cross-Architecture Knowledge Distillation").

A cross-encoder reads the query and the passage together (`[CLS] query [SEP] passage [SEP]`) and gives one score: a
bertkit regression model or a Hugging Face one-output *ForSequenceClassification (ms-marco cross-encoders) its one
output; a classifier of two classes the log-odds of its second class (1 of 0/1: relevant). The bi-encoder then
learns, for each query and each of its hard negatives, the cross-encoder's margin score(q, p+) - score(q, n) with
its own margin (see objectives/contrastive.py). Every margin is computed once, before training, as a classifier
teacher's logits are cached.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from bertkit.config.task_kinds import SPEC_BY_ARCHITECTURE
from bertkit.errors import BertkitError
from bertkit.progress import Tracker

SCORE_BATCH = 64


class CrossEncoder:
    """A pair scorer loaded from a bertkit or Hugging Face model directory, or a hub name."""

    def __init__(self, spec: str | Path, device: torch.device, max_len: int | None = None) -> None:
        from bertkit.engine.checkpoint import load_state
        from bertkit.modelio.modeldir import load_model_dir, window_length
        from bertkit.models.pretraining import build_encoder
        from bertkit.tasks.classification import SequenceClassifier

        model_dir, meta, cfg, weights, self.tokenizer = load_model_dir(str(spec), hub=True)
        architecture = meta.get("architecture")
        kind = SPEC_BY_ARCHITECTURE.get(architecture) if isinstance(architecture, str) else None
        labels = list(meta.get("labels") or [])
        one_score = kind is not None and kind.head == "sequence" and kind.label_type == "float"
        two_classes = kind is not None and kind.head == "sequence" and kind.label_type == "str" and len(labels) == 2
        if not (one_score or two_classes):
            raise BertkitError(
                f"task.cross_encoder {spec} does not score a text pair: give a model fine-tuned on (query, passage) "
                "pairs with one output (regression, or a one-label Hugging Face cross-encoder) or two classes"
            )
        if cfg.family == "xlnet":
            raise BertkitError(f"task.cross_encoder {spec} is an XLNet model; use a BERT-layout cross-encoder")
        self.source, self.device, self.two_classes = str(model_dir), device, two_classes
        task = meta.get("task") or {}
        self.model = SequenceClassifier(build_encoder(cfg), 2 if two_classes else 1, 0.0, task.get("pool", "cls"))
        load_state(self.model, weights, str(model_dir))
        self.model.to(device).eval()
        self.max_len = window_length(cfg, task, max_len)
        self.use_types = cfg.type_vocab_size > 1

    @torch.no_grad()
    def scores(self, queries: list[str], passages: list[str], quiet: bool = True) -> torch.Tensor:
        """One score per (query, passage), in order (float32, on the CPU)."""
        from bertkit.corpus.loader import pad_batch
        from bertkit.tasks.classification import encode_examples

        encoded = encode_examples(queries, passages, np.zeros(len(queries), dtype=np.float32), self.tokenizer,
                                  self.max_len)  # fmt: skip
        order = sorted(range(len(queries)), key=lambda i: len(encoded.input_ids[i]))  # little padding per batch
        out = torch.empty(len(queries))
        with Tracker("cross-encoder scores", len(order), quiet, unit="pairs") as bar:
            for start in range(0, len(order), SCORE_BATCH):
                picked = order[start : start + SCORE_BATCH]
                ids, mask = pad_batch([encoded.input_ids[i] for i in picked], self.tokenizer.pad_id)
                types = pad_batch([encoded.token_type_ids[i] for i in picked], 0)[0] if self.use_types else None
                inputs = [ids, mask] + ([types] if types is not None else [])
                logits = self.model(*(x.to(self.device) for x in inputs))["logits"].float().cpu()
                out[picked] = logits[:, 1] - logits[:, 0] if self.two_classes else logits[:, 0]
                bar.advance(len(picked))
        return out


def teacher_margins(spec: str, queries: list[str], positives: list[str], negatives: list[list[str]],
                    max_len: int | None = None, quiet: bool = True) -> torch.Tensor:  # fmt: skip
    """(pairs, hard negatives): the cross-encoder's score of each query with its positive less its score with each
    of its negatives."""
    scorer = CrossEncoder(spec, torch.device("cpu"), max_len)
    width = len(negatives[0])
    positive = scorer.scores(queries, positives, quiet)
    negative = scorer.scores([q for q in queries for _ in range(width)], [n for row in negatives for n in row], quiet)
    return positive[:, None] - negative.view(len(queries), width)

"""Semantic similarity: a bi-encoder trained on sentence pairs with a gold score (CoSENT, or the squared error of
the cosine), scored as MTEB scores STS: Spearman (and Pearson) correlation of the cosine with the gold scores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config.schema import ModelConfig, TaskConfig
from bertkit.config.task_kinds import SPECS
from bertkit.corpus.loader import split_indices
from bertkit.errors import BertkitError
from bertkit.objectives.contrastive import SimilarityObjective
from bertkit.tasks.classification import average_ranks, pearson
from bertkit.tasks.data import TaskData, read_task_data
from bertkit.tasks.kinds.base import Evaluate, Prepared, window
from bertkit.tasks.kinds.embedding import NotServed, check_bi_encoder, embedding_meta, sentence_encoder
from bertkit.tasks.retrieval.batches import ScoredPairBatches
from bertkit.tasks.retrieval.search import embed_ids, encode_texts
from bertkit.tokenizers.base import Tokenizer


def read_scored_pairs(path: Path, task: TaskConfig, split: str | None) -> TaskData:
    return read_task_data(path, task.text_field, task.label_field, task.text_pair_field, split, task.skip_bad_rows,
                          "float", columns=task.columns, quoting=task.quoting)  # fmt: skip


def correlations(cosines: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    """Spearman and Pearson correlation of the cosines with the gold scores."""
    return {"spearman": round(pearson(average_ranks(cosines), average_ranks(gold)), 4),
            "pearson": round(pearson(cosines, gold), 4)}  # fmt: skip


class ScoredPairs:
    def __init__(self, data: TaskData, tokenizer: Tokenizer, max_len: int) -> None:
        self.first = encode_texts(data.texts, tokenizer, max_len)
        self.second = encode_texts(data.pairs or [], tokenizer, max_len)
        self.scores = np.asarray(data.labels, dtype=np.float32)
        self.pad = tokenizer.pad_id

    def evaluate(self, model: nn.Module, device: torch.device | None = None) -> dict[str, float]:
        device = device or next(model.parameters()).device
        first, second = embed_ids(model, self.first, self.pad, device), embed_ids(model, self.second, self.pad, device)
        cosines = F.cosine_similarity(first, second, dim=-1).double().numpy()
        return {**correlations(cosines, self.scores.astype(np.float64)), "examples": len(self.scores)}


def subset(data: TaskData, indices: np.ndarray) -> TaskData:
    pick = [int(i) for i in indices]
    return TaskData(data.path, [data.texts[i] for i in pick], [(data.pairs or [])[i] for i in pick],
                    [(data.labels or [])[i] for i in pick])  # fmt: skip


class SimilarityKind(NotServed):
    name = "similarity"
    architecture = SPECS[name].architecture
    predicts_from = "rows"

    def check_data(self, task: TaskConfig, path: Path, what: str, metrics: tuple[str, ...]) -> None:
        """Read a suite's file as a cell will (`bertkit evaluate` checks every file before the first cell)."""
        read_scored_pairs(path, task, task.split if what == "train" else task.eval_split)

    def scorer(self, task: TaskConfig, model_cfg: ModelConfig, tokenizer: Tokenizer, eval_file: Path) -> ScoredPairs:
        """The evaluation of `eval_file` that `prepare` would run, for a model scored as it is."""
        if task.text_pair_field is None:
            raise BertkitError("a similarity task reads pairs of texts: name the second text's column")
        return ScoredPairs(read_scored_pairs(eval_file, task, task.eval_split), tokenizer, window(task, model_cfg))

    def prepare(self, task: TaskConfig, model_cfg: ModelConfig, tokenizer: Tokenizer, train_file: Path,
                eval_file: Path | None, seed: int) -> Prepared:  # fmt: skip
        if task.text_pair_field is None:
            raise BertkitError("a similarity task reads pairs of texts: name the second text's column with "
                               "--text-pair-field (task.text_pair_field)")  # fmt: skip
        check_bi_encoder(task, model_cfg)
        read = read_scored_pairs(train_file, task, task.split)
        if eval_file is not None:
            train, held_out = read, read_scored_pairs(eval_file, task, task.eval_split)
        else:
            train_idx, eval_idx = split_indices(len(read), task.eval_fraction, seed)
            train, held_out = subset(read, train_idx), (subset(read, eval_idx) if len(eval_idx) else None)
        scores = np.asarray(train.labels, dtype=np.float32)
        if len(np.unique(scores)) < 2:
            raise BertkitError(f"{train_file}: every score is the same; a similarity task needs varied scores")
        max_len = window(task, model_cfg)
        encoded = ScoredPairs(train, tokenizer, max_len)
        scoring = ScoredPairs(held_out, tokenizer, max_len) if held_out is not None else None

        def sources(model: nn.Module, micro: int, seed: int, device: torch.device) -> tuple[Any, Evaluate | None]:
            source = ScoredPairBatches(encoded.first, encoded.second, encoded.scores, micro, encoded.pad, seed)
            return source, (scoring.evaluate if scoring is not None else None)

        low, high = float(scores.min()), float(scores.max())
        return Prepared(
            labels=[],
            model_cfg=model_cfg,
            examples=len(train),
            metric=task.best_metric,
            build=sentence_encoder(task),
            objective=SimilarityObjective(task.similarity_loss, task.scale, low, high),
            sources=sources,
            task_meta=task.model_dump(mode="json"),
            summary={
                "rows_read": read.rows_read,
                "rows_skipped": read.skipped,
                "train_examples": len(train),
                "eval_examples": len(held_out) if held_out is not None else 0,
                "score_range": [low, high],
                "pooling": task.pooling,
                "normalize": task.normalize,
            },  # fmt: skip
            model_meta={"embedding": embedding_meta(task)},
            whole_batch=task.similarity_loss == "cosent",
        )

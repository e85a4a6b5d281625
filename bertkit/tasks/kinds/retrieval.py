"""Retrieval: a bi-encoder trained on (query, positive[, hard negatives]) pairs with in-batch negatives
(MultipleNegativesRankingLoss), scored by exact search over a BEIR folder's corpus or a pairs file read as one:
nDCG@10, MRR@10, Recall@100 and MAP@100 (bertkit/tasks/retrieval/metrics.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config.schema import TASK_METRICS, ModelConfig, TaskConfig
from bertkit.config.task_kinds import SPECS
from bertkit.corpus.loader import split_indices
from bertkit.errors import BertkitError
from bertkit.objectives.contrastive import RankingObjective
from bertkit.tasks.kinds.base import Evaluate, Prepared, window
from bertkit.tasks.kinds.embedding import (
    NotServed,
    check_bi_encoder,
    embedding_meta,
    load_sentence_encoder,
    sentence_encoder,
)
from bertkit.tasks.retrieval.batches import PairBatches, TeacherVectors, text_keys
from bertkit.tasks.retrieval.cross_encoder import teacher_margins
from bertkit.tasks.retrieval.data import Pairs, RetrievalSet, pairs_as_set, read_eval_set, read_pairs
from bertkit.tasks.retrieval.metrics import deepest_cut, score_run
from bertkit.tasks.retrieval.projection import principal_projection
from bertkit.tasks.retrieval.search import embed_ids, encode_texts, exact_search
from bertkit.tokenizers.base import Tokenizer


class EncodedSet:
    """An evaluation set's texts as token ids, and its scoring: embed, search, score."""

    def __init__(self, data: RetrievalSet, tokenizer: Tokenizer, max_len: int, metrics: tuple[str, ...]) -> None:
        self.data, self.metrics, self.pad = data, metrics, tokenizer.pad_id
        self.queries = encode_texts(data.queries, tokenizer, max_len)
        self.docs = encode_texts(data.docs, tokenizer, max_len)

    def evaluate(self, model: nn.Module, device: torch.device | None = None) -> dict[str, float]:
        device = device or next(model.parameters()).device
        queries = embed_ids(model, self.queries, self.pad, device)
        docs = embed_ids(model, self.docs, self.pad, device)
        depth = deepest_cut(self.metrics)
        _, found = exact_search(queries, docs, depth + 1, device)
        ids = self.data.doc_ids
        # A document with the query's own id is the query itself (ArguAna, Quora): left out, as BEIR and MTEB do.
        run = {qid: [ids[j] for j in row if ids[j] != qid][:depth]
               for qid, row in zip(self.data.query_ids, found.tolist(), strict=True)}  # fmt: skip
        scores = score_run(run, self.data.qrels, self.metrics)
        rounded = {name: round(value, 4) for name, value in scores.items()}
        return {**rounded, "queries": len(self.queries), "documents": len(self.docs)}


def subset(pairs: Pairs, indices: np.ndarray) -> Pairs:
    pick = [int(i) for i in indices]
    return Pairs(pairs.path, [pairs.queries[i] for i in pick], [pairs.positives[i] for i in pick],
                 [pairs.negatives[i] for i in pick] if pairs.negatives is not None else None)  # fmt: skip


class RetrievalKind(NotServed):
    name = "retrieval"
    architecture = SPECS[name].architecture
    predicts_from = "rows"

    def check_data(self, task: TaskConfig, path: Path, what: str, metrics: tuple[str, ...]) -> None:
        """Read a suite's file as a cell will (`bertkit evaluate` checks every file before the first cell)."""
        if what == "train":
            read_pairs(path, task.query_field, task.positive_field, task.negative_field, task.split, task.skip_bad_rows)
        else:
            read_eval_set(path, task.query_field, task.positive_field, task.negative_field, task.eval_split,
                          task.qrels_split)  # fmt: skip

    def scorer(self, task: TaskConfig, model_cfg: ModelConfig, tokenizer: Tokenizer, eval_file: Path) -> EncodedSet:
        """The evaluation of `eval_file` that `prepare` would run, for a model scored as it is."""
        held_out = read_eval_set(eval_file, task.query_field, task.positive_field, task.negative_field,
                                 task.eval_split, task.qrels_split)  # fmt: skip
        return EncodedSet(held_out, tokenizer, window(task, model_cfg), TASK_METRICS["retrieval"])

    def prepare(self, task: TaskConfig, model_cfg: ModelConfig, tokenizer: Tokenizer, train_file: Path,
                eval_file: Path | None, seed: int) -> Prepared:  # fmt: skip
        read = read_pairs(train_file, task.query_field, task.positive_field, task.negative_field, task.split,
                          task.skip_bad_rows)  # fmt: skip
        if eval_file is not None:
            train = read
            held_out = read_eval_set(eval_file, task.query_field, task.positive_field, task.negative_field,
                                     task.eval_split, task.qrels_split)  # fmt: skip
        else:
            train_idx, eval_idx = split_indices(len(read), task.eval_fraction, seed)
            train = subset(read, train_idx)
            held_out = pairs_as_set(subset(read, eval_idx)) if len(eval_idx) else None
        if len(train) < 2:
            raise BertkitError(f"{train_file}: {len(train)} training pair; in-batch negatives need at least 2")
        check_bi_encoder(task, model_cfg)
        too_wide = [d for d in task.matryoshka_dims or [] if d >= model_cfg.hidden_size]
        if too_wide:
            raise BertkitError(f"task.matryoshka_dims {too_wide} are not narrower than the model's "
                               f"{model_cfg.hidden_size} dimensions; list widths below it (the full width is always "
                               "trained)")  # fmt: skip
        max_len = window(task, model_cfg)
        queries = encode_texts(train.queries, tokenizer, max_len)
        positives = encode_texts(train.positives, tokenizer, max_len)
        negatives = None
        columns: list[list[str]] = [train.queries, train.positives]
        if train.negatives is not None:
            flat = encode_texts([text for row in train.negatives for text in row], tokenizer, max_len)
            width = len(train.negatives[0])
            negatives = [flat[i * width : (i + 1) * width] for i in range(len(train))]
            columns += [[row[j] for row in train.negatives] for j in range(width)]
        keys = text_keys(*columns)
        teacher = teacher_vectors(task, train, model_cfg, max_len) if task.teacher else None
        margins = None
        if task.cross_encoder:
            if train.negatives is None:
                raise BertkitError("task.cross_encoder teaches the margin of each query's positive over its hard "
                                   "negatives: name their column with task.negative_field (bertkit mine-negatives "
                                   "writes one)")  # fmt: skip
            margins = teacher_margins(task.cross_encoder, train.queries, train.positives, train.negatives)
        scoring = EncodedSet(held_out, tokenizer, max_len, TASK_METRICS["retrieval"]) if held_out else None
        pad = tokenizer.pad_id

        def sources(model: nn.Module, micro: int, seed: int, device: torch.device) -> tuple[Any, Evaluate | None]:
            source = PairBatches(queries, positives, negatives, keys, micro, pad, seed, teacher, margins)
            return source, (scoring.evaluate if scoring is not None else None)

        summary: dict[str, Any] = {
            "rows_read": read.rows_read,
            "rows_skipped": read.skipped,
            "train_pairs": len(train),
            "hard_negatives": len(train.negatives[0]) if train.negatives is not None else 0,
            "eval_set": held_out.report() if held_out is not None else None,
            "pooling": task.pooling,
            "normalize": task.normalize,
            "teacher": task.teacher,
            "cross_encoder": task.cross_encoder,
        }
        if teacher is not None and teacher.projection is not None:  # a narrower student learns the projected vectors
            summary["teacher_projection"] = teacher.projection
        if margins is not None:  # how the cross-encoder ranks the training pairs: its share of positives first
            summary["margin"] = {"pairs": len(train), "mean": round(float(margins.mean()), 4),
                                 "positive_first": round(float((margins > 0).float().mean()), 4)}  # fmt: skip
        return Prepared(
            labels=[],
            model_cfg=model_cfg,
            examples=len(train),
            metric=task.best_metric,
            build=sentence_encoder(task),
            objective=RankingObjective(task.scale, task.symmetric, task.matryoshka_dims, task.cache_chunk,
                                       task.gather_negatives, task.distill_weight, task.distill_loss,
                                       task.margin_weight),
            sources=sources,
            task_meta=task.model_dump(mode="json"),
            summary=summary,
            model_meta={"embedding": embedding_meta(task)},
            whole_batch=True,
        )


def teacher_vectors(task: TaskConfig, train: Pairs, student_cfg: ModelConfig, max_len: int) -> TeacherVectors:
    """The teacher's unit vectors of every training text, computed once (as a classifier teacher's logits are
    cached), pooled as the teacher was trained. For the squared distance to a narrower student's vectors, they are
    projected onto the teacher's principal directions at the student's width (bertkit/tasks/retrieval/projection.py);
    the in-batch ranking (kl) compares each model's scores among its own vectors, so it takes them as they are."""
    teacher = load_sentence_encoder(str(task.teacher), torch.device("cpu"), max_len)
    model, tokenizer, device = teacher.model, teacher.tokenizer, torch.device("cpu")
    negatives = [text for row in train.negatives for text in row] if train.negatives is not None else []
    unique = list(dict.fromkeys([*train.queries, *train.positives, *negatives]))
    found = F.normalize(embed_ids(model, encode_texts(unique, tokenizer, teacher.max_len), tokenizer.pad_id, device),
                        dim=-1)  # fmt: skip
    projection = None
    if task.distill_loss == "mse" and teacher.config.hidden_size != student_cfg.hidden_size:
        projection = principal_projection(found, student_cfg.hidden_size)
        found = projection(found)
    where = {text: i for i, text in enumerate(unique)}

    def vectors(texts: list[str]) -> torch.Tensor:
        return found[[where[text] for text in texts]]

    by_negative = vectors(negatives).view(len(train), len(train.negatives[0]), -1) if negatives else None
    return TeacherVectors(vectors(train.queries), vectors(train.positives), by_negative,
                          projection.report() if projection is not None else None)  # fmt: skip

"""Embedding many texts with a bi-encoder, and exact search: every query scored against every document by cosine
similarity, in blocks so the score matrix never holds the whole corpus at once, on whatever device the model is."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertkit.corpus.loader import pad_batch
from bertkit.tokenizers.base import Tokenizer


def encode_texts(texts: list[str], tokenizer: Tokenizer, max_len: int) -> list[np.ndarray]:
    """`[CLS] text [SEP]`, at most `max_len` tokens."""
    return [
        np.asarray([tokenizer.cls_id, *ids[: max_len - 2], tokenizer.sep_id], dtype=np.int64)
        for ids in tokenizer.encode_batch(texts)
    ]


@torch.no_grad()
def embed_ids(model: nn.Module, sequences: list[np.ndarray], pad_id: int, device: torch.device,
              batch_size: int = 64, progress: Callable[[int], None] | None = None) -> torch.Tensor:  # fmt: skip
    """The vectors of `sequences`, in their order, as float32 on the CPU. Texts of like length are batched together
    (longest first), so little is spent on padding."""
    was_training = model.training
    model.eval()
    order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
    out: torch.Tensor | None = None
    for start in range(0, len(order), batch_size):
        picked = order[start : start + batch_size]
        input_ids, attention_mask = pad_batch([sequences[i] for i in picked], pad_id)
        vectors = model(input_ids.to(device), attention_mask.to(device)).float().cpu()
        if out is None:
            out = torch.empty(len(sequences), vectors.shape[-1])
        out[picked] = vectors
        if progress is not None:
            progress(len(picked))
    model.train(was_training)
    return out if out is not None else torch.empty(0, 0)


@torch.no_grad()
def exact_search(queries: torch.Tensor, docs: torch.Tensor, k: int, device: torch.device | None = None,
                 block: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(scores, document indices), each (queries, min(k, documents)), best first: cosine similarity of every query
    with every document."""
    device = device or torch.device("cpu")
    k = min(k, docs.shape[0])
    doc_vectors = F.normalize(docs.float(), dim=-1).to(device)
    all_scores, all_indices = [], []
    for start in range(0, queries.shape[0], block):
        part = F.normalize(queries[start : start + block].float(), dim=-1).to(device)
        scores, indices = (part @ doc_vectors.T).topk(k, dim=-1)
        all_scores.append(scores.cpu())
        all_indices.append(indices.cpu())
    return torch.cat(all_scores), torch.cat(all_indices)

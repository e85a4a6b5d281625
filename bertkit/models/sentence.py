"""A bi-encoder: an encoder whose output is one vector per text, pooled over its last layer (the mean over the
non-padding tokens, or the [CLS] state) and optionally scaled to unit length, as sentence-transformers' Pooling and
Normalize modules compute it. Forward pass only; its losses are bertkit/objectives/contrastive.py."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.models.pooling import mean_pool
from bertkit.models.xlnet import last_token

Pooling = Literal["mean", "cls"]


class SentenceEncoder(nn.Module):
    def __init__(self, encoder: nn.Module, pooling: Pooling = "mean", normalize: bool = True) -> None:
        super().__init__()
        if pooling not in ("mean", "cls"):
            raise ValueError(f"pooling must be mean or cls, not {pooling!r}")
        self.encoder, self.pooling, self.normalize = encoder, pooling, normalize
        self.xlnet = getattr(encoder.config, "family", "") == "xlnet"

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        hidden = self.encoder(input_ids, attention_mask, token_type_ids).last_hidden_state
        if self.pooling == "mean":
            pooled = mean_pool(hidden, attention_mask)
        else:
            pooled = last_token(hidden, attention_mask) if self.xlnet else hidden[:, 0]
        return F.normalize(pooled, dim=-1) if self.normalize else pooled

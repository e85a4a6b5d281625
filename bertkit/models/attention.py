"""Multi-head self-attention: the attention call every family shares (`attend`), its outputs, and the full
(SDPA) self-attention module. BigBird's block-sparse variant (block_sparse.py) builds on it; layers.py picks one."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config.schema import ModelConfig
from bertkit.models.unpad import Packing, varlen_attention


class AttentionOutput(NamedTuple):
    # A NamedTuple, not a dataclass: engines that hook module outputs (DeepSpeed ZeRO-3) can see its tensors.
    hidden: torch.Tensor | None  # None when only the scores and values were asked for (`scores_only`)
    probs: torch.Tensor | None = None  # (B, heads, T, T) after softmax, when asked for
    scores: torch.Tensor | None = None  # (B, heads, T, T) QK^T/sqrt(d) before masking (TinyBERT)
    values: torch.Tensor | None = None  # (B, heads, T, head_dim) value vectors (MiniLM's value relation)


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout_p: float, need_weights: bool
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """Attention of (B, heads, T, head_dim) queries, keys and values under a boolean `mask` (True where a query
    may attend to a key): the (B, T, hidden) context, and with `need_weights` the probabilities, the scores
    QK^T/sqrt(d) before masking, and the values. Without them SDPA's fused kernels do the work."""
    batch, _, length, _ = q.shape
    probs = scores = values = None
    if not need_weights:
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    else:
        # The explicit path: distillation needs the scores and probabilities themselves.
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        masked = scores if mask is None else scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        probs = masked.softmax(dim=-1)
        context = F.dropout(probs, dropout_p) @ v
        values = v
    return context.transpose(1, 2).reshape(batch, length, -1), probs, scores, values


class SelfAttention(nn.Module):
    """Multi-head self-attention with a fused QKV projection and PyTorch's SDPA kernels."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.hidden_size // cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout_p = cfg.attention_dropout

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | Packing | None,
        need_weights: bool = False,
        scores_only: bool = False,
    ) -> AttentionOutput:
        """`scores_only`: return the scores and values alone, with no softmax, context or output projection:
        MiniLM reads a last layer's QK^T and V and nothing computed after them.

        With a `Packing` for a mask, `x` is the batch's packed (N, hidden) real tokens (bertkit/models/unpad.py);
        the encoder never asks that path for weights or scores."""
        if isinstance(mask, Packing):
            return AttentionOutput(self._packed(x, mask))
        batch, length, _ = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if scores_only:
            return AttentionOutput(None, None, (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim), v)
        dropout_p = self.dropout_p if self.training else 0.0
        context, probs, scores, values = attend(q, k, v, mask, dropout_p, need_weights)
        return AttentionOutput(self.out(context), probs, scores, values)

    def _packed(self, x: torch.Tensor, packing: Packing) -> torch.Tensor:
        tokens = x.shape[0]
        q, k, v = self.qkv(x).view(tokens, 3, self.num_heads, self.head_dim).unbind(1)
        dropout_p = self.dropout_p if self.training else 0.0
        return self.out(varlen_attention(q, k, v, packing, dropout_p).reshape(tokens, -1))

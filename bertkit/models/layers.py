"""Shared building blocks of the BERT family: embeddings, feed-forward, encoder layer, and the choice of
self-attention (bertkit/models/attention.py, or BigBird's bertkit/models/block_sparse.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config.schema import ModelConfig
from bertkit.models.attention import AttentionOutput, SelfAttention
from bertkit.models.repeatable import RepeatableEmbedding
from bertkit.models.unpad import Packing

ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),  # BERT's exact erf GeLU
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2/ALBERT tanh approximation
    "relu": F.relu,
}


class Embeddings(nn.Module):
    """Token + absolute position (+ segment) embeddings, then LayerNorm and dropout.

    Width is the embedding size E, which ALBERT and ELECTRA keep below the hidden size H (the encoder
    projects E -> H); for BERT E = H.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        dim = cfg.embedding_dim
        self.word_embeddings = nn.Embedding(cfg.vocab_size, dim, padding_idx=cfg.pad_token_id)
        self.position_embeddings = RepeatableEmbedding(cfg.max_position_embeddings, dim)
        self.token_type_embeddings = RepeatableEmbedding(cfg.type_vocab_size, dim) if cfg.type_vocab_size > 0 else None
        self.norm = nn.LayerNorm(dim, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout)
        self.position_offset = cfg.position_offset
        # BigBird's embeddings apply dropout before the LayerNorm (the same in eval, not in training).
        self.dropout_first = cfg.family == "bigbird"

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if position_ids is None:
            positions = torch.arange(input_ids.shape[1], device=input_ids.device) + self.position_offset
            position_ids = positions.unsqueeze(0)
        x = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                # Index 0 of the table, broadcast: same result as a zero tensor without allocating one.
                x = x + self.token_type_embeddings.weight[0]
            else:
                x = x + self.token_type_embeddings(token_type_ids)
        if self.dropout_first:
            return self.norm(self.dropout(x))
        return self.dropout(self.norm(x))


def build_attention(cfg: ModelConfig, layer_index: int = 0) -> SelfAttention:
    """The self-attention `model.attention` selects: full (SDPA) or BigBird's block-sparse, which seeds
    its random-block draw with the layer's index as the reference does."""
    if cfg.block_sparse:
        from bertkit.models.block_sparse import BlockSparseAttention

        return BlockSparseAttention(cfg, layer_index)
    return SelfAttention(cfg)


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.act = ACTIVATIONS[cfg.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class EncoderLayer(nn.Module):
    """One transformer layer; post-LN as in BERT, or pre-LN (more stable at high learning rates).

    ALBERT's partial sharing builds layers that own only one of the two sub-layers: `own_attention=False`
    (or `own_ffn=False`) leaves it out, and the encoder passes the shared one in at call time, so the
    shared weights are stored once in the state dict.
    """

    def __init__(
        self, cfg: ModelConfig, own_attention: bool = True, own_ffn: bool = True, layer_index: int = 0
    ) -> None:
        super().__init__()
        self.attention = build_attention(cfg, layer_index) if own_attention else None
        self.attn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps) if own_attention else None
        self.ffn = FeedForward(cfg) if own_ffn else None
        self.ffn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps) if own_ffn else None
        self.dropout = nn.Dropout(cfg.hidden_dropout)
        self.pre_norm = cfg.norm == "pre"

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | Packing | None,
        need_weights: bool = False,
        shared: EncoderLayer | None = None,
        attention_only: bool = False,
    ) -> tuple[torch.Tensor, AttentionOutput]:
        """`attention_only`: stop after the attention's scores and values (see SelfAttention), returning the
        input unchanged beside them: the layer's own output is never computed."""
        # The sub-layers this layer shares come from `shared` (layer 0 of the encoder).
        att = self if self.attention is not None else shared
        ff = self if self.ffn is not None else shared
        if att is None or ff is None:
            raise ValueError("a layer that shares a sub-layer must be called with `shared`")
        attention_fn, attn_norm_fn, ffn, ffn_norm = att.attention, att.attn_norm, ff.ffn, ff.ffn_norm
        if attention_only:
            return x, attention_fn(attn_norm_fn(x) if self.pre_norm else x, mask, True, scores_only=True)
        if self.pre_norm:
            attn = attention_fn(attn_norm_fn(x), mask, need_weights)
            x = x + self.dropout(attn.hidden)
            x = x + self.dropout(ffn(ffn_norm(x)))
        else:
            attn = attention_fn(x, mask, need_weights)
            x = attn_norm_fn(x + self.dropout(attn.hidden))
            x = ffn_norm(x + self.dropout(ffn(x)))
        return x, attn


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """BERT's initialisation: N(0, 0.02) weights, zero biases, identity LayerNorm, zero padding row."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=std)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)

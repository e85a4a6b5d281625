"""Output heads (forward only). Losses live in bertkit/objectives."""

from __future__ import annotations

import torch
from torch import nn

from bertkit.config.schema import ModelConfig
from bertkit.models.layers import ACTIVATIONS, init_weights
from bertkit.models.repeatable import RepeatableEmbedding, select


def gather_rows(hidden: torch.Tensor, flat_positions: torch.Tensor) -> torch.Tensor:
    """Rows of a (B, T, H) tensor at flat indices into B*T; an index may repeat (SpanBERT's boundary tokens,
    once for each token of their span)."""
    return select(hidden.reshape(-1, hidden.shape[-1]), 0, flat_positions)


class MLMHead(nn.Module):
    """dense (H -> E) -> activation -> LayerNorm -> decoder whose weight *is* the word-embedding matrix.

    The tied matrix is passed in at call time rather than stored here, so the state dict holds it once
    (under the encoder) and tying survives any wrapping or sharding of the model. E = H except for
    factorized embeddings (ALBERT, ELECTRA), whose heads project back to the embedding width.
    """

    def __init__(self, cfg: ModelConfig, act: str | None = None) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.embedding_dim)
        # RoBERTa's and ELECTRA's generator heads use GeLU whatever the encoder's activation.
        self.act = ACTIVATIONS[act or cfg.hidden_act]
        self.norm = nn.LayerNorm(cfg.embedding_dim, eps=cfg.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.apply(init_weights)

    def forward(self, hidden: torch.Tensor, decoder_weight: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(self.norm(self.act(self.dense(hidden))), decoder_weight, self.bias)


class PairHead(nn.Module):
    """Two-way classifier on the pooled [CLS] output: BERT's NSP and ALBERT's SOP."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.classifier = nn.Linear(cfg.hidden_size, 2)
        self.apply(init_weights)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.classifier(pooled)


class RTDHead(nn.Module):
    """ELECTRA's discriminator: one logit per token, 'was this token replaced?'."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.act = ACTIVATIONS[cfg.hidden_act]
        self.prediction = nn.Linear(cfg.hidden_size, 1)
        self.apply(init_weights)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.prediction(self.act(self.dense(hidden))).squeeze(-1)


class SBOHead(nn.Module):
    """SpanBERT's span boundary objective: predict each token inside a masked span from the encodings of
    the two tokens just outside it plus an embedding of its position in the span, through a 2-layer FFN
    with GeLU and LayerNorm; the decoder is tied to the word embeddings like the MLM head's."""

    def __init__(self, cfg: ModelConfig, max_span: int) -> None:
        super().__init__()
        hidden, dim = cfg.hidden_size, cfg.embedding_dim
        self.position_embeddings = RepeatableEmbedding(max_span, hidden)
        self.dense1 = nn.Linear(3 * hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden, eps=cfg.layer_norm_eps)
        self.dense2 = nn.Linear(hidden, dim)
        self.norm2 = nn.LayerNorm(dim, eps=cfg.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.act = ACTIVATIONS["gelu"]
        self.max_span = max_span
        self.apply(init_weights)

    def forward(
        self, left: torch.Tensor, right: torch.Tensor, offsets: torch.Tensor, decoder_weight: torch.Tensor
    ) -> torch.Tensor:
        # Offsets past the table (spans longer than max_span) share its last row rather than failing.
        position = self.position_embeddings(offsets.clamp(max=self.max_span - 1))
        x = self.norm1(self.act(self.dense1(torch.cat([left, right, position], dim=-1))))
        x = self.norm2(self.act(self.dense2(x)))
        return nn.functional.linear(x, decoder_weight, self.bias)

"""Output heads (forward only): the masked-LM head, tied to the input embeddings."""

from __future__ import annotations

import torch
from torch import nn

from bertkit.config.schema import ModelConfig
from bertkit.models.layers import ACTIVATIONS, init_weights


class MLMHead(nn.Module):
    """dense -> activation -> LayerNorm -> decoder whose weight *is* the word-embedding matrix.

    The tied matrix is passed in at call time rather than stored here, so the state dict holds it once
    (under the encoder) and tying survives any wrapping or sharding of the model.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.act = ACTIVATIONS[cfg.hidden_act]
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.apply(init_weights)

    def forward(self, hidden: torch.Tensor, decoder_weight: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(self.norm(self.act(self.dense(hidden))), decoder_weight, self.bias)

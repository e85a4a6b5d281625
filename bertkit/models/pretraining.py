"""Encoder + pretraining heads as one module, so engines can wrap a single nn.Module."""

from __future__ import annotations

import torch
from torch import nn

from bertkit.config.schema import ModelConfig
from bertkit.models.bert import BertEncoder
from bertkit.models.heads import MLMHead


class MaskedLMModel(nn.Module):
    """Returns MLM logits only at the masked positions: sparse prediction skips the V-wide matmul
    for the ~85% of tokens that carry no label."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = BertEncoder(cfg)
        self.mlm_head = MLMHead(cfg)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        mlm_positions: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        hidden = self.encoder(input_ids, attention_mask, token_type_ids).last_hidden_state
        flat = hidden.reshape(-1, hidden.shape[-1])
        selected = flat if mlm_positions is None else flat.index_select(0, mlm_positions)
        decoder = self.encoder.embeddings.word_embeddings.weight
        return {"mlm_logits": self.mlm_head(selected, decoder)}


def count_parameters(cfg: ModelConfig, with_heads: bool = False) -> int:
    """Parameter count computed on the meta device: exact, instant, and no memory for the weights."""
    with torch.device("meta"):
        model: nn.Module = MaskedLMModel(cfg) if with_heads else BertEncoder(cfg)
    return sum(p.numel() for p in model.parameters())

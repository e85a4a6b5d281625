"""The BERT encoder (also RoBERTa and the DistilBERT/TinyBERT shapes), in the order data flows through it."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from bertkit.config.schema import ModelConfig
from bertkit.models.layers import Embeddings, EncoderLayer, init_weights


@dataclass
class EncoderOutput:
    last_hidden_state: torch.Tensor
    pooled: torch.Tensor | None = None
    hidden_states: list[torch.Tensor] = field(default_factory=list)  # embeddings output + every layer
    attentions: list[torch.Tensor] = field(default_factory=list)  # softmax probabilities per layer
    attention_scores: list[torch.Tensor] = field(default_factory=list)  # pre-softmax QK^T/sqrt(d)


class Pooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence representation BERT's NSP head and classifiers read."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


class BertEncoder(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embeddings = Embeddings(cfg)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_layers))
        # Pre-LN stacks need a final norm; post-LN layers already end in one.
        self.final_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps) if cfg.norm == "pre" else None
        self.pooler = Pooler(cfg.hidden_size) if cfg.pooler else None
        self.apply(init_weights)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> EncoderOutput:
        x = self.embeddings(input_ids, token_type_ids, position_ids)
        # (B, 1, 1, T) boolean mask: True where a key may be attended to. None lets SDPA pick its fastest kernel.
        mask = attention_mask.bool()[:, None, None, :] if attention_mask is not None else None
        out = EncoderOutput(last_hidden_state=x)
        if output_hidden_states:
            out.hidden_states.append(x)
        for layer in self.layers:
            x, attn = layer(x, mask, need_weights=output_attentions)
            if output_hidden_states:
                out.hidden_states.append(x)
            if output_attentions:
                out.attentions.append(attn.probs)
                out.attention_scores.append(attn.scores)
        if self.final_norm is not None:
            x = self.final_norm(x)
        out.last_hidden_state = x
        out.pooled = self.pooler(x) if self.pooler is not None else None
        return out

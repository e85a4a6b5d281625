"""Sentence embeddings out of an encoder's token states (forward pass only): the mean over the non-padding
tokens, and an encoder wrapped to return its pooled outputs, which `bertkit embed` runs and the ONNX export
traces."""

from __future__ import annotations

import torch
from torch import nn

from bertkit.models.capture import LayerCapture
from bertkit.models.xlnet import last_token


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Mean over the tokens the mask keeps (all of them without a mask): padding never dilutes it."""
    if attention_mask is None:
        return hidden.mean(dim=1)
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


class PooledEncoder(nn.Module):
    """An encoder whose outputs are sentence embeddings of one layer: `mean` (over the non-padding tokens) and
    `cls` (the [CLS] state; XLNet's is its last token). `bertkit embed` runs it, and `bertkit export --to onnx`
    traces it, so an exported encoder pools inside the graph exactly as embed pools in PyTorch."""

    def __init__(self, encoder: nn.Module, layer: int = -1) -> None:
        super().__init__()
        self.encoder, self.layer = encoder, layer
        self.xlnet = encoder.config.family == "xlnet"
        self.last = layer in (-1, encoder.config.num_layers)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        capture = None if self.last else LayerCapture(hidden_states=True)
        out = self.encoder(input_ids, attention_mask, token_type_ids, capture=capture)
        # hidden_states[0] is the embeddings' output, [k] layer k's; the last layer's state is taken
        # after the final norm of pre-LN models (last_hidden_state).
        hidden = out.last_hidden_state if capture is None else capture.hidden_states[self.layer]
        cls_state = last_token(hidden, attention_mask) if self.xlnet else hidden[:, 0]
        return {"mean": mean_pool(hidden, attention_mask), "cls": cls_state}

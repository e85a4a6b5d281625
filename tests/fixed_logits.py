"""A stand-in model whose logits are fixed in advance, for testing metrics and losses on known outputs. Importable
from every test directory (see cli_helpers.py)."""

from __future__ import annotations

import torch
from torch import nn


class FixedLogits(nn.Module):
    """Logits from a table indexed by the first input id (so any batch split sees the same logits)."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = nn.Parameter(table)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        return {"logits": self.table[input_ids[:, 0]]}

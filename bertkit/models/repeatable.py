"""Gathers whose backward gives the same bits in every run on CUDA.

Two gathers add a repeated row's gradients with atomics on CUDA, in an order that varies from run to run:
`index_select`'s backward (`index_add_`), and the embedding backward of a table with few rows against many
lookups (2 token types for thousands of tokens; positions in a large unpadded batch). Two runs from the same
seeds can part in the last bits after a few steps. Indexing's backward (`index_put_` with accumulation) sorts
the indices and adds each row's gradients in order, so these take it on CUDA. On other devices the plain ops
already repeat and are kept as they are. The forward pass is the same gather either way.
"""

from __future__ import annotations

import torch
from torch import nn


def _sorted(device: torch.device, sorted_backward: bool | None) -> bool:
    """Whether to take indexing's backward: as asked, or by default on CUDA."""
    return device.type == "cuda" if sorted_backward is None else sorted_backward


def select(x: torch.Tensor, dim: int, index: torch.Tensor, sorted_backward: bool | None = None) -> torch.Tensor:
    """`x.index_select(dim, index)`; `sorted_backward` (default: on CUDA) takes indexing's backward."""
    if not _sorted(x.device, sorted_backward):
        return x.index_select(dim, index)
    return x[(slice(None),) * dim + (index,)]


class RepeatableEmbedding(nn.Embedding):
    """An embedding table without a padding row whose lookup takes indexing's backward (default: on CUDA).

    Still an `nn.Embedding` called as a module, so engines that gather a module's weights around its forward
    (ZeRO-3) see it as they see any table.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, sorted_backward: bool | None = None) -> None:
        super().__init__(num_embeddings, embedding_dim)
        self.sorted_backward = sorted_backward

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if not _sorted(ids.device, self.sorted_backward):
            return super().forward(ids)
        return self.weight[ids]

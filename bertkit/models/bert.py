"""The encoder every family shares, in the order data flows through it.

BERT, RoBERTa, SpanBERT and the DistilBERT/TinyBERT shapes use it as is; ALBERT adds factorized embeddings
(E -> H projection) and cross-layer sharing; ELECTRA's discriminator and generator add the projection;
BigBird is RoBERTa-shaped with block-sparse attention (model.attention, bertkit/models/block_sparse.py).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
from torch import nn

from bertkit.config.schema import ModelConfig
from bertkit.models.attention import AttentionOutput
from bertkit.models.capture import LayerCapture, run_layers
from bertkit.models.layers import Embeddings, EncoderLayer, init_weights
from bertkit.models.unpad import Packing, document_mask, document_positions, pack, repad, should_pack, unpad


class EncoderOutput(NamedTuple):
    # A NamedTuple, not a dataclass: engines that hook module outputs (DeepSpeed ZeRO-3) can see its tensors.
    last_hidden_state: torch.Tensor
    pooled: torch.Tensor | None


class Pooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence representation BERT's NSP head and classifiers read."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


def _build_layers(cfg: ModelConfig) -> nn.ModuleList:
    """Distinct layers, or ALBERT's shared ones: all-shared keeps a single layer; shared-attention and
    shared-ffn keep one full layer 0 and, after it, layers that own only the sub-layer not shared."""
    if cfg.layer_sharing == "all-shared":
        return nn.ModuleList([EncoderLayer(cfg)])
    own_attention = cfg.layer_sharing != "shared-attention"
    own_ffn = cfg.layer_sharing != "shared-ffn"
    return nn.ModuleList(
        EncoderLayer(cfg, own_attention=i == 0 or own_attention, own_ffn=i == 0 or own_ffn, layer_index=i)
        for i in range(cfg.num_layers)
    )


class BertEncoder(nn.Module):
    def __init__(self, cfg: ModelConfig, with_embeddings: bool = True) -> None:
        super().__init__()
        self.config = cfg
        # ELECTRA's generator reads the discriminator's embeddings, so it is built without its own.
        self.embeddings = Embeddings(cfg) if with_embeddings else None
        # ALBERT always projects (even when E = H); the others only when the widths differ.
        projects = cfg.embedding_dim != cfg.hidden_size or cfg.family == "albert"
        self.embed_proj = nn.Linear(cfg.embedding_dim, cfg.hidden_size) if projects else None
        self.layers = _build_layers(cfg)
        # Pre-LN stacks need a final norm; post-LN layers already end in one.
        self.final_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps) if cfg.norm == "pre" else None
        self.pooler = Pooler(cfg.hidden_size) if cfg.pooler else None
        # engine.unpad: "auto", True or False (bertkit/engine/unpad.py sets it); see `_packing`.
        self.unpad: bool | Literal["auto"] = "auto"
        # train.activation_checkpointing: recompute every k-th layer in the backward pass (0: none); set by
        # bertkit/engine/activation_checkpointing.py.
        self.checkpoint_every = 0
        self.apply(init_weights)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        capture: LayerCapture | None = None,
    ) -> EncoderOutput:
        """`inputs_embeds` replaces the embedding lookup (width E) for an encoder built without embeddings (ELECTRA's
        generator reads the discriminator's).

        `document_ids` (B, T): several documents packed into one row (corpus packing); each run of equal ids is
        a document that attention stays within, and positions restart at every document.

        `capture` (bertkit/models/capture.py): what a caller reads from inside (hidden states, chosen layers'
        attention), filled as the layers run.

        Unpadding (`self.unpad`, set by bertkit/engine/unpad.py from engine.unpad): the real tokens run as one
        packed sequence (bertkit/models/unpad.py); the outputs are the padded path's, re-padded.
        """
        layers = self.config.num_layers
        if capture is not None:
            capture.begin(layers)
        if document_ids is not None and attention_mask is None:
            attention_mask = torch.ones_like(document_ids)
        packing = self._packing(attention_mask, document_ids, capture is not None and capture.wants_weights)
        embedded = inputs_embeds
        if embedded is None:
            if self.embeddings is None or input_ids is None:
                raise ValueError("this encoder has no embeddings of its own; pass `inputs_embeds`")
            if packing is not None:
                embedded = self._embed_packed(input_ids, token_type_ids, position_ids, packing)
            else:
                if position_ids is None and document_ids is not None and attention_mask is not None:
                    position_ids = document_positions(attention_mask, document_ids) + self.embeddings.position_offset
                embedded = self.embeddings(input_ids, token_type_ids, position_ids)
        elif packing is not None:
            embedded = unpad(embedded, packing)
        x = self.embed_proj(embedded) if self.embed_proj is not None else embedded
        mask: torch.Tensor | Packing | None = packing
        if packing is None and attention_mask is not None:
            # (B, 1, 1, T) boolean mask: True where a key may be attended to; (B, 1, T, T) with documents.
            # None lets SDPA pick its fastest kernel.
            if document_ids is not None:
                mask = document_mask(attention_mask, document_ids)
            else:
                mask = attention_mask.bool()[:, None, None, :]
        padded = (lambda h: repad(h, packing)) if packing is not None else (lambda h: h)
        first = self.layers[0]

        def call(i: int, h: torch.Tensor, weights: bool, stop: bool) -> tuple[torch.Tensor, AttentionOutput]:
            layer = first if len(self.layers) == 1 else self.layers[i]
            return layer(h, mask, need_weights=weights, shared=first, attention_only=stop)

        x, stopped = run_layers(x, layers, call, capture, padded, self.checkpoint_every)
        if stopped:
            return EncoderOutput(x, None)
        if self.final_norm is not None:
            x = self.final_norm(x)
        x = padded(x)
        return EncoderOutput(x, self.pooler(x) if self.pooler is not None else None)

    def reused_parameters(self) -> int:
        """Parameters a forward pass applies more than once, counted once per extra use (compute, not storage):
        ALBERT's all-shared layer runs num_layers times; with shared-attention (shared-ffn) every later layer runs
        layer 0's attention (feed-forward) and its norm."""
        sharing = self.config.layer_sharing
        if sharing == "none":
            return 0
        first = self.layers[0]
        parts = {"all-shared": [first], "shared-attention": [first.attention, first.attn_norm],
                 "shared-ffn": [first.ffn, first.ffn_norm]}[sharing]  # fmt: skip
        reused = sum(p.numel() for part in parts if part is not None for p in part.parameters())
        return (self.config.num_layers - 1) * reused

    @property
    def supports_unpad(self) -> bool:
        """Every layer is per-token apart from full attention; BigBird's block-sparse attention needs its blocks."""
        return not self.config.block_sparse

    def _packing(
        self, attention_mask: torch.Tensor | None, document_ids: torch.Tensor | None, weights_wanted: bool
    ) -> Packing | None:
        """The packing to run on, or None for the padded path (unpadding off or unsupported, or see should_pack)."""
        if not self.supports_unpad or not should_pack(self.unpad, attention_mask, document_ids, weights_wanted):
            return None
        assert attention_mask is not None
        return pack(attention_mask, document_ids)

    def _embed_packed(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        packing: Packing,
    ) -> torch.Tensor:
        """Embeddings of the real tokens only, as a (1, N) batch; positions restart at every segment."""
        assert self.embeddings is not None
        if position_ids is None:
            positions = packing.positions + self.embeddings.position_offset
        else:
            positions = unpad(position_ids.expand(packing.batch, packing.length), packing)
        types = unpad(token_type_ids, packing)[None] if token_type_ids is not None else None
        return self.embeddings(unpad(input_ids, packing)[None], types, positions[None])[0]

    @property
    def word_embeddings(self) -> torch.Tensor:
        assert self.embeddings is not None
        return self.embeddings.word_embeddings.weight

"""The encoder every family shares, in the order data flows through it.

BERT, RoBERTa, SpanBERT and the DistilBERT/TinyBERT shapes use it as is; ALBERT adds factorized embeddings
(E -> H projection) and cross-layer sharing; ELECTRA's discriminator and generator add the projection;
BigBird is RoBERTa-shaped with block-sparse attention (model.attention, bertkit/models/block_sparse.py).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal, NamedTuple

import torch
from torch import nn

from bertkit.config.schema import ModelConfig
from bertkit.models.layers import Embeddings, EncoderLayer, init_weights
from bertkit.models.unpad import Packing, document_mask, document_positions, pack, repad, should_pack, unpad


class EncoderOutput(NamedTuple):
    # A NamedTuple, not a dataclass: engines that hook module outputs (DeepSpeed ZeRO-3) can see its tensors.
    last_hidden_state: torch.Tensor
    pooled: torch.Tensor | None
    hidden_states: list[torch.Tensor]  # embeddings output + every layer (empty unless asked for)
    # Per layer, empty unless asked for; None for a layer left out of a selection (see forward).
    attentions: list[torch.Tensor]  # softmax probabilities
    attention_scores: list[torch.Tensor]  # pre-softmax QK^T/sqrt(d)
    # (B, heads, T, head_dim) value vectors per layer, for MiniLM's value relation; they come with the
    # attentions (output_attentions), at no cost: autograd keeps them alive anyway.
    values: list[torch.Tensor]


def attention_layers(
    output_attentions: bool | Collection[int], layers: int, stop_at_last_attention: bool, output_hidden_states: bool
) -> set[int]:
    """The 0-based layers whose attention probabilities, scores and values an encoder's forward returns (see
    BertEncoder.forward): every layer, none, or the given indices (negative from the end), plus the last layer
    when it stops at its attention."""
    if stop_at_last_attention and output_hidden_states:
        raise ValueError("stop_at_last_attention leaves the last layer's output uncomputed; no hidden states")
    if isinstance(output_attentions, bool):
        wanted = set(range(layers)) if output_attentions else set()
    else:
        wanted = {i % layers for i in output_attentions}
    if stop_at_last_attention:
        wanted.add(layers - 1)
    return wanted


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
    if cfg.sharing == "all-shared":
        return nn.ModuleList([EncoderLayer(cfg)])
    own_attention = cfg.sharing != "shared-attention"
    own_ffn = cfg.sharing != "shared-ffn"
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
        self.apply(init_weights)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool | Collection[int] = False,
        embedded: torch.Tensor | None = None,
        stop_at_last_attention: bool = False,
        document_ids: torch.Tensor | None = None,
    ) -> EncoderOutput:
        """`embedded` replaces the embedding lookup (width E) for an encoder built without embeddings.

        `output_attentions`: True for every layer's attention probabilities, scores and values, or the 0-based
        indices of the layers to return them for (negative from the end; distillation reads only the layers its
        losses compare). The explicit path they need is much slower than SDPA, so the other layers keep SDPA
        and their entries in the three lists are None (the lists always have one entry per layer).

        `stop_at_last_attention`: the last layer computes its attention scores and values and nothing after
        them (no softmax, attention output, feed-forward, final norm or pooler): MiniLM's losses read those
        alone, and a quarter of the layer's matmuls (the QKV projection) is all they cost. `attentions` then
        has None for the last layer, and `last_hidden_state` is the last layer's *input*; `pooled` is None.

        `document_ids` (B, T): several documents packed into one row (corpus packing); each run of equal ids is
        a document that attention stays within, and positions restart at every document.

        Unpadding (`self.unpad`, set by bertkit/engine/unpad.py from engine.unpad): the real tokens run as one
        packed sequence (bertkit/models/unpad.py); the outputs are the padded path's, re-padded.
        """
        layers = self.config.num_layers
        wanted = attention_layers(output_attentions, layers, stop_at_last_attention, output_hidden_states)
        if document_ids is not None and attention_mask is None:
            attention_mask = torch.ones_like(document_ids)
        packing = self._packing(attention_mask, document_ids, bool(wanted))
        if embedded is None:
            if self.embeddings is None or input_ids is None:
                raise ValueError("this encoder has no embeddings of its own; pass `embedded`")
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
        hidden_states: list[torch.Tensor] = [padded(x)] if output_hidden_states else []
        attentions: list[torch.Tensor] = []
        attention_scores: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        first = self.layers[0]
        for i in range(layers):
            layer = first if len(self.layers) == 1 else self.layers[i]
            stop = stop_at_last_attention and i == layers - 1
            x, attn = layer(x, mask, need_weights=i in wanted, shared=first, attention_only=stop)
            if output_hidden_states:
                hidden_states.append(padded(x))
            if wanted:
                attentions.append(attn.probs)
                attention_scores.append(attn.scores)
                values.append(attn.values)
        if stop_at_last_attention:
            return EncoderOutput(x, None, hidden_states, attentions, attention_scores, values)
        if self.final_norm is not None:
            x = self.final_norm(x)
        x = padded(x)
        pooled = self.pooler(x) if self.pooler is not None else None
        return EncoderOutput(x, pooled, hidden_states, attentions, attention_scores, values)

    @property
    def supports_unpad(self) -> bool:
        """Every layer is per-token apart from full attention; BigBird's block-sparse attention needs its blocks."""
        return self.config.attention == "full"

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

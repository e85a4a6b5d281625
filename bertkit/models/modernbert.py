"""ModernBERT (Warner et al. 2024), in the order data flows through it. Forward pass only.

Token embeddings (no position or segment tables) -> LayerNorm -> dropout; then pre-norm layers whose attention
rotates queries and keys (RoPE, one base for global layers and another for local ones), every n-th layer global
and the others limited to a sliding window of `local_attention` tokens (|i - j| <= local_attention / 2, as
transformers' mask); GeGLU feed-forward; a final norm. No linear layer and no norm has a bias (the paper's
layout; `model.bias` puts them back, as transformers' attention_bias, mlp_bias, norm_bias and classifier_bias).

Unpadding (engine.unpad, as the paper trains): everything but attention runs on the batch's packed real tokens,
rotations by each token's position within its sequence or document, attention through varlen_attention with each
layer's window (bertkit/models/unpad.py).

Submodules carry the names of bertkit's BERT encoder (`embeddings.word_embeddings`, `layers.{i}.attention.qkv`,
`attn_norm`, `ffn.up`, `ffn_norm`, `final_norm`), so distillation's layer copying and freezing, which read those
names, work unchanged; hf_modernbert.py maps them onto transformers' `tok_embeddings`, `attn.Wqkv`, `mlp.Wi`...
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config.schema import ModelConfig
from bertkit.models.attention import AttentionOutput, attend
from bertkit.models.bert import EncoderOutput
from bertkit.models.capture import LayerCapture, run_layers
from bertkit.models.layers import ACTIVATIONS
from bertkit.models.unpad import (
    Packing,
    document_mask,
    document_positions,
    pack,
    repad,
    should_pack,
    unpad,
    varlen_attention,
)

# (cos, sin), float32: each (B or 1, T, head_dim) on the padded path, (N, head_dim) on the packed one.
Rope = tuple[torch.Tensor, torch.Tensor]


def _norm(cfg: ModelConfig) -> nn.LayerNorm:
    return nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, bias=bool(cfg.bias))


def _linear(cfg: ModelConfig, inputs: int, outputs: int) -> nn.Linear:
    return nn.Linear(inputs, outputs, bias=bool(cfg.bias))


class ModernBertEmbeddings(nn.Module):
    """Token embeddings, LayerNorm, dropout: positions enter later, as rotations inside the attention."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.norm = _norm(cfg)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(self, input_ids: torch.Tensor, *_: torch.Tensor | None) -> torch.Tensor:
        # Extra arguments (token types, positions) are what BertEncoder's embeddings take; ModernBERT has neither.
        return self.dropout(self.norm(self.word_embeddings(input_ids)))


def rotary_tables(position_ids: torch.Tensor, head_dim: int, theta: float) -> Rope:
    """cos and sin of RoPE for `position_ids` (B or 1, T), or (N,) packed, in float32 whatever the model's dtype:
    the angles of positions in the thousands lose their low bits in half precision. Computed per forward (a few
    thousand numbers), not kept in a buffer, so that a model built on the meta device or cast to bf16 stays exact."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=position_ids.device, dtype=torch.float32) / head_dim)
    angles = position_ids[..., None].float() * inv_freq
    angles = torch.cat((angles, angles), dim=-1)  # the two halves rotate together (rotate_half's layout)
    return angles.cos(), angles.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rotary(x: torch.Tensor, rope: Rope) -> torch.Tensor:
    """Rotate (B, heads, T, head_dim) queries or keys, or packed (N, heads, head_dim) ones, by their positions,
    in float32, back to x's dtype. The heads axis is 1 in both layouts, where the tables get a broadcast axis."""
    cos, sin = (table.unsqueeze(1) for table in rope)
    rotated = x.float() * cos + _rotate_half(x.float()) * sin
    return rotated.to(x.dtype)


class ModernBertAttention(nn.Module):
    """Fused QKV (no bias unless model.bias), RoPE on queries and keys, SDPA (or the explicit path when the
    scores are asked for), output projection and its dropout."""

    def __init__(self, cfg: ModelConfig, window: tuple[int, int] = (-1, -1)) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.hidden_size // cfg.num_heads
        # (left, right) for varlen_attention on the packed path: (-1, -1) for a global layer. The padded path
        # gets the same band from the encoder's mask instead.
        self.window = window
        self.qkv = _linear(cfg, cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = _linear(cfg, cfg.hidden_size, cfg.hidden_size)
        self.dropout_p = cfg.attention_dropout
        # transformers applies attention_dropout to the probabilities and again after the output projection.
        self.out_dropout = nn.Dropout(cfg.attention_dropout)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | Packing | None,
        rope: Rope,
        need_weights: bool = False,
        scores_only: bool = False,
    ) -> AttentionOutput:
        """`mask`: boolean, True where a query may attend to a key, broadcastable to (B, heads, T, T). The
        scores returned are QK^T/sqrt(d) of the rotated queries and keys, before masking (as BERT's).

        With a `Packing` for a mask, `x` is the batch's packed (N, hidden) real tokens and `rope` their tables
        (N, head_dim); attention stays within each segment and this layer's window. The encoder never asks that
        path for weights or scores."""
        if isinstance(mask, Packing):
            return AttentionOutput(self._packed(x, mask, rope))
        batch, length, _ = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = apply_rotary(q, rope), apply_rotary(k, rope)
        if scores_only:
            return AttentionOutput(None, None, (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim), v)
        dropout_p = self.dropout_p if self.training else 0.0
        context, probs, scores, values = attend(q, k, v, mask, dropout_p, need_weights)
        return AttentionOutput(self.out_dropout(self.out(context)), probs, scores, values)

    def _packed(self, x: torch.Tensor, packing: Packing, rope: Rope) -> torch.Tensor:
        tokens = x.shape[0]
        q, k, v = self.qkv(x).view(tokens, 3, self.num_heads, self.head_dim).unbind(1)
        q, k = apply_rotary(q, rope), apply_rotary(k, rope)
        dropout_p = self.dropout_p if self.training else 0.0
        context = varlen_attention(q, k, v, packing, dropout_p, window=self.window)
        return self.out_dropout(self.out(context.reshape(tokens, -1)))


class GeGLU(nn.Module):
    """up: H -> 2I, split into (input, gate) in that order; act(input) * gate; dropout; down: I -> H."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.up = _linear(cfg, cfg.hidden_size, 2 * cfg.intermediate_size)
        self.down = _linear(cfg, cfg.intermediate_size, cfg.hidden_size)
        self.act = ACTIVATIONS[cfg.hidden_act]
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value, gate = self.up(x).chunk(2, dim=-1)
        return self.down(self.dropout(self.act(value) * gate))


class ModernBertLayer(nn.Module):
    """Pre-norm layer: x + attn(norm(x)), then x + ffn(norm(x)). Layer 0 has no attention norm: the
    embeddings were just normalised (transformers' nn.Identity, so its checkpoints have no such tensor)."""

    pre_norm = True  # read by distillation's freezing of what MiniLM's losses never reach

    def __init__(self, cfg: ModelConfig, index: int) -> None:
        super().__init__()
        self.is_global = cfg.is_global_layer(index)
        self.attn_norm: nn.Module = nn.Identity() if index == 0 else _norm(cfg)
        half = cfg.local_attention // 2
        self.attention = ModernBertAttention(cfg, (-1, -1) if self.is_global else (half, half))
        self.ffn_norm = _norm(cfg)
        self.ffn = GeGLU(cfg)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | Packing | None,
        rope: Rope,
        need_weights: bool = False,
        attention_only: bool = False,
    ) -> tuple[torch.Tensor, AttentionOutput]:
        """`attention_only`: the scores and values alone, with the input returned unchanged (MiniLM)."""
        if attention_only:
            return x, self.attention(self.attn_norm(x), mask, rope, True, scores_only=True)
        attn = self.attention(self.attn_norm(x), mask, rope, need_weights)
        x = x + attn.hidden
        return x + self.ffn(self.ffn_norm(x)), attn


def sliding_window_mask(
    length: int, half_window: int, key_mask: torch.Tensor | None, device: torch.device
) -> torch.Tensor:
    """(B or 1, 1, T, T) boolean: |i - j| <= half_window, and the key is not padding. The diagonal is always
    allowed, so that a padding query far from every real token still has a key to attend to: a row with no key
    at all would make a NaN that the next layer's attention would spread to every token (0 * NaN). Only
    padding rows change, whose outputs nothing reads."""
    positions = torch.arange(length, device=device)
    window = (positions[:, None] - positions[None, :]).abs() <= half_window
    if key_mask is None:
        return window[None, None]
    eye = torch.eye(length, dtype=torch.bool, device=device)
    return (window & key_mask[:, None, None, :]) | eye


class ModernBertEncoder(nn.Module):
    """The encoder with BertEncoder's interface and output (EncoderOutput), so every pipeline that builds an
    encoder by family (pretraining, fine-tuning, embedding, prediction, distillation) takes it as it is."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embeddings = ModernBertEmbeddings(cfg)
        self.layers = nn.ModuleList(ModernBertLayer(cfg, i) for i in range(cfg.num_layers))
        self.final_norm = _norm(cfg)
        self.pooler = None  # ModernBERT has none; classifiers put their own head on [CLS] or the mean
        # engine.unpad: "auto", True or False (bertkit/engine/unpad.py sets it), as BertEncoder's.
        self.unpad: bool | Literal["auto"] = "auto"
        # train.activation_checkpointing: recompute every k-th layer in the backward pass (0: none).
        self.checkpoint_every = 0
        init_modernbert(self, cfg)

    # Every layer is per-token apart from attention, and varlen attention takes the sliding window.
    supports_unpad = True

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
        """As BertEncoder.forward (see there for `document_ids`, `capture` and unpadding). `token_type_ids` is
        accepted and ignored: ModernBERT has no segments. `position_ids` default to 0..T-1 for every row, as
        transformers numbers them, or restart at every document.

        Unpadded, embeddings, norms, projections and GeGLU run on the (N, hidden) real tokens; each token's
        rotation uses its position within its sequence or document, and attention goes through varlen_attention
        with the layer's window (none for global layers)."""
        cfg = self.config
        if capture is not None:
            capture.begin(cfg.num_layers)
        if document_ids is not None and attention_mask is None:
            attention_mask = torch.ones_like(document_ids)
        weights = capture is not None and capture.wants_weights
        packing = (
            pack(attention_mask, document_ids)
            if attention_mask is not None and should_pack(self.unpad, attention_mask, document_ids, weights)
            else None
        )
        x = inputs_embeds
        if x is None:
            if input_ids is None:
                raise ValueError("pass input_ids or inputs_embeds")
            # Packed: the (N,) real token ids, so the lookup and norm never touch padding.
            x = self.embeddings(unpad(input_ids, packing) if packing is not None else input_ids)
        elif packing is not None:
            x = unpad(x, packing)
        head_dim = cfg.hidden_size // cfg.num_heads
        has_local = not all(layer.is_global for layer in self.layers)
        masks: dict[bool, torch.Tensor | Packing | None]
        if packing is not None:
            if position_ids is None:
                positions = packing.positions  # restart at every sequence and document
            else:
                positions = unpad(position_ids.expand(packing.batch, packing.length), packing)
            masks = {True: packing, False: packing}  # each layer's attention holds its own window
        else:
            length = x.shape[1]
            if position_ids is None:
                if document_ids is not None and attention_mask is not None:
                    position_ids = document_positions(attention_mask, document_ids)
                else:
                    position_ids = torch.arange(length, device=x.device)[None]
            positions = position_ids
            masks = self._padded_masks(attention_mask, document_ids, length, has_local, x.device)
        ropes = {True: rotary_tables(positions, head_dim, cfg.global_rope_theta)}
        if has_local:
            ropes[False] = rotary_tables(positions, head_dim, cfg.local_rope_theta)
        padded = (lambda h: repad(h, packing)) if packing is not None else (lambda h: h)

        def call(i: int, h: torch.Tensor, weights: bool, stop: bool) -> tuple[torch.Tensor, AttentionOutput]:
            layer = self.layers[i]
            kind = layer.is_global
            return layer(h, masks[kind], ropes[kind], need_weights=weights, attention_only=stop)

        x, stopped = run_layers(x, cfg.num_layers, call, capture, padded, self.checkpoint_every)
        if stopped:  # only on the padded path (it asks for scores)
            return EncoderOutput(x, None)
        return EncoderOutput(padded(self.final_norm(x)), None)

    def _padded_masks(
        self,
        attention_mask: torch.Tensor | None,
        document_ids: torch.Tensor | None,
        length: int,
        has_local: bool,
        device: torch.device,
    ) -> dict[bool, torch.Tensor | Packing | None]:
        """The padded path's boolean masks, for global (True) and sliding-window (False) layers: the keys that are
        real tokens, or with documents each query's own document's; local layers add the band |i - j| <= w/2."""
        half = self.config.local_attention // 2
        if document_ids is not None and attention_mask is not None:
            within = document_mask(attention_mask, document_ids)  # (B, 1, T, T), the diagonal always allowed
            masks: dict[bool, torch.Tensor | Packing | None] = {True: within}
            if has_local:
                masks[False] = within & sliding_window_mask(length, half, None, device)
            return masks
        key_mask = attention_mask.bool() if attention_mask is not None else None
        masks = {True: key_mask[:, None, None, :] if key_mask is not None else None}
        if has_local:
            masks[False] = sliding_window_mask(length, half, key_mask, device)
        return masks

    @property
    def word_embeddings(self) -> torch.Tensor:
        return self.embeddings.word_embeddings.weight


class ModernBertPredictionHead(nn.Module):
    """dense -> activation -> LayerNorm (no biases unless model.bias): what transformers' ModernBERT puts before its MLM
    decoder and before every task classifier (`head`)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.dense = _linear(cfg, cfg.hidden_size, cfg.hidden_size)
        self.act = ACTIVATIONS[cfg.hidden_act]
        self.norm = _norm(cfg)
        init_modernbert(self, cfg)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act(self.dense(hidden)))


class ModernBertMLMHead(ModernBertPredictionHead):
    """The prediction head, then a decoder whose weight *is* the word-embedding matrix (passed in at call time,
    as MLMHead's) plus its own bias."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, hidden: torch.Tensor, decoder_weight: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return F.linear(super().forward(hidden), decoder_weight, self.bias)


def _trunc_normal(weight: torch.Tensor, std: float) -> None:
    # ModernBERT's initialisation: a normal truncated at 2 standard deviations (initializer_cutoff_factor).
    nn.init.trunc_normal_(weight, std=std, a=-2 * std, b=2 * std)


def init_modernbert(module: nn.Module, cfg: ModelConfig, std: float = 0.02) -> None:
    """transformers' ModernBERT initialisation: embeddings and input projections (QKV, GeGLU's up) at `std`,
    the projections that write into the residual stream (attention out, GeGLU's down, the heads' dense) at
    std / sqrt(2 * layers), so the residual's variance does not grow with depth; norms at identity; biases (with
    model.bias) at zero."""
    out_std = std / math.sqrt(2.0 * cfg.num_layers)
    for name, sub in module.named_modules():
        if isinstance(sub, nn.Embedding):
            _trunc_normal(sub.weight, std)
        elif isinstance(sub, nn.Linear):
            _trunc_normal(sub.weight, std if name.endswith(("qkv", "up")) else out_std)
        elif isinstance(sub, nn.LayerNorm):
            nn.init.ones_(sub.weight)
        if isinstance(sub, nn.Linear | nn.LayerNorm) and sub.bias is not None:
            nn.init.zeros_(sub.bias)

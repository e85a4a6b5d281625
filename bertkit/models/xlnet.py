"""XLNet (Yang et al. 2019): a Transformer-XL encoder with two-stream self-attention, for permutation LM.

In the order data flows through it:

- Word embeddings only: XLNet has no absolute position table and no token-type table. Position enters
  every layer as a *relative* sinusoidal encoding of the distance i - j between query i and key j
  (Transformer-XL, `attn_type="bi"`: distances from +T down to -T + 1), and segments as a *relative*
  segment encoding: whether i and j are in the same segment (`seg_embed`, two learned vectors per head).
- Each attention score is (content + position + segment) / sqrt(d):
      (q_i + r_w_bias) . k_j  +  (q_i + r_r_bias) . R_{i-j}  +  (q_i + r_s_bias) . s_{same(i, j)}
- Two streams share every weight. The content stream h (initialised with the word embeddings) is an
  ordinary encoder: position i sees itself and what the factorization order lets it see. The query stream
  g (initialised with one learned vector, `mask_emb`) runs only for the targets and never sees the token it
  predicts: it knows the target's position, not its content. `perm_mask[b, i, j] = 1` says i may not see
  j; the content stream may always see itself, the query stream never sees a blocked j, itself included.
- `target_mapping` (B, M, T), one-hot rows, says which position each of the M query rows predicts. The
  LM head (tied to the word embeddings, plus a bias) reads the query stream.

What is left out: segment recurrence (`mem_len` is 0; bertkit's loader serves independent sequences, so
there is no previous segment to cache), `bi_data`, `clamp_len`, `same_length` and the unidirectional
`attn_type="uni"` (Transformer-XL's causal LM), none of which XLNet's pretraining recipe or fine-tuning use.

The weights are laid out as Hugging Face's XLNet lays them out ((d_model, heads, head_dim) projection
tensors, named q, k, v, o, r), so bertkit/interop/hf_xlnet.py maps them one to one. Forward pass only.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config.schema import ModelConfig
from bertkit.models.attention import AttentionOutput
from bertkit.models.bert import EncoderOutput, Pooler
from bertkit.models.capture import LayerCapture, run_layers
from bertkit.models.layers import ACTIVATIONS, init_weights


def relative_positions(length: int, dim: int, device: torch.device) -> torch.Tensor:
    """Sinusoidal encodings of the distances +T, T-1, ..., -T+1 (2T rows, `dim` columns: sines then cosines)."""
    inv_freq = 1.0 / torch.pow(10000.0, torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim)
    distances = torch.arange(length, -length, -1, device=device, dtype=torch.float32)
    angles = distances[:, None] * inv_freq[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def shift_relative(scores: torch.Tensor) -> torch.Tensor:
    """(B, n, T, 2T) scores against the distances +T..-T+1 -> (B, n, T, T) with [i, j] read at distance
    i - j, i.e. at column T - (i - j) = T - i + j."""
    length = scores.shape[-2]
    rows = torch.arange(length, device=scores.device)
    index = (length - rows[:, None] + rows[None, :]).expand(*scores.shape[:2], length, length)
    return scores.gather(-1, index)


class RelativeAttention(nn.Module):
    """Relative multi-head attention of one layer, applied to the content and (if any) query stream."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d, n = cfg.hidden_size, cfg.num_heads
        self.num_heads, self.head_dim = n, d // n
        self.scale = 1.0 / math.sqrt(self.head_dim)
        # (d_model, heads, head_dim), as the reference stores them: x @ q.view(d, n * dh) projects.
        self.q = nn.Parameter(torch.empty(d, n, self.head_dim))
        self.k = nn.Parameter(torch.empty(d, n, self.head_dim))
        self.v = nn.Parameter(torch.empty(d, n, self.head_dim))
        self.o = nn.Parameter(torch.empty(d, n, self.head_dim))
        self.r = nn.Parameter(torch.empty(d, n, self.head_dim))
        self.r_w_bias = nn.Parameter(torch.empty(n, self.head_dim))  # content bias (u in Transformer-XL)
        self.r_r_bias = nn.Parameter(torch.empty(n, self.head_dim))  # position bias (v)
        self.r_s_bias = nn.Parameter(torch.empty(n, self.head_dim))  # segment bias
        self.seg_embed = nn.Parameter(torch.empty(2, n, self.head_dim))  # [same segment, different segment]
        self.norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.attention_dropout = nn.Dropout(cfg.attention_dropout)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def project(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """(..., d) -> (..., heads, head_dim)."""
        return (x @ weight.reshape(weight.shape[0], -1)).unflatten(-1, (self.num_heads, self.head_dim))

    def core(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_r: torch.Tensor,
        different_segment: torch.Tensor | None,
        blocked: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q, k, v (B, T, n, dh); k_r (2T, n, dh); different_segment / blocked (B, T, T) bool.
        Returns the attention vectors (B, T, n, dh) and the probabilities (B, n, T, T)."""
        content = torch.einsum("bind,bjnd->bnij", q + self.r_w_bias, k)
        position = shift_relative(torch.einsum("bind,jnd->bnij", q + self.r_r_bias, k_r))
        scores = content + position
        if different_segment is not None:
            # Two candidate scores per query (same / different segment), picked per key.
            segment = torch.einsum("bind,snd->bnis", q + self.r_s_bias, self.seg_embed)
            scores = scores + torch.where(different_segment[:, None], segment[..., 1:], segment[..., :1])
        scores = scores * self.scale
        if blocked is not None:
            # A finite minimum, not -inf: a query that may see nothing (a padding row) gets a uniform
            # distribution instead of NaN, as in the reference.
            scores = scores.masked_fill(blocked[:, None], torch.finfo(scores.dtype).min)
        probs = scores.softmax(dim=-1)
        return torch.einsum("bnij,bjnd->bind", self.attention_dropout(probs), v), probs

    def post(self, residual: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
        out = vectors.flatten(-2) @ self.o.reshape(self.o.shape[0], -1).t()
        return self.norm(residual + self.dropout(out))

    def forward(
        self,
        h: torch.Tensor,
        g: torch.Tensor | None,
        positions: torch.Tensor,
        different_segment: torch.Tensor | None,
        blocked_h: torch.Tensor | None,
        blocked_g: torch.Tensor | None,
        target_mapping: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, tuple[torch.Tensor, ...]]:
        k, v = self.project(h, self.k), self.project(h, self.v)
        k_r = self.project(positions.to(h.dtype), self.r)
        vectors, probs_h = self.core(self.project(h, self.q), k, v, k_r, different_segment, blocked_h)
        out_h = self.post(h, vectors)
        if g is None:
            return out_h, None, (probs_h,)
        q_g = self.project(g, self.q)
        if target_mapping is not None:
            # Place each of the M query rows at the position it predicts, attend there (the relative
            # distances and the mask row are that position's), and gather the results back.
            q_g = torch.einsum("bmnd,bml->blnd", q_g, target_mapping)
        vectors_g, probs_g = self.core(q_g, k, v, k_r, different_segment, blocked_g)
        if target_mapping is not None:
            vectors_g = torch.einsum("blnd,bml->bmnd", vectors_g, target_mapping)
        return out_h, self.post(g, vectors_g), (probs_h, probs_g)


class FeedForward(nn.Module):
    """Position-wise feed-forward with its own residual and post-LayerNorm (XLNet's layout)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.act = ACTIVATIONS[cfg.hidden_act]
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.dropout(self.down(self.dropout(self.act(self.up(x))))))


class XLNetLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attention = RelativeAttention(cfg)
        self.ffn = FeedForward(cfg)

    def forward(self, h, g, positions, different_segment, blocked_h, blocked_g, target_mapping):
        h, g, probs = self.attention(h, g, positions, different_segment, blocked_h, blocked_g, target_mapping)
        return self.ffn(h), (self.ffn(g) if g is not None else None), probs


class LastTokenPooler(Pooler):
    """tanh(W h_last + b) on the last non-padding token, `<cls>` in XLNet's layout (A <sep> B <sep> <cls>):
    the `sequence_summary` of XLNetForSequenceClassification (summary_type "last", projection, tanh)."""

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return torch.tanh(self.dense(last_token(hidden, attention_mask)))


def last_token(hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """(B, H) states of each row's last non-padding token: the last column under left padding (XLNet's),
    and still the `<cls>` under right padding."""
    if attention_mask is None:
        return hidden[:, -1]
    columns = torch.arange(hidden.shape[1], device=hidden.device)
    last = torch.where(attention_mask.bool(), columns, -1).amax(dim=1).clamp(min=0)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


class XLNetEncoder(nn.Module):
    """XLNet's transformer. `forward` returns the content stream's last states, or the query stream's (one
    row per target_mapping row) when `target_mapping` is given, as XLNetModel does; `pooled` is the
    last-token summary when the model has one (model.pooler), else the raw `<cls>` state."""

    # Relative positions and two-stream attention over the padded layout: engine.unpad=true is refused.
    supports_unpad = False

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.word_embedding = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.mask_emb = nn.Parameter(torch.empty(1, 1, cfg.hidden_size))  # the query stream's first input
        self.layers = nn.ModuleList(XLNetLayer(cfg) for _ in range(cfg.num_layers))
        self.dropout = nn.Dropout(cfg.hidden_dropout)
        self.pooler = LastTokenPooler(cfg.hidden_size) if cfg.pooler else None
        self.apply(init_weights)
        for module in self.modules():
            if isinstance(module, RelativeAttention):
                for param in (module.q, module.k, module.v, module.o, module.r, module.r_w_bias, module.r_r_bias,
                              module.r_s_bias, module.seg_embed):  # fmt: skip
                    nn.init.normal_(param, std=0.02)
        nn.init.normal_(self.mask_emb, std=0.02)

    @property
    def word_embeddings(self) -> torch.Tensor:
        return self.word_embedding.weight

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        perm_mask: torch.Tensor | None = None,
        target_mapping: torch.Tensor | None = None,
        capture: LayerCapture | None = None,
    ) -> EncoderOutput:
        """`capture` (bertkit/models/capture.py): hidden states of the content stream and, for the layers asked,
        its attention probabilities (XLNet's relative attention has no separate scores or values to give)."""
        batch, length = input_ids.shape
        # blocked[b, i, j]: query i may not see key j (padding keys, and what the factorization order hides).
        blocked = None
        if attention_mask is not None:
            blocked = (~attention_mask.bool())[:, None, :].expand(batch, length, length)
        if perm_mask is not None:
            blocked = perm_mask.bool() if blocked is None else blocked | perm_mask.bool()
        # The content stream may always see its own position; the query stream sees `blocked` as is.
        eye = torch.eye(length, dtype=torch.bool, device=input_ids.device)
        blocked_h = blocked & ~eye if blocked is not None else None
        # Segments enter as "same segment or not"; without token types there is no segment term at all.
        different = None
        if token_type_ids is not None:
            different = token_type_ids[:, :, None] != token_type_ids[:, None, :]

        h = self.dropout(self.word_embedding(input_ids))
        g = None
        if target_mapping is not None:
            g = self.dropout(self.mask_emb.expand(batch, target_mapping.shape[1], -1))
        positions = self.dropout(relative_positions(length, self.config.hidden_size, input_ids.device))
        if capture is not None:
            capture.begin(len(self.layers))

        def call(i: int, h: torch.Tensor, weights: bool, stop: bool) -> tuple[torch.Tensor, AttentionOutput]:
            if stop:
                raise ValueError("XLNet's two-stream layers cannot stop at the last layer's attention")
            nonlocal g
            h, g, probs = self.layers[i](h, g, positions, different, blocked_h, blocked, target_mapping)
            return h, AttentionOutput(None, probs[0] if weights else None)

        h, _ = run_layers(h, len(self.layers), call, capture, lambda state: state)
        h = self.dropout(h)
        out = self.dropout(g) if g is not None else h
        # The summary on <cls> when the model has one (fine-tuning), else the raw <cls> state.
        pooled = self.pooler(h, attention_mask) if self.pooler is not None else last_token(h, attention_mask)
        return EncoderOutput(out, pooled)


class PLMHead(nn.Module):
    """XLNet's LM head (`lm_loss`): the word-embedding matrix (passed in, so it is stored once) plus a bias."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, hidden: torch.Tensor, decoder_weight: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden, decoder_weight, self.bias)


class XLNetPretraining(nn.Module):
    """Encoder + LM head on the query stream: logits (B, M, V) for the M rows of `target_mapping`."""

    def __init__(self, cfg: ModelConfig, objective=None) -> None:
        super().__init__()
        self.config, self.objective_config = cfg, objective
        self.encoder = XLNetEncoder(cfg)
        self.plm_head = PLMHead(cfg)
        if self.encoder.pooler is not None:
            self.encoder.pooler.requires_grad_(False)  # no pretraining loss reads it (as BERT's without NSP)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        perm_mask: torch.Tensor | None = None,
        target_mapping: torch.Tensor | None = None,
        **_: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        encoded = self.encoder(input_ids, attention_mask, token_type_ids, perm_mask, target_mapping)
        return {
            "plm_logits": self.plm_head(encoded.last_hidden_state, self.encoder.word_embeddings),
            "last_hidden_state": encoded.last_hidden_state,
        }

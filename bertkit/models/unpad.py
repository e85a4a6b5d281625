"""Unpadding: a batch's real tokens as one packed (tokens, hidden) sequence, attention by sequence boundaries.

MosaicBERT and ModernBERT run embeddings, projections and feed-forward layers on the non-padding tokens only:
on review-length text half of a padded batch is padding, and every per-token matmul spends that half on
nothing. Attention is the one step that needs the sequence boundaries; it reads them from `cu_seqlens`
(cumulative lengths, flash-attention's convention). A *segment* is what attention stays within: a row of the
batch, or one document of a row when `document_ids` says several documents were packed into it (corpus packing).

Any family whose layers are per-token apart from attention can reuse this module (forward code only):
`pack` once per batch, `unpad` the inputs, `varlen_attention` in each layer, `repad` what a head needs padded.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import torch
import torch.nn.functional as F


class Packing(NamedTuple):
    """Where the real tokens of a (batch, length) batch are, and the segments attention stays within.
    A NamedTuple so DeepSpeed/FSDP hooks see plain tensors (they are never parameters)."""

    indices: torch.Tensor  # (N,) positions of the real tokens in the flattened (batch * length) batch, in order
    cu_seqlens: torch.Tensor  # (S + 1,) int32 start of each segment in the packed order, then N
    max_seqlen: int  # the longest segment
    positions: torch.Tensor  # (N,) 0-based position of each token within its segment (restarts per segment)
    batch: int
    length: int
    # CPU attention (see varlen_attention): each segment padded to max_seqlen; a token's slot in (S * max_seqlen),
    # and (S, 1, 1, max_seqlen) True where a key is a real token.
    slots: torch.Tensor
    key_mask: torch.Tensor


def segment_starts(attention_mask: torch.Tensor, document_ids: torch.Tensor | None = None) -> torch.Tensor:
    """(B, T) bool: True where a token starts a segment (a row's first real token, or a change of document)."""
    mask = attention_mask.bool()
    previous = F.pad(mask[:, :-1], (1, 0), value=False)
    starts = mask & ~previous
    if document_ids is not None:
        changed = F.pad(document_ids[:, 1:] != document_ids[:, :-1], (1, 0), value=True)
        starts = starts | (mask & changed)
    return starts


def pack(attention_mask: torch.Tensor, document_ids: torch.Tensor | None = None) -> Packing:
    """The packing of a batch: its real tokens (attention_mask != 0) and their segments. Rows are segments;
    with `document_ids` (B, T), every run of equal ids inside a row is a segment of its own (documents must be
    contiguous, as corpus packing writes them)."""
    batch, length = attention_mask.shape
    flat_mask = attention_mask.reshape(-1).bool()
    # One host sync for the token count (nonzero), one for the segment shape: flash-attn's unpad_input does the same.
    indices = flat_mask.nonzero().squeeze(1)
    starts = segment_starts(attention_mask, document_ids).reshape(-1)[indices]
    segment = starts.long().cumsum(0) - 1
    seqlens = torch.bincount(segment)
    segments, max_seqlen = (int(v) for v in torch.stack([seqlens.new_tensor(len(seqlens)), seqlens.max()]).tolist())
    cu_seqlens = F.pad(seqlens.cumsum(0), (1, 0)).to(torch.int32)
    positions = torch.arange(len(indices), device=indices.device) - cu_seqlens.long()[segment]
    slots = segment * max_seqlen + positions
    key_mask = (torch.arange(max_seqlen, device=indices.device) < seqlens[:, None])[:, None, None, :]
    assert segments == len(cu_seqlens) - 1
    return Packing(indices, cu_seqlens, max_seqlen, positions, batch, length, slots, key_mask)


def should_pack(
    mode: bool | Literal["auto"],
    attention_mask: torch.Tensor | None,
    document_ids: torch.Tensor | None,
    weights_wanted: bool,
) -> bool:
    """Whether an encoder set to `mode` (engine.unpad) runs this batch packed. Never without a mask or when
    attention weights are asked for (distillation reads (B, heads, T, T) probabilities and scores, which only
    the padded path computes); `auto` packs only a batch with padding, or with documents (varlen attention is
    what keeps them apart cheaply). Shared by every family with a packed path, so they decide alike."""
    if mode is False or attention_mask is None or weights_wanted:
        return False
    return not (mode == "auto" and document_ids is None and bool(attention_mask.bool().all()))


def unpad(x: torch.Tensor, packing: Packing) -> torch.Tensor:
    """(B, T, ...) -> (N, ...): the rows of the real tokens."""
    return x.reshape(packing.batch * packing.length, *x.shape[2:]).index_select(0, packing.indices)


def repad(x: torch.Tensor, packing: Packing) -> torch.Tensor:
    """(N, ...) -> (B, T, ...), zeros at the padding (the padded path's values there are never read)."""
    out = x.new_zeros(packing.batch * packing.length, *x.shape[1:]).index_copy(0, packing.indices, x)
    return out.view(packing.batch, packing.length, *x.shape[1:])


def _flash_varlen_usable(q: torch.Tensor, dropout_p: float) -> bool:
    """torch's varlen flash kernel (torch.nn.attention.varlen, CUDA, half precision) has no dropout argument,
    so training with attention dropout takes the bucketed SDPA path instead."""
    return q.device.type == "cuda" and q.dtype in (torch.float16, torch.bfloat16) and dropout_p == 0


def _flash_varlen_kernel(window: tuple[int, int]) -> Callable[..., Any] | None:
    """torch's varlen flash kernel, if this torch has one that can take `window`: the kernel's first releases
    have no `window_size`, so local layers (ModernBERT's sliding window) take the padded path there."""
    try:
        from torch.nn.attention import varlen  # torch >= 2.9
    except ImportError:
        return None
    kernel = getattr(varlen, "varlen_attn", None)
    if kernel is None or (window != (-1, -1) and "window_size" not in inspect.signature(kernel).parameters):
        return None
    return kernel


def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    packing: Packing,
    dropout_p: float = 0.0,
    window: tuple[int, int] = (-1, -1),
) -> torch.Tensor:
    """Softmax attention of packed (N, heads, head_dim) queries, keys and values, each token attending to the
    tokens of its own segment only; returns (N, heads, head_dim). `window` (left, right), torch's varlen
    convention: a query at i sees keys i - left .. i + right only (-1: no limit), ModernBERT's local layers
    (a 128-token window is (64, 64)).

    CUDA in fp16/bf16 without dropout: torch's varlen flash kernel over cu_seqlens. Elsewhere: the segments
    padded to the longest one, (S, heads, max_seqlen, head_dim), through SDPA with a key mask. Measured on CPU
    (2 cores, review-length batches of 32; README "The training engine", tests/bench/test_unpad_bench.py) against one
    SDPA call per segment (Python overhead per segment per layer) and one call over all N tokens with a
    block-diagonal mask (N^2 work): the padded-segment call was the fastest, and attention is a small share of a
    layer at these lengths, so the padding it keeps costs little.
    """
    kernel = _flash_varlen_kernel(window) if _flash_varlen_usable(q, dropout_p) else None
    if kernel is not None:
        cu = packing.cu_seqlens
        # Full attention passes no window: torch versions whose kernel has no window_size run it too.
        windowed = {"window_size": window} if window != (-1, -1) else {}
        out = kernel(q, k, v, cu, cu, packing.max_seqlen, packing.max_seqlen, **windowed)
        assert isinstance(out, torch.Tensor)
        return out
    segments = len(packing.cu_seqlens) - 1
    heads, head_dim = q.shape[1], q.shape[2]

    def padded(x: torch.Tensor) -> torch.Tensor:
        slots = x.new_zeros(segments * packing.max_seqlen, heads, head_dim).index_copy(0, packing.slots, x)
        return slots.view(segments, packing.max_seqlen, heads, head_dim).transpose(1, 2)

    mask = packing.key_mask
    if window != (-1, -1):
        # The diagonal keeps a padding slot far past its segment's end from having no key at all: torch 2.13's
        # CPU kernels return 0 for such a row, but a kernel that returns NaN would put NaN into the backward.
        # A real query always sees itself anyway.
        eye = torch.eye(packing.max_seqlen, dtype=torch.bool, device=q.device)
        mask = (mask & band_mask(packing.max_seqlen, window, q.device)) | eye
    context = F.scaled_dot_product_attention(padded(q), padded(k), padded(v), attn_mask=mask, dropout_p=dropout_p)
    context = context.transpose(1, 2).reshape(segments * packing.max_seqlen, heads, head_dim)
    return context.index_select(0, packing.slots)


def band_mask(length: int, window: tuple[int, int], device: torch.device | str) -> torch.Tensor:
    """(length, length) bool: True where key j is within `window` (left, right) of query i (-1: no limit)."""
    offset = torch.arange(length, device=device)[None, :] - torch.arange(length, device=device)[:, None]
    left, right = window
    allowed = torch.ones(length, length, dtype=torch.bool, device=device)
    if left >= 0:
        allowed &= offset >= -left
    if right >= 0:
        allowed &= offset <= right
    return allowed


def document_positions(attention_mask: torch.Tensor, document_ids: torch.Tensor) -> torch.Tensor:
    """(B, T) 0-based positions that restart at every segment (the padded path's twin of Packing.positions)."""
    starts = segment_starts(attention_mask, document_ids)
    index = torch.arange(attention_mask.shape[1], device=attention_mask.device).expand_as(starts)
    # Position of the latest segment start at or before each token.
    start_at = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values
    return (index - start_at).clamp(min=0)


def document_mask(attention_mask: torch.Tensor, document_ids: torch.Tensor) -> torch.Tensor:
    """(B, 1, T, T) bool for the padded path: a query attends to the real tokens of its own segment only.
    Padding queries keep their (discarded) outputs finite by attending to themselves."""
    segment = segment_starts(attention_mask, document_ids).long().cumsum(1)
    real = attention_mask.bool()
    same = (segment[:, :, None] == segment[:, None, :]) & real[:, None, :] & real[:, :, None]
    same = same | torch.eye(attention_mask.shape[1], dtype=torch.bool, device=same.device)
    return same[:, None]

"""BigBird's block-sparse self-attention (Zaheer et al. 2020, the ITC variant), forward pass only.

The sequence is cut into blocks of `block_size` tokens. The first and the last block are global: they attend
to every token and every query attends to them. Every other query block attends to a window of 3 blocks
(itself and its two neighbours) and to `num_random_blocks` blocks drawn at random. Each query block reads at
most (5 + r) key blocks, so time and memory grow linearly with the length.

How it is computed: the two global query blocks go through SDPA against all keys; the other query blocks
each gather their (5 + r) key/value blocks (one `index_select`) and go through SDPA as a batch of short
attentions. A window block that repeats a global block (the window of block 1 holds block 0, that of block
n-2 holds block n-1) is masked out, so every key counts once, as in the reference.

What mirrors `transformers` (modeling_big_bird.py), so that its checkpoints give the same outputs:
- sequences of at most (5 + 2r) * block_size tokens use full attention (`ModelConfig.full_attention_limit`);
- longer ones are padded to a whole number of blocks here, inside the layer; the padding is masked as keys
  and cut off the output, so it never reaches the layers above, the heads or the loss;
- the random blocks come from the reference's numpy draw, call for call (`random_blocks`): in training it
  is seeded with the layer's index, so each layer has its own pattern, the same at every step; in eval
  every "random" block is block 0 (transformers' fixed inference pattern, which weights block 0 more);
- the sparse path has no attention-probability dropout (the reference applies none there); the full-attention
  fallback keeps the model's attention dropout.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.config.schema import ModelConfig
from bertkit.models.attention import AttentionOutput, SelfAttention
from bertkit.models.repeatable import select

# Sequence lengths for which the reference draws from the plan of the paper's code (random blocks among
# the first 1024 tokens of the longest sequence); other lengths use its per-head plan.
_PAPER_PLAN_LENGTHS = (1024, 3072, 4096)
_PAPER_LAST_TOKEN = 1024


# ------------------------------------------------------------------------------------- the random draw


def _paper_plan(rng: np.random.RandomState, length: int, block_size: int, num_random: int) -> np.ndarray:
    """One head's random blocks for every non-global query block of a `length`-token sequence, drawn only
    among the blocks of the first 1024 tokens (the reference's `last_idx=1024`)."""
    blocks = length // block_size
    rows = np.zeros((blocks - 2, num_random), dtype=np.int64)
    middle = np.arange(1, blocks - 1, dtype=np.int32)
    last = blocks - 1
    if 2 * block_size < _PAPER_LAST_TOKEN:
        last = _PAPER_LAST_TOKEN // block_size - 1
    for i in range(1, blocks - 1):
        start, end = i - 2, i
        if i == 1:
            pool = middle[2:last]
        elif i == 2:
            pool = middle[3:last]
        elif i in (blocks - 3, blocks - 2) or start > last:
            pool = middle[:last]
        elif end + 1 == last:
            pool = middle[:start]
        else:
            pool = np.concatenate((middle[:start], middle[end + 1 : last]))
        rows[i - 1] = _take(rng.permutation(pool), num_random, i)
    return rows


def _take(candidates: np.ndarray, count: int, block: int) -> np.ndarray:
    if len(candidates) < count:
        raise ValueError(
            f"block-sparse attention: query block {block} has only {len(candidates)} blocks to draw "
            f"{count} random blocks from; lower model.num_random_blocks or use longer sequences"
        )
    return candidates[:count]


def _plan(length: int, block_size: int, num_random: int) -> tuple[list[int], list[int]]:
    """Where random blocks come from: (end of each span in tokens, random blocks drawn from it)."""
    blocks = length // block_size
    if 2 * num_random + 5 < blocks:
        return [(2 * num_random + 5) * block_size, length], [num_random, 0]
    if num_random + 5 < blocks:
        return [(num_random + 5) * block_size, length], [num_random // 2, num_random - num_random // 2]
    return [length], [num_random]


def _row(rng: np.random.RandomState, block: int, start: int, end: int, count: int) -> np.ndarray:
    """`count` random blocks among [start, end) for query block `block`, avoiding its window, the two
    global blocks and (for the second and second-to-last block) the block the window cannot reach."""
    shuffled = rng.permutation(np.arange(start, end, dtype=np.int32))
    illegal = {block - 1, block, block + 1, 0, end - 1}
    if block == 1:
        illegal.add(end - 2)
    if block == end - 2:
        illegal.add(1)
    chosen = [b for b in shuffled if b not in illegal][:count]
    return _take(np.array(chosen, dtype=np.int64), count, block)


def _per_head_plan(rng: np.random.RandomState, length: int, block_size: int, num_random: int, heads: int) -> np.ndarray:
    blocks = length // block_size
    ends, counts = _plan(length, block_size, num_random)
    span_blocks = [end // block_size for end in ends]
    out = np.zeros((heads, blocks, sum(counts)), dtype=np.int64)
    for p in range(len(ends)):
        first = 0
        if p > 0:
            if counts[p] > 0:  # earlier rows draw from this span too
                first, stop = sum(counts[:p]), sum(counts[: p + 1])
                for row in range(1, span_blocks[p - 1]):
                    for h in range(heads):
                        out[h, row, first:stop] = _row(rng, row, span_blocks[p - 1], span_blocks[p], counts[p])
            for q in range(p):  # this span's rows draw from the earlier spans
                if counts[q] == 0:
                    continue
                lo, hi = sum(counts[:q]), sum(counts[: q + 1])
                begin = span_blocks[q - 1] if q > 0 else 0
                for row in range(span_blocks[p - 1], span_blocks[p]):
                    for h in range(heads):
                        out[h, row, lo:hi] = _row(rng, row, begin, span_blocks[q], counts[q])
        if counts[p] == 0:
            continue
        stop = sum(counts[: p + 1])
        row_start, block_start = (span_blocks[p - 1], span_blocks[p - 1]) if p > 0 else (1, 0)
        if p > 0:
            first = sum(counts[:p])
        for row in range(row_start, span_blocks[p]):
            for h in range(heads):
                out[h, row, first:stop] = _row(rng, row, block_start, span_blocks[p], counts[p])
    return out[:, 1 : blocks - 1]


@functools.lru_cache(maxsize=256)
def random_blocks(
    length: int, block_size: int, num_random: int, heads: int, seed: int, max_positions: int, training: bool
) -> np.ndarray:
    """(heads, length // block_size - 2, num_random) key-block indices for the non-global query blocks.

    The reference's draw, reproduced call for call from the same numpy stream (a local RandomState, so the
    global numpy state is left alone): in training seeded with the layer index `seed` (hence cached: the
    same for every step), in eval all zeros. `length` is the padded length, a multiple of `block_size`.
    """
    blocks = length // block_size
    if not training or num_random == 0:
        out = np.zeros((heads, blocks - 2, num_random), dtype=np.int64)
    else:
        rng = np.random.RandomState(seed)
        if length in _PAPER_PLAN_LENGTHS:
            draws = [_paper_plan(rng, max_positions, block_size, num_random)[: blocks - 2] for _ in range(heads)]
            out = np.stack(draws)
        else:
            out = _per_head_plan(rng, length, block_size, num_random, heads)
    out.setflags(write=False)
    return out


# ------------------------------------------------------------------------------------- the attention


def key_blocks(random: torch.Tensor, blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For every non-global query block 1..n-2: the key blocks it reads, (heads, n-2, 5 + r), in the order
    [first, window (3), random (r), last], and (n-2, 5 + r) True where a window block repeats a global one."""
    heads, rows, _ = random.shape
    device = random.device
    query = torch.arange(1, blocks - 1, device=device)
    window = query[:, None] + torch.arange(-1, 2, device=device)
    first = torch.zeros(rows, 1, dtype=torch.long, device=device)
    last = torch.full((rows, 1), blocks - 1, dtype=torch.long, device=device)
    fixed = [t.expand(heads, rows, t.shape[-1]) for t in (first, window)]
    index = torch.cat([*fixed, random, last.expand(heads, rows, 1)], dim=-1)
    repeat = torch.zeros(rows, index.shape[-1], dtype=torch.bool, device=device)
    repeat[0, 1] = True  # block 1's left neighbour is the global first block
    repeat[-1, 3] = True  # block n-2's right neighbour is the global last block
    return index, repeat


def block_sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    keep: torch.Tensor | None,
    block_size: int,
    random: torch.Tensor,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """q, k, v: (B, heads, T, d); keep: (B, T) True for real tokens (None: all); random: (heads, n-2, r)
    for the padded length n * block_size. Returns the context (B, heads, T, d) and, with `need_weights`,
    the (B, heads, T, T) probabilities (zero outside the pattern) and the raw scores QK^T/sqrt(d)."""
    batch, heads, length, dim = q.shape
    pad = -length % block_size
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        real = keep if keep is not None else q.new_ones(batch, length, dtype=torch.bool)
        keep = torch.cat([real, real.new_zeros(batch, pad)], dim=1)
    padded = length + pad
    blocks = padded // block_size
    rows = blocks - 2
    index, repeat = key_blocks(random, blocks)
    width = index.shape[-1] * block_size  # keys read by each non-global query block

    # The two global query blocks attend to every key.
    q_global = torch.cat([q[:, :, :block_size], q[:, :, -block_size:]], dim=2)
    global_mask = keep[:, None, None, :] if keep is not None else None

    # The other query blocks, each with its own gathered keys: (B, heads * rows, block, d).
    flat = (index + torch.arange(heads, device=q.device)[:, None, None] * blocks).reshape(-1)
    k_blocks = select(k.reshape(batch, heads * blocks, block_size, dim), 1, flat)
    v_blocks = select(v.reshape(batch, heads * blocks, block_size, dim), 1, flat)
    k_rows = k_blocks.view(batch, heads * rows, width, dim)
    v_rows = v_blocks.view(batch, heads * rows, width, dim)
    q_rows = q.reshape(batch, heads, blocks, block_size, dim)[:, :, 1:-1].reshape(batch, heads * rows, block_size, dim)
    allowed = ~repeat[:, :, None].expand(rows, index.shape[-1], block_size).reshape(1, 1, rows, width)
    if keep is not None:
        keep_rows = keep.view(batch, blocks, block_size)[:, index.reshape(-1)].view(batch, heads, rows, width)
        allowed = allowed & keep_rows
    row_mask = allowed.expand(-1, heads, -1, -1).reshape(allowed.shape[0], heads * rows, 1, width)

    probs = scores = None
    if not need_weights:
        context_global = F.scaled_dot_product_attention(q_global, k, v, attn_mask=global_mask)
        context_rows = F.scaled_dot_product_attention(q_rows, k_rows, v_rows, attn_mask=row_mask)
    else:
        scale = 1.0 / math.sqrt(dim)
        fill = torch.finfo(q.dtype).min
        global_scores = (q_global @ k.transpose(-1, -2)) * scale
        if global_mask is not None:
            global_scores = global_scores.masked_fill(~global_mask, fill)
        global_probs = global_scores.softmax(-1)
        row_probs = ((q_rows @ k_rows.transpose(-1, -2)) * scale).masked_fill(~row_mask, fill).softmax(-1)
        context_global, context_rows = global_probs @ v, row_probs @ v_rows
        # Dense (B, heads, T, T) probabilities: what each query gave each key (repeated blocks summed).
        dense = q.new_zeros(batch, heads, blocks, block_size, blocks, block_size)
        dense[:, :, 0] = global_probs[:, :, :block_size].view(batch, heads, block_size, blocks, block_size)
        dense[:, :, -1] = global_probs[:, :, block_size:].view(batch, heads, block_size, blocks, block_size)
        spread = row_probs.view(batch, heads, rows, block_size, index.shape[-1], block_size)
        target = index[None, :, :, None, :, None].expand_as(spread)
        dense[:, :, 1:-1] = dense[:, :, 1:-1].scatter_add(4, target, spread)
        probs = dense.view(batch, heads, padded, padded)[:, :, :length, :length]
        scores = ((q @ k.transpose(-1, -2)) * scale)[:, :, :length, :length]

    context_rows = context_rows.view(batch, heads, rows * block_size, dim)
    context = torch.cat([context_global[:, :, :block_size], context_rows, context_global[:, :, block_size:]], dim=2)
    return context[:, :, :length], probs, scores


class BlockSparseAttention(SelfAttention):
    """SelfAttention (same parameters, same state-dict keys) with BigBird's block-sparse pattern for
    sequences longer than `ModelConfig.full_attention_limit`, and plain full attention below it."""

    def __init__(self, cfg: ModelConfig, layer_index: int = 0) -> None:
        super().__init__(cfg)
        self.block_size = cfg.block_size
        self.num_random_blocks = cfg.num_random_blocks
        self.full_attention_limit = cfg.full_attention_limit
        self.max_positions = cfg.max_position_embeddings  # the reference's paper plan draws from it
        self.seed = layer_index  # the reference seeds each layer's draw with its index

    def random_blocks(self, padded_length: int, device: torch.device) -> torch.Tensor:
        draw = random_blocks(
            padded_length, self.block_size, self.num_random_blocks, self.num_heads, self.seed,
            self.max_positions, self.training,
        )  # fmt: skip
        return torch.tensor(draw, dtype=torch.long, device=device)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, need_weights: bool = False, scores_only: bool = False
    ) -> AttentionOutput:
        batch, length, _ = x.shape
        if length <= self.full_attention_limit or scores_only:
            # The raw scores QK^T/sqrt(d) are dense whatever the pattern (block_sparse_attention returns them so).
            return super().forward(x, mask, need_weights, scores_only)
        q, k, v = self.qkv(x).view(batch, length, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        # The encoder's (B, 1, 1, T) key mask, as (B, T).
        keep = mask.reshape(mask.shape[0], mask.shape[-1]).expand(batch, length) if mask is not None else None
        padded = length + (-length % self.block_size)
        context, probs, scores = block_sparse_attention(
            q, k, v, keep, self.block_size, self.random_blocks(padded, x.device), need_weights
        )
        context = context.transpose(1, 2).reshape(batch, length, -1)
        return AttentionOutput(self.out(context), probs, scores, v if need_weights else None)

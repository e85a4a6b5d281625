"""Block-sparse attention against a dense reference written from the ITC definition, the random-block draw,
padding that never reaches the outputs, the recipe checks, and the warm-start table extension."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from encoder_helpers import encode

from bertkit.config.recipe import load_recipe
from bertkit.config.schema import ModelConfig
from bertkit.errors import BertkitError
from bertkit.models.bert import BertEncoder
from bertkit.models.block_sparse import BlockSparseAttention, block_sparse_attention, random_blocks
from bertkit.pipelines.init_from import _warm_start, extend_tables, is_warm_start

BLOCK = 16


def dense_reference(q, k, v, keep, random):
    """softmax over every key with the weight ITC gives it: each global block once, the window blocks once,
    each random block as often as it was drawn (transformers' eval pattern draws block 0 r times)."""
    batch, heads, length, dim = q.shape
    blocks = -(-length // BLOCK)
    weight = torch.zeros(heads, blocks, blocks)
    weight[:, 0] = weight[:, -1] = 1.0
    for i in range(1, blocks - 1):
        weight[:, i, 0] += 1
        weight[:, i, -1] += 1
        for j in (i - 1, i, i + 1):
            if j not in (0, blocks - 1):
                weight[:, i, j] += 1
        for h in range(heads):
            for j in random[h, i - 1].tolist():
                weight[h, i, j] += 1
    token = weight.repeat_interleave(BLOCK, 1).repeat_interleave(BLOCK, 2)[:, :length, :length]
    bias = token.log()[None].expand(batch, -1, -1, -1)
    if keep is not None:
        bias = bias.masked_fill(~keep[:, None, None, :], -math.inf)
    scores = q @ k.transpose(-1, -2) / math.sqrt(dim) + bias
    probs = scores.softmax(-1)
    return probs @ v, probs


def _qkv(length: int, heads: int = 3, dim: int = 8, padded_row: bool = True):
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, heads, length, dim, generator=generator, requires_grad=True) for _ in range(3))
    keep = torch.ones(2, length, dtype=torch.bool)
    if padded_row:
        keep[1, length - 45 :] = False
    return q, k, v, keep


@pytest.mark.parametrize("pattern", ["drawn", "eval", "none", "arbitrary"])
@pytest.mark.parametrize("length", [200, 208])  # padded inside to 13 blocks; a whole number of blocks
def test_matches_the_dense_reference(length: int, pattern: str) -> None:
    q, k, v, keep = _qkv(length)
    blocks = -(-length // BLOCK)
    if pattern == "drawn":
        random = torch.tensor(random_blocks(blocks * BLOCK, BLOCK, 2, 3, seed=1, max_positions=1024, training=True))
    elif pattern == "eval":
        random = torch.tensor(random_blocks(blocks * BLOCK, BLOCK, 3, 3, seed=1, max_positions=1024, training=False))
        assert not random.any()
    elif pattern == "none":
        random = torch.zeros(3, blocks - 2, 0, dtype=torch.long)
    else:  # any blocks, repeats and windows included
        random = torch.randint(0, blocks, (3, blocks - 2, 4), generator=torch.Generator().manual_seed(3))
    context, probs, scores = block_sparse_attention(q, k, v, keep, BLOCK, random, need_weights=True)
    expected, expected_probs = dense_reference(q, k, v, keep, random)
    valid = keep[:, None, :, None].expand_as(context)
    assert (context - expected)[valid].abs().max().item() < 1e-5
    assert (probs - expected_probs)[keep[:, None, :, None].expand_as(probs)].abs().max().item() < 1e-5
    assert torch.allclose(scores, q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]))
    # The SDPA path (no weights) computes the same context, and the same gradients as the reference.
    fast, none, _ = block_sparse_attention(q, k, v, keep, BLOCK, random)
    assert none is None and (fast - expected)[valid].abs().max().item() < 1e-5
    grads = torch.autograd.grad((fast * valid).square().sum(), (q, k, v))
    expected_grads = torch.autograd.grad((expected * valid).square().sum(), (q, k, v))
    for mine, theirs in zip(grads, expected_grads, strict=True):
        assert (mine - theirs).abs().max().item() < 1e-4


def test_random_draw_is_reproducible_legal_and_leaves_numpy_alone() -> None:
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    for length, heads in ((512, 4), (1024, 2)):  # the per-head plan, and the paper's plan
        draw = random_blocks(length, BLOCK, 3, heads, seed=0, max_positions=1024, training=True)
        blocks = length // BLOCK
        assert draw.shape == (heads, blocks - 2, 3) and not draw.flags.writeable
        assert np.array_equal(draw, random_blocks(length, BLOCK, 3, heads, 0, 1024, True))
        assert not np.array_equal(draw, random_blocks(length, BLOCK, 3, heads, 1, 1024, True))  # one per layer
        for h in range(heads):
            for row, chosen in enumerate(draw[h], start=1):
                assert len(set(chosen.tolist())) == 3  # distinct blocks
                assert not set(chosen.tolist()) & {0, blocks - 1, row - 1, row, row + 1}  # never global/window
    assert np.array_equal(np.random.get_state()[1], before)


def _encoder(**overrides) -> BertEncoder:
    fields = dict(family="bigbird", vocab_size=50, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32,
                  max_position_embeddings=512, attention="block_sparse", block_size=BLOCK, num_random_blocks=2,
                  hidden_dropout=0.0, attention_dropout=0.0)  # fmt: skip
    torch.manual_seed(0)
    return BertEncoder(ModelConfig(**{**fields, **overrides})).eval()


def test_padding_never_reaches_the_outputs() -> None:
    encoder = _encoder()
    assert all(isinstance(layer.attention, BlockSparseAttention) for layer in encoder.layers)
    ids = torch.randint(5, 50, (2, 250), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[1, 190:] = False
    other = ids.clone()
    other[1, 190:] = 7  # different content where the mask says padding
    with torch.no_grad():
        out = encode(encoder, ids, mask, hidden_states=True)
        again = encoder(other, mask).last_hidden_state
        # The 250 tokens padded to 16 whole blocks by the caller: what the layers do inside.
        whole = encoder(torch.cat([ids, ids[:, :6]], 1), torch.cat([mask, mask[:, :6] & False], 1))
    assert out.last_hidden_state.shape == (2, 250, 16)  # not the 256 of the padded blocks
    assert all(h.shape[1] == 250 for h in out.hidden_states)
    assert torch.allclose(out.last_hidden_state[mask], again[mask], atol=1e-6)
    assert torch.allclose(out.last_hidden_state[mask], whole.last_hidden_state[:, :250][mask], atol=1e-5)
    # Not asserted, because BigBird does not promise it: the padded sequence alone (190 tokens, 12 blocks)
    # has other blocks as its global last block and windows than inside the 16-block batch (as in transformers).


def test_attention_weights_for_distillation() -> None:
    encoder = _encoder()
    ids = torch.randint(5, 50, (1, 200))
    with torch.no_grad():
        plain = encoder(ids).last_hidden_state
        out = encode(encoder, ids, attentions=True)
    assert torch.allclose(plain, out.last_hidden_state, atol=1e-5)
    probs = out.attentions[0]
    assert probs.shape == (1, 2, 200, 200) and torch.allclose(probs.sum(-1), torch.ones(1, 2, 200), atol=1e-5)
    assert (probs == 0).float().mean() > 0.2  # sparse: most of a 13-block matrix is never attended
    assert out.attention_scores[0].shape == (1, 2, 200, 200) and out.values[0].shape == (1, 2, 200, 8)


def test_short_sequences_use_full_attention() -> None:
    sparse, full = _encoder(), _encoder(attention="full")
    full.load_state_dict(sparse.state_dict())  # same parameters, same state-dict keys
    ids = torch.randint(5, 50, (2, 144))  # (5 + 2 * 2) * 16: the longest handled with full attention
    with torch.no_grad():
        assert torch.equal(sparse(ids).last_hidden_state, full(ids).last_hidden_state)
        longer = torch.randint(5, 50, (2, 145))
        assert not torch.allclose(sparse(longer).last_hidden_state, full(longer).last_hidden_state, atol=1e-4)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.num_random_blocks=-1", "model.num_random_blocks must be >= 0"),
        ("model.block_size=0", "model.block_size must be a positive number"),
        ("model.block_size=48", "set model.block_size=128"),
        ("model.block_size=128", "never applies"),
        ("model.max_position_embeddings=170", "does not divide"),
    ],
)
def test_bad_block_settings_are_one_clear_line(override: str, message: str) -> None:
    with pytest.raises(BertkitError) as err:
        load_recipe("bigbird-tiny", [override])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_recipes_load() -> None:
    base = load_recipe("bigbird-roberta-base").model  # type: ignore[union-attr]
    assert (base.attention, base.block_size, base.num_random_blocks, base.max_position_embeddings) == (
        "block_sparse", 64, 3, 4096,
    )  # fmt: skip
    assert base.full_attention_limit == 704
    assert load_recipe("bigbird-tiny").model.full_attention_limit == 176  # type: ignore[union-attr]


def test_warm_start_from_roberta_copies_positions() -> None:
    roberta = load_recipe("roberta-tiny", ["model.vocab_size=300", "model.pad_token_id=1"]).model  # type: ignore
    bigbird = load_recipe("bigbird-tiny").model  # type: ignore[union-attr]
    fitted = _warm_start(bigbird, roberta, "run", "bigbird-tiny")  # type: ignore[arg-type]
    assert (fitted.vocab_size, fitted.pad_token_id, fitted.position_offset) == (300, 1, 0)
    positions = torch.randn(130, 128)
    weights = {
        "encoder.embeddings.position_embeddings.weight": positions,
        "encoder.embeddings.token_type_embeddings.weight": torch.randn(1, 128),
    }
    extended, report = extend_tables(roberta, fitted, weights)
    table = extended["encoder.embeddings.position_embeddings.weight"]
    assert table.shape == (1024, 128)
    # RoBERTa's 128 learned positions (rows 2..129) become BigBird's 0..127, then repeat.
    for start in range(0, 1024, 128):
        assert torch.equal(table[start : start + 128], positions[2:])
    types = extended["encoder.embeddings.token_type_embeddings.weight"]
    assert types.shape == (2, 128) and torch.equal(types[1], types[0])
    assert set(report) == {"positions", "token_types"}
    # A checkpoint with more positions than the recipe, or of an unrelated family, is refused.
    with pytest.raises(BertkitError, match="max_position_embeddings"):
        _warm_start(bigbird.model_copy(update={"max_position_embeddings": 64}), roberta, "run", "x")
    assert is_warm_start(bigbird, roberta, "run", "x")
    with pytest.raises(BertkitError, match="same family"):
        is_warm_start(bigbird, load_recipe("bert-tiny").model, "run", "x")  # type: ignore[arg-type]

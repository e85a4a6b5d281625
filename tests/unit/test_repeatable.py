"""The gathers of bertkit/models/repeatable.py: the same values and gradients as the plain ops they stand in for
(`index_select`, an embedding table), through the path CUDA takes (indexing, whose backward sorts the indices),
checked here on the CPU against the plain ops; on a CUDA device, two backward passes give the same bits."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bertkit.config.schema import ModelConfig, ObjectiveConfig
from bertkit.models.pretraining import PretrainingModel
from bertkit.models.repeatable import RepeatableEmbedding, select

pytestmark = pytest.mark.usefixtures("one_thread")


def _grad(fn, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    weight = weight.detach().clone().requires_grad_(True)
    out = fn(weight)
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    (out * upstream).sum().backward()
    return out.detach(), weight.grad


@pytest.mark.parametrize("dim", [0, 1])
def test_select_is_index_select_with_repeated_indices(dim: int) -> None:
    x = torch.randn(6, 7, 5, generator=torch.Generator().manual_seed(0))
    index = torch.tensor([3, 0, 3, 3, 5, 0, 1])  # repeats, out of order, as SpanBERT's boundaries and BigBird's blocks
    plain = _grad(lambda w: w.index_select(dim, index), x)
    for sorted_backward in (True, False):
        ours = _grad(lambda w, s=sorted_backward: select(w, dim, index, sorted_backward=s), x)
        assert torch.equal(ours[0], plain[0])
        torch.testing.assert_close(ours[1], plain[1], rtol=1e-6, atol=1e-6)


def test_repeatable_embedding_is_the_embedding_lookup() -> None:
    torch.manual_seed(0)
    plain, ours = nn.Embedding(2, 8), RepeatableEmbedding(2, 8, sorted_backward=True)
    ours.load_state_dict(plain.state_dict())
    ids = torch.randint(0, 2, (4, 300), generator=torch.Generator().manual_seed(0))  # two rows, many lookups
    upstream = torch.randn(4, 300, 8, generator=torch.Generator().manual_seed(1))
    expected, got = plain(ids), ours(ids)
    assert torch.equal(got, expected)
    (expected * upstream).sum().backward()
    (got * upstream).sum().backward()
    torch.testing.assert_close(ours.weight.grad, plain.weight.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_token_types_and_span_boundaries_give_the_same_gradients_twice_on_cuda() -> None:
    """BERT's segment pairs (2 token types for 16,384 tokens) and SpanBERT's repeated boundary rows: the cases
    where CUDA's embedding and index_select backwards add with atomics."""
    cfg = ModelConfig(vocab_size=1000, hidden_size=256, num_layers=2, num_heads=4, intermediate_size=1024,
                      max_position_embeddings=128, hidden_dropout=0.0, attention_dropout=0.0)  # fmt: skip
    torch.manual_seed(0)
    model = PretrainingModel(cfg, ObjectiveConfig(mlm=1.0, nsp=1.0, sbo=1.0)).cuda()
    ids = torch.randint(5, 1000, (128, 128), generator=torch.Generator().manual_seed(0)).cuda()
    types = (torch.arange(128) >= 64).long().expand(128, 128).cuda()
    # Four spans of 5 tokens a row: each boundary row is read once for each token of its span.
    starts = (torch.arange(128)[:, None] * 128 + torch.tensor([10, 40, 70, 100])).reshape(-1, 1)
    span = (starts + torch.arange(5)).reshape(-1)
    left, right = (starts - 1).expand(-1, 5).reshape(-1), (starts + 5).expand(-1, 5).reshape(-1)
    offsets = torch.arange(5).repeat(len(starts))
    batch = dict(mlm_positions=span, sbo_left=left, sbo_right=right, sbo_offsets=offsets)
    batch = {key: value.cuda() for key, value in batch.items()}

    def grads() -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        out = model(ids, torch.ones_like(ids), token_type_ids=types, **batch)
        sum(value.float().square().mean() for value in out.values() if value.is_floating_point()).backward()
        return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    first, second = grads(), grads()
    assert {"encoder.embeddings.token_type_embeddings.weight", "sbo_head.position_embeddings.weight"} <= set(first)
    assert all(torch.equal(first[name], second[name]) for name in first)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize(
    ("recipe", "corpus_options"),
    [
        ("bert-tiny", {"format": "segment-pair", "masking": "static", "dupe_factor": 2}),  # token types
        ("albert-tiny", {"format": "sop", "mask_strategy": "ngram"}),  # token types, a shared layer
        ("spanbert-tiny", {"format": "single-segment", "mask_strategy": "span"}),  # boundary gathers
    ],
)
def test_pretraining_twice_on_cuda_gives_the_same_curve_and_weights(
    recipe: str, corpus_options: dict, workdir, text_file, tokenizer_dir
) -> None:
    """The whole run, on the Python documentation: two pretraining runs from the same corpus and seed on one GPU
    (bf16, 128-token sequences) log the same loss at every step and end with the same bits in every weight."""
    from run_helpers import loss_curve
    from safetensors.torch import load_file

    from bertkit.config.recipe import load_recipe
    from bertkit.corpus.build import BuildOptions, build_corpus
    from bertkit.pipelines.pretrain import pretrain

    corpus = workdir / f"cuda-corpus-{recipe}"
    build_corpus([text_file], tokenizer_dir, corpus, BuildOptions(max_seq_len=128, **corpus_options))
    settings = [f"data.train={corpus}", "data.eval_fraction=0", "train.steps=60", "train.log_every=1",
                "train.checkpoint_every=0", "engine.device=cuda", "engine.precision=bf16"]  # fmt: skip
    curves, weights = [], []
    for attempt in range(2):
        run = workdir / f"cuda-{recipe}-{attempt}"
        pretrain(load_recipe(recipe, settings), run, quiet=True)  # type: ignore[arg-type]
        curves.append(loss_curve(run))
        weights.append(load_file(str(run / "model" / "model.safetensors")))
    assert len(curves[0]) == 60 and curves[0] == curves[1]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])

"""BigBird against `transformers`: a tiny random `BigBirdForPreTraining(attention_type="block_sparse")` loaded
into bertkit gives the same last hidden state and head logits (max abs difference <= 1e-4 in fp32), on the
block-sparse path (in eval, where the reference's random blocks are a fixed pattern, and in training with
the same numpy draw) and on the full-attention fallback of short sequences; HF -> bertkit -> HF is exact,
and bertkit's export loads into BigBirdModel / BigBirdForMaskedLM / BigBirdForPreTraining cleanly.

transformers cannot run num_random_blocks=0 in block-sparse mode (it fails reshaping an empty gather), so
the r = 0 pattern is checked against a dense reference in tests/unit/test_block_sparse.py instead."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from bertkit.interop.hf import to_hf_checkpoint  # noqa: E402
from bertkit.modelio.hf_dir import load_hf_dir, write_hf_dir  # noqa: E402
from bertkit.models.block_sparse import BlockSparseAttention  # noqa: E402
from bertkit.models.pretraining import build_pretraining_model  # noqa: E402

TOL = 1e-4
# Blocks of 16 with 2 random blocks: sequences of up to (5 + 2 * 2) * 16 = 144 tokens use full attention.
SMALL = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=1024, block_size=16, num_random_blocks=2, attention_type="block_sparse",
             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip


pytestmark = pytest.mark.usefixtures("one_thread")


def _hf_model(tmp_path: Path, **overrides):
    torch.manual_seed(0)
    model = transformers.BigBirdForPreTraining(transformers.BigBirdConfig(**{**SMALL, **overrides}))
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    model.save_pretrained(tmp_path)
    return model


def _inputs(length: int, pad: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, SMALL["vocab_size"], (2, length), generator=generator)
    mask = torch.ones_like(ids)  # transformers' BigBird wants a numeric mask
    mask[1, length - 37 :] = 0  # the second sequence is padded: its padding must never matter
    ids[1, length - 37 :] = pad
    return {"input_ids": ids, "attention_mask": mask}


def _sparse_calls(model: torch.nn.Module) -> list[int]:
    """Count block-sparse (not fallback) forward passes of every BlockSparseAttention in `model`."""
    calls = [0]
    for module in model.modules():
        if isinstance(module, BlockSparseAttention):
            limit = module.full_attention_limit

            def hook(_module, args, _out, limit=limit):
                calls[0] += args[0].shape[1] > limit

            module.register_forward_hook(hook)
    return calls


@pytest.mark.parametrize(
    ("length", "training", "sparse"),
    [
        (300, False, True),  # padded inside to 304 = 19 blocks; eval: the reference's fixed random pattern
        (300, True, True),  # training: the reference's numpy draw, seeded by the layer index
        (1024, True, True),  # a length that uses the paper's random plan
        (197, False, True),  # just past the limit, 13 blocks
        (144, False, False),  # (5 + 2r) * block_size: full attention in both
        (40, True, False),
    ],
)
def test_hidden_states_and_logits_match(tmp_path: Path, length: int, training: bool, sparse: bool) -> None:
    hf = _hf_model(tmp_path).train(training)
    loaded = load_hf_dir(tmp_path)
    assert loaded.config.family == "bigbird" and loaded.config.attention == "block_sparse"
    assert loaded.objective.active == ["mlm", "nsp"]
    ours = build_pretraining_model(loaded.config, loaded.objective).train(training)
    missing = set(ours.state_dict()) - set(loaded.weights)
    assert not missing, sorted(missing)[:5]
    ours.load_state_dict(loaded.weights)
    calls = _sparse_calls(ours)
    batch = _inputs(length)
    valid = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch)
        out = ours(batch["input_ids"], batch["attention_mask"])
        hidden = ours.encoder(batch["input_ids"], batch["attention_mask"]).last_hidden_state
        hf_hidden = hf.bert(**batch).last_hidden_state
    # transformers switches the whole model to full attention for a short input: the path both took.
    assert (hf.bert.attention_type == "block_sparse") == sparse
    assert (calls[0] > 0) == sparse
    assert hidden.shape == hf_hidden.shape == (2, length, SMALL["hidden_size"])
    assert (hf_hidden - hidden)[valid].abs().max().item() <= TOL
    mlm = out["mlm_logits"].view(expected.prediction_logits.shape)
    assert (expected.prediction_logits - mlm)[valid].abs().max().item() <= TOL
    assert (expected.seq_relationship_logits - out["pair_logits"]).abs().max().item() <= TOL


def test_training_draw_is_not_the_eval_pattern(tmp_path: Path) -> None:
    """The training-mode parity above is only meaningful if the random blocks change the output."""
    _hf_model(tmp_path)
    loaded = load_hf_dir(tmp_path)
    ours = build_pretraining_model(loaded.config, loaded.objective)
    ours.load_state_dict(loaded.weights)
    batch = _inputs(300)
    with torch.no_grad():
        trained = ours.train().encoder(**batch).last_hidden_state
        evaluated = ours.eval().encoder(**batch).last_hidden_state
        again = ours.train().encoder(**batch).last_hidden_state
    assert (trained - evaluated).abs().max().item() > 1e-3
    assert torch.equal(trained, again)  # reproducible: the same draw at every step


def test_round_trip_is_exact(tmp_path: Path) -> None:
    _hf_model(tmp_path)
    loaded = load_hf_dir(tmp_path)
    config, state = to_hf_checkpoint(loaded.config, loaded.weights, "pretraining")
    assert config["architectures"] == ["BigBirdForPreTraining"]
    assert (config["attention_type"], config["block_size"], config["num_random_blocks"]) == ("block_sparse", 16, 2)
    from safetensors.torch import load_file

    saved = load_file(str(tmp_path / "model.safetensors"))
    assert set(state) == set(saved)
    for key, value in saved.items():
        assert torch.equal(state[key], value), key


@pytest.mark.parametrize(
    ("head", "cls"),
    [("pretraining", "BigBirdForPreTraining"), ("mlm", "BigBirdForMaskedLM"), ("base", "BigBirdModel")],
)
def test_export_loads_into_every_class(tmp_path: Path, head: str, cls: str) -> None:
    hf = _hf_model(tmp_path / "source").eval()
    loaded = load_hf_dir(tmp_path / "source")
    config, state = to_hf_checkpoint(loaded.config, loaded.weights, head)  # type: ignore[arg-type]
    assert config["architectures"] == [cls]
    write_hf_dir(tmp_path, config, state)
    auto = {"pretraining": transformers.AutoModelForPreTraining, "mlm": transformers.AutoModelForMaskedLM,
            "base": transformers.AutoModel}[head]  # fmt: skip
    model, info = auto.from_pretrained(tmp_path, output_loading_info=True)
    assert type(model).__name__ == cls
    assert {k: v for k, v in info.items() if v and k != "error_msgs"} == {}
    batch = _inputs(300)
    base = (model if head == "base" else model.bert).eval()
    with torch.no_grad():
        diff = (base(**batch).last_hidden_state - hf.bert(**batch).last_hidden_state)[batch["attention_mask"].bool()]
    assert diff.abs().max().item() == 0.0

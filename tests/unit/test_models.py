"""The shared blocks: ALBERT's sharing modes, factorized embeddings, ELECTRA's shared embeddings,
pre-/post-LN, attention outputs, and weights that survive a safetensors round trip in every mode."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from encoder_helpers import encode

from bertkit.config.schema import GeneratorConfig, ModelConfig, ObjectiveConfig
from bertkit.engine.checkpoint import load_weights
from bertkit.modelio.weights import save_weights
from bertkit.models.bert import BertEncoder
from bertkit.models.pretraining import build_pretraining_model

pytestmark = pytest.mark.usefixtures("one_thread")


BASE = dict(vocab_size=50, hidden_size=32, num_layers=4, num_heads=4, intermediate_size=64,
            max_position_embeddings=16, hidden_dropout=0.0, attention_dropout=0.0)  # fmt: skip


def _ids() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(5, 50, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[1, 6:] = False
    return ids, mask


def test_all_shared_applies_one_layer_num_layers_times() -> None:
    torch.manual_seed(0)
    enc = BertEncoder(ModelConfig(**BASE, family="albert", embedding_size=8, sharing="all-shared")).eval()
    assert len(enc.layers) == 1
    ids, mask = _ids()
    x = enc.embed_proj(enc.embeddings(ids))
    for _ in range(4):
        x, _ = enc.layers[0](x, mask[:, None, None, :])
    # At the real tokens: the encoder runs this padded batch unpadded (engine.unpad=auto), whose padding rows are 0.
    assert torch.allclose(enc(ids, mask).last_hidden_state[mask], x[mask], atol=1e-6)


@pytest.mark.parametrize("sharing", ["shared-ffn", "shared-attention"])
def test_partial_sharing_stores_the_shared_sublayer_once(sharing: str, tmp_path: Path) -> None:
    cfg = ModelConfig(**BASE, family="albert", embedding_size=8, sharing=sharing)
    torch.manual_seed(0)
    enc = BertEncoder(cfg).eval()
    shared_attr = "ffn" if sharing == "shared-ffn" else "attention"
    own_attr = "attention" if sharing == "shared-ffn" else "ffn"
    assert all(getattr(layer, shared_attr) is None for layer in enc.layers[1:])
    assert all(getattr(layer, own_attr) is not None for layer in enc.layers)
    # Changing the one stored copy changes every layer's computation.
    ids, mask = _ids()
    before = enc(ids, mask).last_hidden_state
    save_weights(enc, tmp_path / "w.safetensors")  # shared tensors would make safetensors refuse
    shared = enc.layers[0].ffn.down if sharing == "shared-ffn" else enc.layers[0].attention.out
    with torch.no_grad():
        shared.weight.zero_()
    assert not torch.allclose(enc(ids, mask).last_hidden_state, before)
    load_weights(enc, tmp_path / "w.safetensors")
    assert torch.allclose(enc(ids, mask).last_hidden_state, before)


def test_factorized_embeddings_project_e_to_h() -> None:
    enc = BertEncoder(ModelConfig(**BASE, family="albert", embedding_size=8))
    assert enc.embeddings.word_embeddings.weight.shape == (50, 8)
    assert enc.embed_proj.weight.shape == (32, 8)
    ids, mask = _ids()
    out = encode(enc, ids, mask, hidden_states=True)
    assert [h.shape[-1] for h in out.hidden_states] == [32] * 5


def test_electra_generator_shares_the_embeddings(tmp_path: Path) -> None:
    cfg = ModelConfig(**BASE, family="electra", embedding_size=16, pooler=False,
                      generator=GeneratorConfig(hidden_fraction=0.25))  # fmt: skip
    model = build_pretraining_model(cfg, ObjectiveConfig(mlm=1.0, rtd=50.0))
    keys = set(model.state_dict())
    assert not any(k.startswith("generator.embeddings") for k in keys)
    assert model.generator.config.hidden_size == 8 and model.generator.embed_proj.weight.shape == (8, 16)
    save_weights(model, tmp_path / "w.safetensors")
    ids, mask = _ids()
    positions = torch.tensor([1, 3, 12])
    out = model(ids, mask, positions, mlm_labels=ids.reshape(-1)[positions])
    out["mlm_logits"].sum().backward()
    # The generator's MLM loss trains the shared embeddings.
    assert model.encoder.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert out["rtd_logits"].shape == ids.shape and out["replaced"].dtype == torch.bool


def test_electra_generator_defaults_follow_the_paper() -> None:
    small = ModelConfig(family="electra", hidden_size=256, num_heads=4, intermediate_size=1024, embedding_size=128,
                        pooler=False, generator=GeneratorConfig(hidden_fraction=0.25)).generator_config()  # fmt: skip
    assert (small.hidden_size, small.num_heads, small.intermediate_size, small.embedding_dim) == (64, 1, 256, 128)
    base = ModelConfig(family="electra", pooler=False, generator=GeneratorConfig(hidden_fraction=1 / 3))
    assert (base.generator_config().hidden_size, base.generator_config().num_heads) == (256, 4)


def test_pre_norm_and_gelu_variants_change_the_function() -> None:
    ids, mask = _ids()
    outputs = []
    for update in ({}, {"norm": "pre"}, {"hidden_act": "gelu_new"}, {"hidden_act": "relu"}):
        torch.manual_seed(0)
        enc = BertEncoder(ModelConfig(**{**BASE, **update})).eval()
        outputs.append(enc(ids, mask).last_hidden_state)
        assert (enc.final_norm is not None) == (update.get("norm") == "pre")
    for other in outputs[1:]:
        assert not torch.allclose(outputs[0], other)


def test_attentions_when_asked() -> None:
    enc = BertEncoder(ModelConfig(**BASE)).eval()
    ids, mask = _ids()
    out = encode(enc, ids, mask, attentions=True)
    assert len(out.attentions) == 4 and out.attentions[0].shape == (2, 4, 9, 9)
    assert torch.allclose(out.attentions[0].sum(-1), torch.ones(2, 4, 9), atol=1e-5)
    assert out.attentions[0][1, :, :, 6:].abs().max() == 0  # padding is never attended to
    # Real tokens only: without attentions the batch runs unpadded, and padding rows come back as 0.
    assert torch.allclose(enc(ids, mask).last_hidden_state[mask], out.last_hidden_state[mask], atol=1e-5)


def test_dropout_only_in_training() -> None:
    enc = BertEncoder(ModelConfig(**{**BASE, "hidden_dropout": 0.5}))
    ids, mask = _ids()
    enc.eval()
    assert torch.equal(enc(ids, mask).last_hidden_state, enc(ids, mask).last_hidden_state)
    enc.train()
    assert not torch.equal(enc(ids, mask).last_hidden_state, enc(ids, mask).last_hidden_state)

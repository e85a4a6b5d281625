"""Per family: a tiny random `transformers` model, loaded into bertkit, gives the same hidden states and
head logits (max abs difference <= 1e-5 in fp32), and HF -> bertkit -> HF reproduces every tensor exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from encoder_helpers import encode

transformers = pytest.importorskip("transformers")

from bertkit.interop.hf import to_hf_checkpoint  # noqa: E402
from bertkit.modelio.hf_dir import load_hf_dir  # noqa: E402
from bertkit.models.pretraining import build_pretraining_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


TOL = 1e-5
SMALL = dict(vocab_size=97, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=40)  # fmt: skip
CASES = {
    "bert": (transformers.BertConfig, transformers.BertForPreTraining, dict(SMALL)),
    "bert-gelu-new": (transformers.BertConfig, transformers.BertForPreTraining, dict(SMALL, hidden_act="gelu_new")),
    "roberta": (transformers.RobertaConfig, transformers.RobertaForMaskedLM, dict(SMALL, type_vocab_size=1,
                                                                                   max_position_embeddings=42)),
    "albert-all-shared": (transformers.AlbertConfig, transformers.AlbertForPreTraining,
                          dict(SMALL, embedding_size=16, num_hidden_groups=1)),
    "albert-unshared": (transformers.AlbertConfig, transformers.AlbertForPreTraining,
                        dict(SMALL, embedding_size=16, num_hidden_groups=3)),
    "electra": (transformers.ElectraConfig, transformers.ElectraForPreTraining, dict(SMALL, embedding_size=16)),
    "distilbert": (transformers.DistilBertConfig, transformers.DistilBertForMaskedLM,
                   dict(vocab_size=97, dim=32, n_layers=3, n_heads=4, hidden_dim=48, max_position_embeddings=40)),
}  # fmt: skip


def _hf_model(name: str, tmp_path: Path):
    config_cls, model_cls, kwargs = CASES[name]
    torch.manual_seed(0)
    model = model_cls(config_cls(**kwargs)).eval()
    # Random init leaves LayerNorms at identity and biases at zero; perturb everything so the map is tested.
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    model.save_pretrained(tmp_path)
    return model


def _inputs(vocab: int, pad: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, vocab, (2, 11), generator=generator)
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[1, 8:] = False
    ids[1, 8:] = pad
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize("name", list(CASES))
def test_hidden_states_and_logits_match(name: str, tmp_path: Path) -> None:
    hf = _hf_model(name, tmp_path)
    loaded = load_hf_dir(tmp_path)
    ours = build_pretraining_model(loaded.config, loaded.objective).eval()
    missing = set(ours.state_dict()) - set(loaded.weights)
    # Only ELECTRA's generator is absent from a discriminator checkpoint.
    assert all(key.startswith("generator") for key in missing), sorted(missing)[:5]
    ours.load_state_dict(loaded.weights, strict=False)
    batch = _inputs(loaded.config.vocab_size, loaded.config.pad_token_id)
    valid = batch["attention_mask"]
    extra = (
        {"token_type_ids": (torch.arange(11) > 5).long().expand(2, -1)} if name.startswith(("bert", "albert")) else {}
    )
    with torch.no_grad():
        expected = hf(**batch, **extra, output_hidden_states=True)
        encoded = encode(
            ours.encoder, batch["input_ids"], batch["attention_mask"], extra.get("token_type_ids"), hidden_states=True
        )
    hf_hidden = list(expected.hidden_states)
    assert len(hf_hidden) == len(encoded.hidden_states) == loaded.config.num_layers + 1
    for layer, (theirs, mine) in enumerate(zip(hf_hidden, encoded.hidden_states, strict=True)):
        diff = (theirs - mine)[valid].abs().max().item()
        assert diff <= TOL, f"{name}: hidden state {layer} differs by {diff}"
    with torch.no_grad():
        if name == "electra":
            logits = ours.discriminate(batch["input_ids"], batch["attention_mask"])
            assert (expected.logits - logits)[valid].abs().max().item() <= TOL
            return
        out = ours(batch["input_ids"], batch["attention_mask"], token_type_ids=extra.get("token_type_ids"))
    hf_mlm = expected.prediction_logits if hasattr(expected, "prediction_logits") else expected.logits
    mlm = out["mlm_logits"].view(hf_mlm.shape)
    assert (hf_mlm - mlm)[valid].abs().max().item() <= TOL
    if "pair_logits" in out:
        hf_pair = expected.seq_relationship_logits if name.startswith("bert") else expected.sop_logits
        assert (hf_pair - out["pair_logits"]).abs().max().item() <= TOL


@pytest.mark.parametrize("name", list(CASES))
def test_round_trip_is_exact(name: str, tmp_path: Path) -> None:
    hf = _hf_model(name, tmp_path)
    loaded = load_hf_dir(tmp_path)
    config, state = to_hf_checkpoint(loaded.config, loaded.weights, "pretraining")
    assert config["architectures"] == [type(hf).__name__]
    from safetensors.torch import load_file

    saved = load_file(str(tmp_path / "model.safetensors"))
    assert set(state) == set(saved)
    for key, value in saved.items():
        assert torch.equal(state[key], value), key
    # The written config rebuilds the same HF architecture.
    rebuilt = transformers.AutoConfig.for_model(**{k: v for k, v in config.items() if k != "architectures"})
    for field in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        assert getattr(rebuilt, field) == getattr(hf.config, field)

"""ModernBERT against transformers' own (an independent implementation): a tiny random ModernBert* model in fp32,
with a sliding window (local_attention 8) much shorter than the sequences (40 tokens), padding in the batch and
global attention every other layer, loaded into bertkit gives the same hidden states and MLM logits (<= 1e-4);
HF -> bertkit -> HF reproduces every tensor exactly; bertkit's export loads in transformers with no missing or
unexpected keys; and the task heads (sequence classification with [CLS] or mean pooling, token classification,
question answering) give the same logits in both directions. Both of bertkit's paths are compared: padded, and
unpadded (engine.unpad: the real tokens packed, varlen attention with each layer's window), at the real tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from encoder_helpers import encode
from safetensors.torch import load_file

transformers = pytest.importorskip("transformers")

from bertkit.engine.unpad import configure_unpad  # noqa: E402
from bertkit.errors import BertkitError  # noqa: E402
from bertkit.interop import hf_modernbert  # noqa: E402
from bertkit.interop.hf import to_hf_checkpoint, to_hf_task_checkpoint  # noqa: E402
from bertkit.interop.keymap import to_ours  # noqa: E402
from bertkit.modelio.hf_dir import load_hf_dir, write_hf_dir  # noqa: E402
from bertkit.models import modernbert as modernbert_module  # noqa: E402
from bertkit.models.pretraining import build_encoder, build_pretraining_model  # noqa: E402
from bertkit.tasks.classification import SequenceClassifier  # noqa: E402
from bertkit.tasks.qa import QuestionAnswerer  # noqa: E402
from bertkit.tasks.token_classification import TokenClassifier  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

TOL = 1e-4
SEQ, PAD = 40, 0
# 5 layers, global every 2nd (0, 2, 4 global; 1, 3 sliding), window 8 = 4 tokens each side, thetas not the
# defaults so that swapping them would show.
SMALL = dict(vocab_size=101, hidden_size=32, intermediate_size=40, num_hidden_layers=5, num_attention_heads=4,
             max_position_embeddings=64, local_attention=8, global_attn_every_n_layers=2, global_rope_theta=500.0,
             local_rope_theta=50.0, pad_token_id=PAD, bos_token_id=None, eos_token_id=None, cls_token_id=None,
             sep_token_id=None, attn_implementation="eager")  # fmt: skip


def _config(**extra) -> object:
    return transformers.ModernBertConfig(**{**SMALL, **extra})


def _perturbed(model):
    """Random init leaves norms at identity and the decoder bias at zero; perturb every tensor so the map is
    tested, then eval (no dropout)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    return model.eval()


def _inputs() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, SMALL["vocab_size"], (3, SEQ), generator=generator)
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[1, 25:] = False  # padding: 15 tokens, more than the window
    mask[2, 9:] = False  # a short row: most of its padding is beyond every real token's window
    ids[~mask] = PAD
    return {"input_ids": ids, "attention_mask": mask}


@pytest.fixture(scope="module")
def hf_mlm(tmp_path_factory: pytest.TempPathFactory):
    torch.manual_seed(0)
    model = _perturbed(transformers.ModernBertForMaskedLM(_config()))
    folder = tmp_path_factory.mktemp("modernbert-mlm")
    model.save_pretrained(folder)
    return model, folder


@pytest.mark.parametrize("unpad", [False, True])
def test_hidden_states_and_mlm_logits_match(hf_mlm, unpad: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    hf, folder = hf_mlm
    packs: list[int] = []
    real_pack = modernbert_module.pack
    monkeypatch.setattr(modernbert_module, "pack", lambda *a: packs.append(1) or real_pack(*a))
    loaded = load_hf_dir(folder)
    cfg = loaded.config
    assert (cfg.family, cfg.local_attention, cfg.global_attn_every_n_layers) == ("modernbert", 8, 2)
    assert (cfg.global_rope_theta, cfg.local_rope_theta) == (500.0, 50.0)
    assert [cfg.is_global_layer(i) for i in range(5)] == [True, False, True, False, True]
    ours = build_pretraining_model(cfg, loaded.objective).eval()
    ours.load_state_dict(loaded.weights, strict=True)
    configure_unpad(ours, unpad)
    batch = _inputs()
    valid = batch["attention_mask"]
    with torch.no_grad():
        expected = hf(**batch, output_hidden_states=True)
        encoded = encode(ours.encoder, batch["input_ids"], batch["attention_mask"], hidden_states=True)
        out = ours(batch["input_ids"], batch["attention_mask"])
    theirs = list(expected.hidden_states)
    assert len(theirs) == len(encoded.hidden_states) == cfg.num_layers + 1
    # transformers' last entry is after the final norm; bertkit's hidden_states are every layer's own output
    # (as its other pre-norm encoders'), and the normalised one is last_hidden_state.
    mine_all = [*encoded.hidden_states[:-1], encoded.last_hidden_state]
    for layer, (their, mine) in enumerate(zip(theirs, mine_all, strict=True)):
        diff = (their - mine)[valid].abs().max().item()
        assert diff <= TOL, f"hidden state {layer} differs by {diff}"
    logits = out["mlm_logits"].view(expected.logits.shape)
    assert (expected.logits - logits)[valid].abs().max().item() <= TOL
    assert torch.isfinite(encoded.last_hidden_state).all()  # padding rows too: no NaN anywhere
    assert bool(packs) == unpad, "engine.unpad chose the wrong path"
    # The window matters: with it widened past the sequence, bertkit's outputs move (the test can fail).
    wide = build_pretraining_model(cfg.model_copy(update={"local_attention": 2 * SEQ}), loaded.objective).eval()
    wide.load_state_dict(loaded.weights)
    configure_unpad(wide, unpad)
    with torch.no_grad():
        widened = wide(batch["input_ids"], batch["attention_mask"])["mlm_logits"].view(expected.logits.shape)
    assert (expected.logits - widened)[valid].abs().max().item() > 1e-2


def test_explicit_attention_path_equals_sdpa(hf_mlm) -> None:
    """The path distillation takes (scores and probabilities) computes what SDPA does, window included, and what
    the packed path does."""
    _, folder = hf_mlm
    loaded = load_hf_dir(folder)
    encoder = build_encoder(loaded.config).eval()
    encoder.load_state_dict({k.removeprefix("encoder."): v for k, v in loaded.weights.items() if "encoder." in k})
    batch = _inputs()
    valid = batch["attention_mask"]
    with torch.no_grad():
        slow = encode(encoder, batch["input_ids"], batch["attention_mask"], attentions=True)
        for unpad in (False, True):
            configure_unpad(encoder, unpad)
            fast = encoder(batch["input_ids"], batch["attention_mask"])
            assert (fast.last_hidden_state - slow.last_hidden_state)[valid].abs().max().item() <= 1e-5
    probs = slow.attentions[1]  # a sliding layer: no weight outside |i - j| <= 4 for real queries
    far = (torch.arange(SEQ)[:, None] - torch.arange(SEQ)[None, :]).abs() > 4
    assert probs[0][:, far].abs().max().item() == 0.0 and len(slow.attention_scores) == 5


def test_round_trip_is_exact(hf_mlm) -> None:
    hf, folder = hf_mlm
    loaded = load_hf_dir(folder)
    config, state = to_hf_checkpoint(loaded.config, loaded.weights, "pretraining")
    assert config["architectures"] == ["ModernBertForMaskedLM"]
    saved = load_file(str(folder / "model.safetensors"))
    saved = {k: v for k, v in saved.items() if k != "decoder.weight"}  # the tied copy, if stored
    assert set(state) == set(saved)
    for key, value in saved.items():
        assert torch.equal(state[key], value), key


@pytest.mark.parametrize("head", ["pretraining", "base"])
def test_export_loads_in_transformers_with_no_missing_keys(hf_mlm, head: str, tmp_path: Path) -> None:
    hf, folder = hf_mlm
    loaded = load_hf_dir(folder)
    config, state = to_hf_checkpoint(loaded.config, loaded.weights, head)  # type: ignore[arg-type]
    write_hf_dir(tmp_path, config, state)
    auto = transformers.AutoModelForMaskedLM if head == "pretraining" else transformers.AutoModel
    model, info = auto.from_pretrained(tmp_path, output_loading_info=True, attn_implementation="sdpa")
    assert type(model).__name__ == config["architectures"][0]
    assert {k: v for k, v in info.items() if v and k != "error_msgs"} == {}, info
    assert model.config.layer_types == hf.config.layer_types
    assert model.config.rope_parameters["sliding_attention"]["rope_theta"] == 50.0
    batch = _inputs()
    with torch.no_grad():
        reference = hf(**batch) if head == "pretraining" else hf.model(**batch)
        exported = model.eval()(**batch)
    field = "logits" if head == "pretraining" else "last_hidden_state"
    valid = batch["attention_mask"]
    assert (getattr(reference, field) - getattr(exported, field))[valid].abs().max().item() <= TOL


def _import_task(model, architecture_prefix: str, last: str) -> dict[str, torch.Tensor]:
    """A transformers task model's weights in bertkit's key space, through the ModernBERT key map."""
    cfg = hf_modernbert.config_from_hf(model.config.to_dict())
    entries = hf_modernbert.encoder_entries(cfg, architecture_prefix, False)
    entries += hf_modernbert.task_head_entries(cfg, last)
    state = model.state_dict()
    weights = to_ours(entries, state, "hf")
    assert {key for e in entries for key in e.hf} == set(state)  # every HF tensor placed
    return weights


BIASES = dict.fromkeys(("attention_bias", "mlp_bias", "norm_bias", "classifier_bias"), True)


@pytest.mark.parametrize(("pool", "bias"), [("cls", False), ("mean", False), ("cls", True)])
def test_sequence_classifier_both_ways(pool: str, bias: bool, tmp_path: Path) -> None:
    torch.manual_seed(0)
    config = _config(num_labels=3, classifier_pooling=pool, id2label={0: "a", 1: "b", 2: "c"}, label2id=None,
                     **(BIASES if bias else {}))  # fmt: skip
    hf = _perturbed(transformers.ModernBertForSequenceClassification(config))
    hf.save_pretrained(tmp_path / "hf")
    loaded = load_hf_dir(tmp_path / "hf")  # the importer reads the head and the pooling
    assert (loaded.task, loaded.labels, loaded.pool) == ("sequence-classification", ["a", "b", "c"], pool)
    assert loaded.config.bias is bias
    ours = SequenceClassifier(build_encoder(loaded.config), 3, 0.0, loaded.pool).eval()
    ours.load_state_dict(loaded.weights, strict=True)
    batch = _inputs()
    with torch.no_grad():
        expected = hf(**batch).logits
        got = ours(batch["input_ids"], batch["attention_mask"])["logits"]
    assert (expected - got).abs().max().item() <= TOL
    # Export: the fine-tuned model as ModernBertForSequenceClassification, loaded with nothing missing.
    config_out, state = to_hf_task_checkpoint(loaded.config, ours.state_dict(), "sequence-classification",
                                              ["a", "b", "c"], pool)  # fmt: skip
    assert config_out["classifier_pooling"] == pool
    (tmp_path / "out").mkdir()
    write_hf_dir(tmp_path / "out", config_out, state)
    model, info = transformers.AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "out", output_loading_info=True
    )
    assert {k: v for k, v in info.items() if v and k != "error_msgs"} == {}, info
    with torch.no_grad():
        assert (model.eval()(**batch).logits - expected).abs().max().item() <= TOL


@pytest.mark.parametrize("kind", ["token-classification", "question-answering"])
def test_token_and_qa_heads_both_ways(kind: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    qa = kind == "question-answering"
    cls = transformers.ModernBertForQuestionAnswering if qa else transformers.ModernBertForTokenClassification
    hf = _perturbed(cls(_config(num_labels=2 if qa else 5)))
    weights = _import_task(hf, "model.", "qa_outputs" if qa else "classifier")
    cfg = hf_modernbert.config_from_hf(hf.config.to_dict())
    ours = (QuestionAnswerer(build_encoder(cfg)) if qa else TokenClassifier(build_encoder(cfg), 5, 0.0)).eval()
    ours.load_state_dict(weights, strict=True)
    batch = _inputs()
    valid = batch["attention_mask"]
    with torch.no_grad():
        expected = hf(**batch)
        got = ours(batch["input_ids"], batch["attention_mask"])
    pairs = [("start_logits", "start_logits"), ("end_logits", "end_logits")] if qa else [("logits", "logits")]
    for theirs, mine in pairs:
        assert (getattr(expected, theirs) - got[mine])[valid].abs().max().item() <= TOL
    labels = [] if qa else [f"T{i}" for i in range(5)]
    config_out, state = to_hf_task_checkpoint(cfg, ours.state_dict(), kind, labels)
    write_hf_dir(tmp_path, config_out, state)
    auto = transformers.AutoModelForQuestionAnswering if qa else transformers.AutoModelForTokenClassification
    model, info = auto.from_pretrained(tmp_path, output_loading_info=True)
    assert type(model) is cls and {k: v for k, v in info.items() if v and k != "error_msgs"} == {}, info
    with torch.no_grad():
        again = model.eval()(**batch)
    for theirs, _ in pairs:
        assert (getattr(expected, theirs) - getattr(again, theirs))[valid].abs().max().item() <= TOL


def test_biases_both_ways(tmp_path: Path) -> None:
    """model.bias: a ModernBERT with transformers' four bias flags set gives the same hidden states and MLM logits in
    bertkit (padded and unpadded), and exports back to the same tensors and flags."""
    torch.manual_seed(0)
    hf = _perturbed(transformers.ModernBertForMaskedLM(_config(**BIASES)))
    hf.save_pretrained(tmp_path / "hf")
    loaded = load_hf_dir(tmp_path / "hf")
    assert loaded.config.bias is True
    assert any(key.endswith("attention.qkv.bias") for key in loaded.weights)
    ours = build_pretraining_model(loaded.config, loaded.objective).eval()
    ours.load_state_dict(loaded.weights, strict=True)
    batch = _inputs()
    valid = batch["attention_mask"]
    with torch.no_grad():
        expected = hf(**batch).logits
        for unpad in (False, True):
            configure_unpad(ours, unpad)
            logits = ours(batch["input_ids"], batch["attention_mask"])["mlm_logits"].view(expected.shape)
            assert (expected - logits)[valid].abs().max().item() <= TOL
        # The biases are read, not dropped: zeroed, the logits move (the test can fail).
        for name, param in ours.named_parameters():
            if name.endswith(".bias") and name != "mlm_head.bias":
                param.zero_()
        moved = ours(batch["input_ids"], batch["attention_mask"])["mlm_logits"].view(expected.shape)
    assert (expected - moved)[valid].abs().max().item() > 1e-2
    config, state = to_hf_checkpoint(loaded.config, loaded.weights, "pretraining")
    assert all(config[name] for name in BIASES)
    saved = {k: v for k, v in load_file(str(tmp_path / "hf" / "model.safetensors")).items() if k != "decoder.weight"}
    assert set(state) == set(saved) and all(torch.equal(state[k], v) for k, v in saved.items())


def test_checkpoints_bertkit_cannot_build_are_one_error(tmp_path: Path) -> None:
    """Biases on some parts only (bertkit's model.bias sets all four), or a layer pattern bertkit does not build,
    are refused by name."""
    config = json.loads(_config().to_json_string())
    with pytest.raises(BertkitError, match="sets norm_bias but not the others"):
        hf_modernbert.config_from_hf({**config, "norm_bias": True})
    with pytest.raises(BertkitError, match="layer_types are not 'global every n-th layer"):
        hf_modernbert.config_from_hf({**config, "layer_types": ["sliding_attention"] + config["layer_types"][1:]})

"""Unpadding (bertkit/models/unpad.py): the packed path gives the padded path's outputs and gradients for every
family that takes it (ModernBERT's sliding windows and rotary positions included), keeps packed documents apart,
and engine.unpad=true is refused where it cannot apply."""

from __future__ import annotations

import copy

import pytest
import torch
from encoder_helpers import encode

from bertkit.config.recipe import load_recipe
from bertkit.config.schema import EngineConfig, ModelConfig, ObjectiveConfig
from bertkit.engine.unpad import configure_unpad
from bertkit.errors import BertkitError
from bertkit.models import bert as bert_module
from bertkit.models import modernbert as modernbert_module
from bertkit.models.bert import BertEncoder
from bertkit.models.modernbert import ModernBertEncoder
from bertkit.models.pretraining import build_encoder, build_pretraining_model, default_objective
from bertkit.models.unpad import document_positions, pack, repad, unpad

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = 120
# Very different lengths in one batch (the longest fills the row), right-padded as every loader pads.
LENGTHS = [3, 40, 17, 1, 29]


def _family_cfg(recipe: str, **update: object) -> ModelConfig:
    """The tiny recipe's shape, smaller still, without dropout (the two paths draw different dropout masks)."""
    model = load_recipe(recipe).model  # type: ignore[union-attr]
    changes = dict(vocab_size=VOCAB, num_layers=2, max_position_embeddings=64, hidden_dropout=0.0,
                   attention_dropout=0.0)  # fmt: skip
    return ModelConfig.model_validate({**model.model_dump(), **changes, **update})


FAMILIES = {
    "bert": _family_cfg("bert-tiny"),
    "bert-pre-ln": _family_cfg("bert-tiny", norm="pre"),
    "roberta": _family_cfg("roberta-tiny"),
    "spanbert": _family_cfg("spanbert-tiny"),
    "distilbert": _family_cfg("distilbert-tiny"),
    "albert": _family_cfg("albert-tiny", num_layers=3),
    "albert-shared-ffn": _family_cfg("albert-tiny", num_layers=3, sharing="shared-ffn"),
    "electra": _family_cfg("electra-tiny"),
    # Layers 0 and 3 global, 1 and 2 an 8-token window (4 each side): LENGTHS' longer rows reach past it. Thetas
    # apart from the defaults and each other, so that a swapped or unrestarted rotation would show.
    "modernbert": _family_cfg("modernbert-tiny", local_attention=8, global_rope_theta=500.0, local_rope_theta=50.0),
}


def _count_packs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records every batch an encoder packs (the packed path was taken), whichever family's module packs it."""
    packs: list[int] = []
    for module in (bert_module, modernbert_module):
        real_pack = module.pack
        monkeypatch.setattr(module, "pack", lambda *a, _real=real_pack: packs.append(1) or _real(*a))
    return packs


def _batch(lengths: list[int] = LENGTHS, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.randint(5, VOCAB, (len(lengths), width), generator=g)
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
    types = torch.zeros_like(ids)
    types[:, width // 2 :] = 1
    return {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": types * mask}


def _encoder(cfg: ModelConfig) -> BertEncoder | ModernBertEncoder:
    torch.manual_seed(0)
    encoder = build_encoder(cfg)
    assert isinstance(encoder, BertEncoder | ModernBertEncoder)
    return encoder.eval()


def _run(encoder: BertEncoder | ModernBertEncoder, mode: bool | str, batch: dict[str, torch.Tensor], **kwargs: object):
    configure_unpad(encoder, mode)  # type: ignore[arg-type]
    type_vocab = encoder.config.type_vocab_size
    types = batch["token_type_ids"] % type_vocab if type_vocab else None  # RoBERTa has one type, DistilBERT none
    return encode(encoder, batch["input_ids"], batch["attention_mask"], types, **kwargs)


@pytest.mark.parametrize("family", FAMILIES)
def test_unpadded_outputs_equal_padded(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    encoder, batch = _encoder(FAMILIES[family]), _batch()
    real = batch["attention_mask"].bool()
    padded = _run(encoder, False, batch, hidden_states=True)
    packs = _count_packs(monkeypatch)
    unpadded = _run(encoder, True, batch, hidden_states=True)
    assert packs, "the packed path was not taken"
    torch.testing.assert_close(unpadded.last_hidden_state[real], padded.last_hidden_state[real], atol=1e-5, rtol=0)
    assert len(unpadded.hidden_states) == len(padded.hidden_states) == FAMILIES[family].num_layers + 1
    for mine, theirs in zip(unpadded.hidden_states, padded.hidden_states, strict=True):
        torch.testing.assert_close(mine[real], theirs[real], atol=1e-5, rtol=0)
    if padded.pooled is not None:
        torch.testing.assert_close(unpadded.pooled, padded.pooled, atol=1e-5, rtol=0)
    # Padding rows come back as zeros, never as stale values a head could read by mistake.
    assert not unpadded.last_hidden_state[~real].any()


def test_auto_unpads_only_batches_with_padding(monkeypatch: pytest.MonkeyPatch) -> None:
    encoder = _encoder(FAMILIES["bert"])
    packs: list[int] = []
    real_pack = bert_module.pack
    monkeypatch.setattr(bert_module, "pack", lambda *a: packs.append(1) or real_pack(*a))
    _run(encoder, "auto", _batch([8, 8]))
    assert not packs
    _run(encoder, "auto", _batch([8, 3]))
    assert len(packs) == 1
    _run(encoder, False, _batch([8, 3]))  # engine.unpad=false: the padded path
    assert len(packs) == 1


def test_attention_weights_fall_back_to_the_padded_path() -> None:
    """Distillation reads (B, heads, T, T) probabilities and scores, which only the padded path computes."""
    encoder, batch = _encoder(FAMILIES["bert"]), _batch()
    out = _run(encoder, True, batch, attentions=True)
    reference = _run(encoder, False, batch, attentions=True)
    assert out.attentions[0].shape == (len(LENGTHS), 2, max(LENGTHS), max(LENGTHS))
    torch.testing.assert_close(out.attentions[1], reference.attentions[1])
    minilm = _run(encoder, True, batch, stop_at_last_attention=True)
    assert minilm.attention_scores[-1] is not None


@pytest.mark.parametrize("family", ["bert", "roberta", "albert", "electra", "distilbert", "modernbert"])
def test_one_training_step_gives_the_same_weights(family: str) -> None:
    """Pretraining (MLM, and ELECTRA's generator + discriminator) one SGD step from the same weights and the
    same masks: the MLM logits, the gradients and the weights after the step agree. (SGD, not Adam: Adam's first
    step moves every weight by +-lr whatever its gradient's size, so a 1e-12 rounding difference around 0 flips a
    sign.)"""
    cfg = FAMILIES[family]
    objective = default_objective(cfg) if family == "electra" else ObjectiveConfig()
    torch.manual_seed(0)
    first = build_pretraining_model(cfg, objective)
    models = {mode: copy.deepcopy(first) for mode in (False, True)}
    batch = _batch()
    if cfg.type_vocab_size:
        batch["token_type_ids"] %= cfg.type_vocab_size
    else:
        del batch["token_type_ids"]
    flat = batch["attention_mask"].reshape(-1).nonzero().squeeze(1)
    positions = flat[::3]  # every third real token is a target
    labels = batch["input_ids"].reshape(-1)[positions]
    grads, logits = {}, {}
    for mode, model in models.items():
        configure_unpad(model, mode)
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        torch.manual_seed(1)  # ELECTRA samples its replacements: the same draws on both paths
        out = model(**batch, mlm_positions=positions, mlm_labels=labels)
        logits[mode] = out["mlm_logits"].detach()
        loss = torch.nn.functional.cross_entropy(out["mlm_logits"], labels)
        if "rtd_logits" in out:
            real = batch["attention_mask"].bool()
            loss = loss + torch.nn.functional.binary_cross_entropy_with_logits(
                out["rtd_logits"][real], out["replaced"][real].float()
            )
        loss.backward()
        grads[mode] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        optimizer.step()
    torch.testing.assert_close(logits[True], logits[False], atol=1e-5, rtol=0)
    assert grads[True].keys() == grads[False].keys()
    for name in grads[False]:
        torch.testing.assert_close(grads[True][name], grads[False][name], atol=1e-6, rtol=1e-4, msg=name)
    for (name, after), before in zip(models[True].named_parameters(), models[False].parameters(), strict=True):
        torch.testing.assert_close(after, before, atol=1e-6, rtol=1e-5, msg=name)


def test_pack_positions_restart_per_sequence_and_document() -> None:
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    docs = torch.tensor([[1, 1, 2, 2, 0], [1, 2, 2, 2, 3]])
    packing = pack(mask, docs)
    assert packing.cu_seqlens.tolist() == [0, 2, 4, 5, 8, 9]
    assert packing.positions.tolist() == [0, 1, 0, 1, 0, 0, 1, 2, 0]
    assert packing.max_seqlen == 3
    assert document_positions(mask, docs)[1].tolist() == [0, 0, 1, 2, 0]
    x = torch.randn(2, 5, 3)
    assert torch.equal(repad(unpad(x, packing), packing)[mask.bool()], x[mask.bool()])


def _documents_batch(seed: int) -> dict[str, torch.Tensor]:
    """Two packed rows: [doc 1 (7) | doc 2 (12) | doc 3 (5)] and [doc 1 (20) | padding (4)]."""
    batch = _batch([24, 20], seed=0)
    docs = torch.zeros(2, 24, dtype=torch.long)
    docs[0, :7], docs[0, 7:19], docs[0, 19:] = 1, 2, 3
    docs[1, :20] = 1
    batch["document_ids"] = docs
    batch["token_type_ids"].zero_()
    if seed:
        # Rewrite document 1 of row 0 only.
        batch["input_ids"][0, :7] = torch.randint(5, VOCAB, (7,), generator=torch.Generator().manual_seed(seed))
    return batch


@pytest.mark.parametrize("family", ["roberta", "modernbert"])
@pytest.mark.parametrize("mode", [True, False])
def test_attention_does_not_cross_documents(mode: bool, family: str) -> None:
    """ModernBERT's documents (12 and 20 tokens) are longer than its 8-token window: its local layers keep
    to the window and the document at once, its rotations restart at each document."""
    encoder = _encoder(FAMILIES[family])
    batch, changed = _documents_batch(0), _documents_batch(1)
    before = _run(encoder, mode, batch, document_ids=batch["document_ids"]).last_hidden_state
    after = _run(encoder, mode, changed, document_ids=changed["document_ids"]).last_hidden_state
    assert not torch.allclose(after[0, :7], before[0, :7])
    torch.testing.assert_close(after[0, 7:], before[0, 7:], atol=1e-6, rtol=0)
    torch.testing.assert_close(after[1], before[1], atol=1e-6, rtol=0)
    # A packed document gives what it gives alone in a row of its own (positions restart at each document).
    alone = _batch([12], seed=0)
    alone["input_ids"][0] = batch["input_ids"][0, 7:19]
    alone["token_type_ids"].zero_()
    single = _run(encoder, mode, alone).last_hidden_state
    torch.testing.assert_close(before[0, 7:19], single[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_documents_packed_equal_padded(family: str) -> None:
    encoder, batch = _encoder(FAMILIES[family]), _documents_batch(0)
    real = batch["attention_mask"].bool()
    packed = _run(encoder, True, batch, document_ids=batch["document_ids"])
    padded = _run(encoder, False, batch, document_ids=batch["document_ids"])
    torch.testing.assert_close(packed.last_hidden_state[real], padded.last_hidden_state[real], atol=1e-5, rtol=0)


def test_unpad_true_is_refused_where_it_cannot_apply() -> None:
    refused = (
        ("xlnet-tiny", "model.family=xlnet"),
        ("bigbird-tiny", "model.attention=block_sparse"),
    )
    for recipe, fragment in refused:
        with pytest.raises(BertkitError) as err:
            load_recipe(recipe, ["engine.unpad=true"])
        message = str(err.value)
        assert "\n" not in message.strip() and fragment in message and "engine.unpad=auto or false" in message
        load_recipe(recipe, ["engine.unpad=auto"])  # auto leaves them padded, no error
    # A fine-tuning recipe has no model section: the model is refused when the loop configures it.
    xlnet = build_encoder(load_recipe("xlnet-tiny").model.model_copy(update={"vocab_size": VOCAB}))  # type: ignore[union-attr]
    with pytest.raises(BertkitError, match=r"engine.unpad=true: .*xlnet.*set engine.unpad=auto or false"):
        configure_unpad(xlnet, True)
    assert configure_unpad(xlnet, "auto") == 0
    # ModernBERT takes the packed path: engine.unpad=true is accepted, in the recipe and on the model.
    load_recipe("modernbert-tiny", ["engine.unpad=true"])
    modernbert = build_pretraining_model(FAMILIES["modernbert"])
    assert configure_unpad(modernbert, True) == 1 and modernbert.encoder.unpad is True
    assert EngineConfig(unpad="auto").unpad == "auto" and EngineConfig(unpad=False).unpad is False


@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_task_heads_read_the_same_outputs_unpadded(family: str) -> None:
    """Fine-tuning and inference heads: the classifier (pooled [CLS], mean pooling), token classification and
    QA (every token), and embed's pooled layer give the padded path's outputs at the real tokens."""
    from bertkit.models.pooling import PooledEncoder
    from bertkit.tasks.classification import SequenceClassifier
    from bertkit.tasks.qa import QuestionAnswerer
    from bertkit.tasks.token_classification import TokenClassifier

    encoder, batch = _encoder(FAMILIES[family]), _batch()
    if not encoder.config.type_vocab_size:
        batch["token_type_ids"] = None  # type: ignore[assignment]  (ModernBERT has no segments)
    real = batch["attention_mask"].bool()
    torch.manual_seed(0)
    heads = {
        "cls": SequenceClassifier(encoder, 3, 0.0),
        "mean": SequenceClassifier(encoder, 3, 0.0, pool="mean"),
        "tokens": TokenClassifier(encoder, 5, 0.0),
        "qa": QuestionAnswerer(encoder),
        "embed-layer-1": PooledEncoder(encoder, layer=1),
    }
    for name, head in heads.items():
        outputs = {}
        for mode in (False, True):
            configure_unpad(head, mode)
            outputs[mode] = head.eval()(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        for key, value in outputs[False].items():
            mine = outputs[True][key]
            if value.shape[:2] == real.shape:
                mine, value = mine[real], value[real]
            torch.testing.assert_close(mine, value, atol=1e-5, rtol=0, msg=f"{name}: {key}")


@pytest.mark.parametrize("window", [(-1, -1), (2, 2), (3, 0)])
def test_varlen_attention_matches_per_sequence_attention(window: tuple[int, int]) -> None:
    """The reusable kernel on its own (a new family calls it directly), with ModernBERT-style local windows:
    each sequence attended alone, with an explicit band mask, gives the same rows."""
    from bertkit.models.unpad import band_mask, varlen_attention

    g = torch.Generator().manual_seed(0)
    lengths = [5, 1, 9, 3]
    mask = (torch.arange(9)[None, :] < torch.tensor(lengths)[:, None]).long()
    packing = pack(mask)
    q, k, v = (torch.randn(sum(lengths), 2, 4, generator=g).requires_grad_() for _ in range(3))
    out = varlen_attention(q, k, v, packing, window=window)
    out.sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in (q, k, v))
    start = 0
    for length in lengths:
        part = slice(start, start + length)
        args = (x[part].transpose(0, 1) for x in (q, k, v))
        reference = torch.nn.functional.scaled_dot_product_attention(*args, attn_mask=band_mask(length, window, "cpu"))
        torch.testing.assert_close(out[part].detach(), reference.transpose(0, 1).detach(), atol=1e-6, rtol=0)
        start += length


@pytest.mark.parametrize("window", [(-1, -1), (2, 2)])
def test_flash_path_runs_on_a_torch_whose_kernel_has_no_window(
    window: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's first varlen kernels take no `window_size`. With such a kernel (a stand-in with that signature that
    attends per sequence, reached as on a CUDA half-precision step): full attention calls it without the argument,
    and a local window falls back to the padded path; both give per-sequence attention's rows."""
    import torch.nn.attention.varlen as varlen_module

    from bertkit.models import unpad
    from bertkit.models.unpad import band_mask, varlen_attention

    called = []

    def old_kernel(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None):  # noqa: ANN001, ANN202
        called.append(True)
        rows = []
        for first, stop in zip(cu_seq_q[:-1].tolist(), cu_seq_q[1:].tolist(), strict=True):
            part = (x[first:stop].transpose(0, 1) for x in (query, key, value))
            rows.append(torch.nn.functional.scaled_dot_product_attention(*part).transpose(0, 1))
        return torch.cat(rows)

    monkeypatch.setattr(varlen_module, "varlen_attn", old_kernel)
    monkeypatch.setattr(unpad, "_flash_varlen_usable", lambda q, dropout_p: True)
    g = torch.Generator().manual_seed(0)
    lengths = [5, 1, 9, 3]
    packing = pack((torch.arange(9)[None, :] < torch.tensor(lengths)[:, None]).long())
    q, k, v = (torch.randn(sum(lengths), 2, 4, generator=g) for _ in range(3))
    out = varlen_attention(q, k, v, packing, window=window)
    assert called == ([True] if window == (-1, -1) else [])
    start = 0
    for length in lengths:
        args = (x[start : start + length].transpose(0, 1) for x in (q, k, v))
        reference = torch.nn.functional.scaled_dot_product_attention(*args, attn_mask=band_mask(length, window, "cpu"))
        torch.testing.assert_close(out[start : start + length], reference.transpose(0, 1), atol=1e-6, rtol=0)
        start += length

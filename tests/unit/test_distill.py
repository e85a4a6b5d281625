"""Distillation building blocks: each loss against a direct reference computation on explicitly selected
tensors, its count, its independence from how a batch is split; layer maps; the student's projections and
its initialisation from a teacher; the value vectors the encoder exposes for MiniLM.

Loss math runs on random tensors (no text involved); models are tiny random BERTs.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from encoder_helpers import encode

from bertkit.config.schema import ModelConfig, ObjectiveConfig
from bertkit.distill import losses as L
from bertkit.distill.layer_map import (
    distilbert_init_layers,
    resolve_layer_map,
    uniform_layer_map,
    validate_layer_map,
)
from bertkit.distill.student import DistillStudent, check_compatible, init_from_teacher
from bertkit.engine.checkpoint import load_state
from bertkit.errors import BertkitError
from bertkit.modelio.weights import read_weights, save_weights
from bertkit.models.bert import BertEncoder
from bertkit.models.capture import LayerCapture
from bertkit.models.pretraining import PretrainingModel
from bertkit.tasks.classification import SequenceClassifier

pytestmark = pytest.mark.usefixtures("one_thread")


TINY = dict(vocab_size=60, hidden_size=32, num_layers=4, num_heads=4, intermediate_size=64,
            max_position_embeddings=16, hidden_dropout=0.0, attention_dropout=0.0)  # fmt: skip
LENGTHS = [7, 4, 9, 2]  # non-padding tokens per sequence; T = 9
HEADS = 4


def _mask(lengths: list[int] = LENGTHS) -> torch.Tensor:
    return torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]


def _world(seed: int = 0) -> dict[str, torch.Tensor]:
    """Random student/teacher tensors for a batch of len(LENGTHS) sequences, with padding at the ends."""
    g = torch.Generator().manual_seed(seed)
    b, t, vocab, labels = len(LENGTHS), max(LENGTHS), 11, 3
    attention_mask = _mask()
    masked = (torch.rand(b, t, generator=g) < 0.4) & attention_mask
    masked[:, 0] = True  # every sequence has a masked position, so each half of a split has some
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    return {
        "attention_mask": attention_mask,
        "input_ids": torch.zeros(b, t, dtype=torch.long),
        "masked": masked,
        "s_vocab": r(b, t, vocab), "t_vocab": r(b, t, vocab),
        "s_hidden": r(b, t, 16), "t_hidden": r(b, t, 16),
        "s_layers": r(2, b, t, 16), "t_layers": r(2, b, t, 16),
        "s_scores": r(2, b, HEADS, t, t), "t_scores": r(2, b, HEADS, t, t),
        "s_values": r(b, HEADS, t, 8), "t_values": r(b, HEADS, t, 5),
        "s_logits": r(b, labels), "t_logits": r(b, labels),
    }  # fmt: skip


def _positions(masked: torch.Tensor) -> torch.Tensor:
    return masked.reshape(-1).nonzero().squeeze(-1)


def _losses(w: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every loss on a world, keyed as in TARGET_COUNTS."""
    mask, positions = w["attention_mask"], _positions(w["masked"])
    at = lambda x: x.reshape(-1, x.shape[-1])[positions]  # noqa: E731
    return {
        "distilbert_soft_ce": L.distilbert_soft_ce(at(w["s_vocab"]), at(w["t_vocab"]), 2.0),
        "cosine_loss": L.cosine_loss(w["s_hidden"], w["t_hidden"], mask),
        "hidden_mse_loss": L.hidden_mse_loss(list(w["s_layers"]), list(w["t_layers"]), mask),
        "attention_score_mse_loss": L.attention_score_mse_loss(list(w["s_scores"]), list(w["t_scores"]), mask),
        "prediction_soft_ce": L.prediction_soft_ce(w["s_logits"], w["t_logits"], 1.0),
        "attention_kl_loss": L.attention_kl_loss(w["s_scores"][-1], w["t_scores"][-1], mask),
        "value_relation_kl_loss": L.value_relation_kl_loss(w["s_values"], w["t_values"], mask),
    }


def _batch(w: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {
        "attention_mask": w["attention_mask"],
        "input_ids": w["input_ids"],
        "mlm_positions": _positions(w["masked"]),
    }


def _rows(w: dict[str, torch.Tensor], rows: slice) -> dict[str, torch.Tensor]:
    """The same world restricted to some sequences (the layer-stacked tensors keep their layer axis)."""
    stacked = {"s_layers", "t_layers", "s_scores", "t_scores"}
    return {k: v[:, rows] if k in stacked else v[rows] for k, v in w.items()}


# ------------------------------------------------------------------------------------------ reference maths


def test_distilbert_soft_ce_is_t2_times_batchmean_kl() -> None:
    w = _world()
    positions = _positions(w["masked"])
    s, t = (w[k].reshape(-1, 11)[positions] for k in ("s_vocab", "t_vocab"))
    expected = F.kl_div(F.log_softmax(s / 2, -1), F.softmax(t / 2, -1), reduction="batchmean") * 4
    got = L.distilbert_soft_ce(s, t, 2.0) / L.masked_position_count(positions)
    assert torch.allclose(got, expected, atol=1e-6)
    assert L.distilbert_soft_ce(t, t, 2.0).abs() < 1e-5


def test_cosine_loss_is_cosine_embedding_loss_on_real_tokens() -> None:
    w = _world()
    valid = w["attention_mask"]
    s, t = w["s_hidden"][valid], w["t_hidden"][valid]
    expected = F.cosine_embedding_loss(s, t, torch.ones(len(s)))
    got = L.cosine_loss(w["s_hidden"], w["t_hidden"], valid) / L.token_count(valid)
    assert torch.allclose(got, expected, atol=1e-6)


def test_hidden_mse_is_the_sum_over_layers_of_mse_on_real_tokens() -> None:
    w = _world()
    valid = w["attention_mask"]
    expected = sum(F.mse_loss(w["s_layers"][i][valid], w["t_layers"][i][valid]) for i in range(2))
    got = L.hidden_mse_loss(list(w["s_layers"]), list(w["t_layers"]), valid) / L.token_count(valid)
    assert torch.allclose(got, expected, atol=1e-6)


def test_attention_score_mse_averages_heads_and_valid_pairs_then_sums_layers() -> None:
    w = _world()
    expected = torch.zeros(())
    for layer in range(2):
        # Only the n×n block of real tokens of each sequence, all heads: one MSE over them.
        s = torch.cat([w["s_scores"][layer, b, :, :n, :n].reshape(-1) for b, n in enumerate(LENGTHS)])
        t = torch.cat([w["t_scores"][layer, b, :, :n, :n].reshape(-1) for b, n in enumerate(LENGTHS)])
        expected = expected + F.mse_loss(s, t)
    mask = w["attention_mask"]
    got = L.attention_score_mse_loss(list(w["s_scores"]), list(w["t_scores"]), mask) / L.token_pair_count(mask)
    assert torch.allclose(got, expected, atol=1e-6)


def test_prediction_soft_ce_is_cross_entropy_with_soft_targets() -> None:
    w = _world()
    for temperature in (1.0, 3.0):
        target = F.softmax(w["t_logits"] / temperature, -1)
        expected = F.cross_entropy(w["s_logits"] / temperature, target)
        got = L.prediction_soft_ce(w["s_logits"], w["t_logits"], temperature) / L.sequence_count(w["input_ids"])
        assert torch.allclose(got, expected, atol=1e-6)


def _reference_relation_kl(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Mean over heads and real query tokens of KL(teacher ‖ student), each row over the real keys only."""
    total = torch.zeros(())
    for b, n in enumerate(LENGTHS):
        log_s = F.log_softmax(student[b, :, :n, :n], dim=-1)
        log_t = F.log_softmax(teacher[b, :, :n, :n], dim=-1)
        total = total + F.kl_div(log_s, log_t, reduction="sum", log_target=True)
    return total / (HEADS * sum(LENGTHS))


def test_minilm_attention_kl_over_real_keys_and_queries() -> None:
    w = _world()
    s, t, mask = w["s_scores"][-1], w["t_scores"][-1], w["attention_mask"]
    got = L.attention_kl_loss(s, t, mask) / L.token_count(mask)
    assert torch.allclose(got, _reference_relation_kl(s, t), atol=1e-6)
    # Padding rows and columns never count, whatever they hold.
    pad = ~(mask[:, None, :, None] & mask[:, None, None, :])
    noisy = s.masked_fill(pad, 1e4), t.masked_fill(pad, -1e4)
    assert torch.allclose(L.attention_kl_loss(*noisy, mask) / L.token_count(mask), got, atol=1e-6)
    assert L.attention_kl_loss(t, t, mask).abs() < 1e-5


def test_minilm_value_relation_with_different_head_dims() -> None:
    w = _world()
    mask = w["attention_mask"]
    relation = lambda v: v @ v.transpose(-1, -2) / math.sqrt(v.shape[-1])  # noqa: E731
    expected = _reference_relation_kl(relation(w["s_values"]), relation(w["t_values"]))
    got = L.value_relation_kl_loss(w["s_values"], w["t_values"], mask) / L.token_count(mask)
    assert torch.allclose(got, expected, atol=1e-6)
    with pytest.raises(ValueError, match="same number of heads"):
        L.value_relation_kl_loss(w["s_values"][:, :2], w["t_values"], mask)


def test_counts_read_the_batch_alone() -> None:
    batch = _batch(_world())
    assert L.token_count(batch["attention_mask"]) == sum(LENGTHS)
    assert L.token_pair_count(batch["attention_mask"]) == sum(n * n for n in LENGTHS)
    assert L.sequence_count(batch["input_ids"]) == len(LENGTHS)
    assert L.masked_position_count(batch["mlm_positions"]) == len(batch["mlm_positions"])
    assert set(L.TARGET_COUNTS) == set(_losses(_world()))


@pytest.mark.parametrize("name", sorted(L.TARGET_COUNTS))
def test_sum_over_count_is_the_same_for_a_batch_split_in_two(name: str) -> None:
    w = _world(seed=1)
    count = L.TARGET_COUNTS[name]
    whole = _losses(w)[name] / count(_batch(w))
    halves = [_rows(w, slice(0, 1)), _rows(w, slice(1, None))]  # unequal halves: 7 tokens vs 15
    split = sum(_losses(h)[name] for h in halves) / sum(count(_batch(h)) for h in halves)
    assert torch.allclose(whole, split, atol=1e-6)
    # Not a mean of the two halves' means, which would weigh the small half too much.
    assert whole > 0


def test_what_padding_holds_never_counts() -> None:
    w = _world(seed=2)
    pad = ~w["attention_mask"]  # (B, T)
    noisy = dict(w)
    for key in ("s_hidden", "t_hidden", "s_values", "t_values"):
        token_axis = 2 if key.endswith("values") else 1
        where = pad[:, None, :, None] if token_axis == 2 else pad[:, :, None]
        noisy[key] = w[key].masked_fill(where, 1e3 if key.startswith("s") else -1e3)
    noisy["s_layers"] = w["s_layers"].masked_fill(pad[None, :, :, None], 1e3)
    pairs = pad[:, None, :, None] | pad[:, None, None, :]  # a padding query or a padding key
    noisy["s_scores"] = w["s_scores"].masked_fill(pairs[None], 1e3)
    clean, dirty = _losses(w), _losses(noisy)
    for name in clean:
        assert torch.allclose(clean[name], dirty[name], atol=1e-5), name


# --------------------------------------------------------------------------------------------- layer maps


def test_uniform_map_and_distilbert_selection() -> None:
    assert uniform_layer_map(4, 12) == [3, 6, 9, 12]  # TinyBERT-4 from BERT-base
    assert uniform_layer_map(6, 12) == [2, 4, 6, 8, 10, 12]
    assert uniform_layer_map(5, 12) == [2, 4, 7, 9, 12]  # rounded down, still ends at L_T
    assert resolve_layer_map(None, 4, 12) == [3, 6, 9, 12]
    assert resolve_layer_map([1, 5, 9, 12], 4, 12) == [1, 5, 9, 12]
    assert distilbert_init_layers(6, 12) == [0, 2, 4, 7, 9, 11]  # the DistilBERT reference's choice
    assert distilbert_init_layers(12, 24) == [0, 2, 4, 6, 8, 10, 13, 15, 17, 19, 21, 23]
    assert distilbert_init_layers(3, 3) == [0, 1, 2]


@pytest.mark.parametrize(
    ("layer_map", "message"),
    [
        ([3, 6, 9], "has 3 entries but the student has 4 layers"),
        ([0, 6, 9, 12], "entry 1 is 0"),
        ([3, 6, 9, 13], "entry 4 is 13"),
        ([3, 9, 6, 12], "must increase"),
        ([3, 6, 6, 12], "must increase"),
        ([3, 6, 9, "12"], "entry 4 is '12'"),
    ],
)
def test_bad_layer_maps_give_one_line_naming_the_fix(layer_map: list, message: str) -> None:
    with pytest.raises(BertkitError, match=message) as err:
        validate_layer_map(layer_map, 4, 12)
    assert "\n" not in str(err.value) and "distill.layer_map=[3,6,9,12]" in str(err.value)


def test_student_deeper_than_teacher_is_refused() -> None:
    with pytest.raises(BertkitError, match="at most 4 layers"):
        uniform_layer_map(6, 4)
    with pytest.raises(BertkitError, match="at most 4 layers"):
        distilbert_init_layers(6, 4)


# ------------------------------------------------------------------------------------------------ student


def _ids() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(5, 60, (2, 9), generator=torch.Generator().manual_seed(0))
    return ids, _mask([9, 6])


def _teacher() -> tuple[ModelConfig, PretrainingModel]:
    cfg = ModelConfig(**TINY)
    torch.manual_seed(0)
    return cfg, PretrainingModel(cfg, ObjectiveConfig()).eval()


def test_init_from_teacher_copies_the_chosen_layers_embeddings_and_mlm_head() -> None:
    cfg, teacher = _teacher()
    weights = teacher.state_dict()
    student = DistillStudent(cfg.model_copy(update={"num_layers": 2}), mlm_head=True)
    left = init_from_teacher(student, weights, cfg, distilbert_init_layers(2, 4))
    state = student.state_dict()
    for key, value in state.items():
        if key.startswith("encoder.layers.1."):
            assert torch.equal(value, weights[key.replace("layers.1.", "layers.3.")])
        elif key.startswith(("encoder.", "mlm_head.")):
            assert torch.equal(value, weights[key]), key
    assert left == []


def test_a_student_with_all_teacher_layers_computes_the_teacher() -> None:
    cfg, teacher = _teacher()
    student = DistillStudent(cfg, mlm_head=True).eval()
    init_from_teacher(student, teacher.state_dict(), cfg, [0, 1, 2, 3])
    ids, mask = _ids()
    positions = torch.tensor([1, 4, 12])
    expected = teacher(ids, mask, positions)["mlm_logits"]
    assert torch.allclose(student(ids, mask, mlm_positions=positions).mlm_logits, expected, atol=1e-5)


def test_distilbert_shaped_student_drops_segments_and_pooler() -> None:
    cfg, teacher = _teacher()
    shape = {"family": "distilbert", "num_layers": 2, "type_vocab_size": 0, "pooler": False}
    student = DistillStudent(cfg.model_copy(update=shape), mlm_head=True)
    init_from_teacher(student, teacher.state_dict(), cfg, distilbert_init_layers(2, 4))
    assert torch.equal(student.encoder.word_embeddings, teacher.encoder.word_embeddings)
    assert not any("token_type" in key or "pooler" in key for key in student.state_dict())


def test_init_from_teacher_needs_the_teachers_width() -> None:
    cfg, teacher = _teacher()
    student = DistillStudent(cfg.model_copy(update={"num_layers": 2, "hidden_size": 16, "intermediate_size": 32}))
    with pytest.raises(BertkitError, match="--init random") as err:
        init_from_teacher(student, teacher.state_dict(), cfg, [0, 3])
    assert "\n" not in str(err.value) and "hidden_size=32" in str(err.value)
    narrow_ffn = DistillStudent(cfg.model_copy(update={"num_layers": 2, "intermediate_size": 48}))
    with pytest.raises(BertkitError, match="ffn.up.weight"):
        init_from_teacher(narrow_ffn, teacher.state_dict(), cfg, [0, 3])


def test_projections_exist_only_for_different_widths_and_are_never_saved(tmp_path: Path) -> None:
    narrow = ModelConfig(**{**TINY, "hidden_size": 16, "intermediate_size": 32, "num_layers": 2})
    student = DistillStudent(narrow, teacher_hidden_size=32, mlm_head=True)
    ids, mask = _ids()
    out = student(ids, mask, capture=LayerCapture(True, hidden_states=True))
    assert [h.shape[-1] for h in out.hidden_states] == [16, 16, 16]
    assert [h.shape[-1] for h in out.projected] == [32, 32, 32]
    assert torch.allclose(out.projected[0], student.embedding_proj(out.hidden_states[0]))
    assert torch.allclose(out.projected[2], student.hidden_proj(out.hidden_states[2]))
    assert any(k.startswith("hidden_proj.") for k in student.state_dict())
    kept = student.kept_state_dict()
    assert not any(k.startswith(("embedding_proj.", "hidden_proj.")) for k in kept)
    # What is saved loads, strictly, into the plain pretraining model of the student's shape.
    save_weights(student.kept_module(), tmp_path / "student.safetensors")
    plain = PretrainingModel(narrow, ObjectiveConfig())
    load_state(plain, read_weights(tmp_path / "student.safetensors"), "student")
    same = DistillStudent(ModelConfig(**TINY), teacher_hidden_size=32)
    assert same.embedding_proj is None and same.hidden_proj is None
    out = same(ids, mask, capture=LayerCapture(hidden_states=True))
    assert all(p is h for p, h in zip(out.projected, out.hidden_states, strict=True))


def test_task_stage_student_saves_as_a_sequence_classifier() -> None:
    cfg = ModelConfig(**TINY)
    student = DistillStudent(cfg, teacher_hidden_size=48, num_labels=3)
    ids, mask = _ids()
    assert student(ids, mask).logits.shape == (2, 3)
    assert student.encoder.pooler is not None and student.encoder.pooler.dense.weight.requires_grad
    classifier = SequenceClassifier(BertEncoder(cfg), 3, 0.1)
    assert set(student.kept_state_dict()) == set(classifier.state_dict())
    # Without a classifier nothing reads the pooled output: it is kept but frozen.
    assert not DistillStudent(cfg, mlm_head=True).encoder.pooler.dense.weight.requires_grad


def test_check_compatible_names_the_setting_to_change() -> None:
    cfg = ModelConfig(**TINY)
    check_compatible(cfg.model_copy(update={"hidden_size": 16, "intermediate_size": 32}), cfg, same_heads=True)
    with pytest.raises(BertkitError, match="model.vocab_size=60"):
        check_compatible(cfg.model_copy(update={"vocab_size": 70}), cfg)
    with pytest.raises(BertkitError, match="model.hidden_size=32"):
        check_compatible(cfg.model_copy(update={"hidden_size": 16}), cfg, same_width=True)
    with pytest.raises(BertkitError, match="model.num_heads=4"):
        check_compatible(cfg.model_copy(update={"num_heads": 2}), cfg, same_heads=True)


def test_encoder_exposes_value_vectors_with_the_attentions() -> None:
    torch.manual_seed(0)
    enc = BertEncoder(ModelConfig(**TINY)).eval()
    ids, mask = _ids()
    out = encode(enc, ids, mask, hidden_states=True, attentions=True)
    assert len(out.values) == 4 and out.values[0].shape == (2, 4, 9, 8)
    # Layer 2's values are the V part of its fused projection of its input (the layer-1 output).
    attention = enc.layers[2].attention
    v = attention.qkv(out.hidden_states[2]).view(2, 9, 3, 4, 8)[:, :, 2].transpose(1, 2)
    assert torch.allclose(out.values[2], v, atol=1e-6)
    assert encode(enc, ids, mask).values == []  # the SDPA path keeps nothing
    assert enc(ids, mask)._fields == ("last_hidden_state", "pooled")  # forward-only: the insides are a capture's


def test_attentions_of_selected_layers_only() -> None:
    """A capture of layers [...] takes the explicit path only in those layers (negative from the end): the same
    scores, probabilities, values and outputs as asking for all layers, None elsewhere (SDPA kept there)."""
    torch.manual_seed(0)
    enc = BertEncoder(ModelConfig(**TINY)).eval()
    ids, mask = _ids()
    full = encode(enc, ids, mask, attentions=True)
    some = encode(enc, ids, mask, attentions=[1, -1])
    assert torch.allclose(some.last_hidden_state, full.last_hidden_state, atol=1e-5)
    for i in range(4):
        for got, expected in ((some.attention_scores, full.attention_scores), (some.attentions, full.attentions),
                              (some.values, full.values)):  # fmt: skip
            if i in (1, 3):
                assert torch.allclose(got[i], expected[i], atol=1e-5)
            else:
                assert got[i] is None
    none = encode(enc, ids, mask, attentions=[])
    assert none.attentions == [] and none.values == []


def test_objective_asks_only_for_the_attention_its_terms_read() -> None:
    from bertkit.distill.objective import DistillationObjective

    tinybert = DistillationObjective("tinybert", None, {"embedding": 1, "hidden": 1, "attention": 1}, 1.0, [3, 6])
    assert tinybert.attention_layers() == ([2, 5], True)
    no_attention = DistillationObjective("tinybert", None, {"embedding": 1, "hidden": 1, "attention": 0}, 1.0, [3, 6])
    assert no_attention.attention_layers() == ([], False)
    minilm = DistillationObjective("minilm", None, {"attention_kl": 1, "value_relation": 1}, 1.0)
    assert minilm.attention_layers() == ([-1], [-1])
    distilbert = DistillationObjective("distilbert", None, {"ce": 5, "mlm": 2, "cos": 1}, 2.0)
    assert distilbert.attention_layers() == ([], False)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_stopping_at_the_last_attention_gives_minilm_the_same_loss_and_gradients(norm: str) -> None:
    """MiniLM's terms read the last layer's scores and values only: the encoder that stops there must give
    the very scores, values, loss and parameter gradients of the full forward (which computes the rest of the
    layer for nothing), and leave the last layer's attention output and FFN out of the graph."""
    from bertkit.distill.objective import DistillationObjective

    torch.manual_seed(0)
    cfg = ModelConfig(**{**TINY, "norm": norm})
    teacher, student = DistillStudent(cfg).eval(), DistillStudent(ModelConfig(**{**TINY, "num_layers": 2}))
    ids, mask = _ids()
    batch = {"input_ids": ids, "attention_mask": mask}
    stop = student(ids, mask, capture=LayerCapture(stop_at_last_attention=True))
    full = student(ids, mask, capture=LayerCapture([-1]))
    assert torch.equal(stop.attention_scores[-1], full.attention_scores[-1])
    assert torch.equal(stop.values[-1], full.values[-1])
    assert stop.attentions[-1] is None and stop.mlm_logits is None and stop.logits is None
    # The objective stops both models; the reference is the losses on the full forwards' tensors.
    objective = DistillationObjective("minilm", teacher, {"attention_kl": 1.0, "value_relation": 1.0}, 1.0)
    loss, _ = objective(student, batch)
    loss.backward()
    got = {name: p.grad.clone() for name, p in student.named_parameters() if p.grad is not None}
    student.zero_grad(set_to_none=True)
    full_t = teacher(ids, mask, capture=LayerCapture([-1]))
    reference = L.attention_kl_loss(full.attention_scores[-1], full_t.attention_scores[-1], mask) + (
        L.value_relation_kl_loss(full.values[-1], full_t.values[-1], mask)
    )
    (reference / mask.sum()).backward()
    assert torch.allclose(loss, reference / mask.sum(), atol=1e-6)
    expected = {name: p.grad for name, p in student.named_parameters() if p.grad is not None}
    assert got.keys() == expected.keys() and "encoder.layers.1.attention.qkv.weight" in got
    assert not any(name.startswith(("encoder.layers.1.ffn", "encoder.layers.1.attention.out")) for name in got)
    for name, grad in got.items():
        assert torch.allclose(grad, expected[name], atol=1e-6), name


def test_layer_map_follows_a_copied_student() -> None:
    """A student copied from teacher layers 0 and 5 (0-based) learns from layers 1 and 6 (1-based numbers);
    one that was not copied, or copied from a deeper teacher, has no map of its own (TinyBERT's uniform)."""
    from bertkit.pipelines.distill.task import default_layer_map

    assert default_layer_map({"copied_layers": [0, 5]}, 6) == [1, 6]
    assert default_layer_map({"copied_layers": [0, 2, 4, 7, 9, 11]}, 12) == [1, 3, 5, 8, 10, 12]
    assert default_layer_map({}, 6) is None
    assert default_layer_map({"copied_layers": [0, 11]}, 6) is None


def test_phase_lengths_and_schedules() -> None:
    from bertkit.config.schema import PhaseConfig

    phase = PhaseConfig(epochs=3, lr=1e-4, warmup_fraction=0.1)
    assert phase.planned_steps(3000, 32) == 3 * 94  # ceil(3000 / 32) steps an epoch
    assert PhaseConfig(epochs=0.5).planned_steps(100, 32) == 2
    assert PhaseConfig(epochs=3, steps=7).planned_steps(3000, 32) == 7  # steps win over a recipe's epochs
    assert phase.schedule(282).warmup_steps == 28 and phase.schedule(282).decay == "linear"


def test_augmentation_copies_scale_with_the_data() -> None:
    """About 20,000 examples in all, 1 to 20 copies each."""
    from bertkit.pipelines.compress import scaled_copies

    assert scaled_copies(300) == 20 and scaled_copies(3000) == 6 and scaled_copies(19_000) == 1
    assert scaled_copies(1_000_000) == 1 and scaled_copies(1) == 20


def test_prediction_objective_soft_and_gold_terms() -> None:
    """Soft cross-entropy against the batch's cached teacher logits, and the gold labels' cross-entropy, each a
    mean over the sequences of the global batch (the call returns this micro-batch's share)."""
    import torch.nn.functional as F

    from bertkit.distill.prediction import PredictionObjective
    from bertkit.models.with_heads import HeadsOutput

    torch.manual_seed(0)
    student_logits = torch.randn(4, 3)
    teacher_logits = torch.randn(4, 3)
    labels = torch.tensor([0, 2, 1, 1])

    class Fixed(torch.nn.Module):
        def forward(self, *_args: object) -> HeadsOutput:
            return HeadsOutput(student_logits, [], [], [], [], [], None, student_logits)

    batch = {"input_ids": torch.zeros(4, 5, dtype=torch.long), "attention_mask": torch.ones(4, 5),
             "labels": labels, "teacher_logits": teacher_logits}  # fmt: skip
    objective = PredictionObjective(None, alpha_soft=1.0, alpha_gold=0.5, temperature=2.0, t_squared=True)
    assert objective.terms == ("prediction", "gold") and objective.counts(batch) == {"prediction": 4, "gold": 4}
    loss, metrics = objective(Fixed(), batch, {"prediction": 8.0, "gold": 8.0})  # half of a global batch of 8
    p_t = F.softmax(teacher_logits / 2, dim=-1)
    soft = -(p_t * F.log_softmax(student_logits / 2, dim=-1)).sum() * 4 / 8  # T² = 4
    gold = F.cross_entropy(student_logits, labels, reduction="sum") / 8
    assert torch.allclose(metrics["prediction_loss"], soft) and torch.allclose(metrics["gold_loss"], gold)
    assert torch.allclose(loss, soft + 0.5 * gold)


def _tagger_batch(seed: int = 0) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Two sentences of 6 and 4 positions (padding after), tags on some first sub-words only."""
    from bertkit.tasks.token_classification import IGNORE

    torch.manual_seed(seed)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    labels = torch.full((2, 6), IGNORE)
    labels[0, [1, 2, 4]] = torch.tensor([0, 3, 1])
    labels[1, [1, 2]] = torch.tensor([2, 0])
    batch = {"input_ids": torch.zeros(2, 6, dtype=torch.long), "attention_mask": mask, "labels": labels}
    return batch, torch.randn(2, 6, 4)


def test_token_prediction_gold_term_is_the_tagger_fine_tuning_loss() -> None:
    """The gold term of token-level task distillation is exactly what `finetune --task token-classification`
    minimises (TokenClassificationObjective), counted over the same targets: the tagged words."""
    from bertkit.distill.prediction import PredictionObjective
    from bertkit.tasks.kinds.tokens import TokenKind
    from bertkit.tasks.token_classification import token_classification_objective

    batch, logits = _tagger_batch()

    class Tagger(torch.nn.Module):
        def forward(self, *_args: object) -> dict[str, torch.Tensor]:
            return {"logits": logits}

    objective = PredictionObjective(None, alpha_soft=0.0, alpha_gold=1.0, temperature=1.0, t_squared=False,
                                    kind=TokenKind())  # fmt: skip
    assert objective.counts(batch) == {"gold": 5.0} == {"gold": token_classification_objective.count(batch)}
    ours, _ = objective(Tagger(), batch)
    reference, _ = token_classification_objective(Tagger(), batch)
    assert torch.allclose(ours, reference)


def test_token_prediction_soft_term_reads_tagged_words_only() -> None:
    """Soft cross-entropy per tagged word, against the teacher's distribution at that word; the teacher's
    logits at untagged positions (later sub-words, specials, padding, cached zeros past the batch) change
    nothing. Cached teacher logits may be longer than the batch (padded to the longest example)."""
    from bertkit.distill.prediction import PredictionObjective
    from bertkit.tasks.kinds.tokens import TokenKind

    batch, logits = _tagger_batch()
    teacher = torch.randn(2, 9, 4)  # cached: padded to a longer example than this batch holds

    class Tagger(torch.nn.Module):
        def forward(self, *_args: object) -> dict[str, torch.Tensor]:
            return {"logits": logits}

    objective = PredictionObjective(None, alpha_soft=1.0, alpha_gold=0.0, temperature=2.0, t_squared=False,
                                    kind=TokenKind())  # fmt: skip
    loss, _ = objective(Tagger(), {**batch, "teacher_logits": teacher})
    words = batch["labels"] != -100
    expected = sum(
        -(F.softmax(teacher[b, t] / 2, -1) * F.log_softmax(logits[b, t] / 2, -1)).sum()
        for b, t in words.nonzero().tolist()
    ) / words.sum()
    assert torch.allclose(loss, expected)
    noisy = teacher.clone()
    noisy[~torch.nn.functional.pad(words, (0, 3))] = 50.0  # every untagged position, in and past the batch
    assert torch.allclose(objective(Tagger(), {**batch, "teacher_logits": noisy})[0], loss)


def test_span_prediction_matches_the_qa_loss_and_masks_padding() -> None:
    """QA: the gold term equals `finetune --task question-answering`'s loss (QAObjective: start and end
    cross-entropy over the window's real positions, halved, per window); the soft term is the same halving of
    soft start and end cross-entropies, and the teacher's logits at padding change nothing."""
    from bertkit.distill.prediction import PredictionObjective
    from bertkit.tasks.kinds.spans import SpanKind
    from bertkit.tasks.qa import qa_objective

    torch.manual_seed(1)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    start, end = torch.randn(2, 6), torch.randn(2, 6)
    batch = {"input_ids": torch.zeros(2, 6, dtype=torch.long), "attention_mask": mask,
             "start_positions": torch.tensor([2, 0]), "end_positions": torch.tensor([4, 0])}  # fmt: skip

    class Reader(torch.nn.Module):
        def forward(self, *_args: object) -> dict[str, torch.Tensor]:
            return {"start_logits": start, "end_logits": end}

    gold = PredictionObjective(None, 0.0, 1.0, 1.0, t_squared=False, kind=SpanKind())
    assert torch.allclose(gold(Reader(), batch)[0], qa_objective(Reader(), batch)[0])

    teacher = torch.randn(2, 6, 2)
    soft = PredictionObjective(None, 1.0, 0.0, 1.0, t_squared=False, kind=SpanKind())
    loss, _ = soft(Reader(), {**batch, "teacher_logits": teacher})
    expected = torch.zeros(())
    for b, n in ((0, 6), (1, 4)):
        for i, student in enumerate((start, end)):
            p = F.softmax(teacher[b, :n, i], -1)
            expected += 0.5 * -(p * F.log_softmax(student[b, :n], -1)).sum()
    assert torch.allclose(loss, expected / 2)
    noisy = teacher.clone()
    noisy[1, 4:] = 80.0
    assert torch.allclose(soft(Reader(), {**batch, "teacher_logits": noisy})[0], loss)


@pytest.mark.parametrize(
    "shape",
    [{"norm": "post"}, {"norm": "pre"}, {"family": "albert", "sharing": "all-shared", "embedding_size": 16},
     {"family": "albert", "sharing": "shared-ffn", "embedding_size": 16},
     {"family": "albert", "sharing": "shared-attention", "embedding_size": 16}],
)  # fmt: skip
def test_minilm_freezes_exactly_what_its_loss_does_not_reach(shape: dict) -> None:
    """`freeze_unreached` must freeze the parameters MiniLM's loss gives no gradient, and nothing else: the
    reference is autograd itself (a backward of the loss through the full forward). A pre-LN student's last
    attention norm sits before its attention, and an ALBERT all-shared student's one layer is every layer:
    both are reached and must train."""
    from bertkit.pipelines.distill.general import freeze_unreached

    torch.manual_seed(0)
    cfg = ModelConfig(**{**TINY, "num_layers": 3, **shape})
    teacher, student = DistillStudent(cfg).eval(), DistillStudent(cfg)
    ids, mask = _ids()
    full_s = student(ids, mask, capture=LayerCapture([-1]))
    full_t = teacher(ids, mask, capture=LayerCapture([-1]))
    loss = L.attention_kl_loss(full_s.attention_scores[-1], full_t.attention_scores[-1], mask)
    loss = loss + L.value_relation_kl_loss(full_s.values[-1], full_t.values[-1], mask)
    loss.backward()
    reached = {name for name, p in student.named_parameters() if p.grad is not None}
    trainable_before = {name for name, p in student.named_parameters() if p.requires_grad}
    freeze_unreached(student, "minilm")
    trainable = {name for name, p in student.named_parameters() if p.requires_grad}
    assert trainable == reached & trainable_before

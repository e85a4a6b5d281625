"""The modernbert family in bertkit's own machinery: its config refuses the other families' options (and they its
own) with the fix named, fills in the paper's values; and distillation with a ModernBERT teacher or student
(TinyBERT's hidden-state and attention losses through a layer map onto global layers, DistilBERT's layer copy,
MiniLM's early stop) runs, while an attention loss on a sliding-window layer is one clear error."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from bertkit.config.schema import ModelConfig
from bertkit.distill.layer_map import check_windowed_attention, distilbert_init_layers, uniform_layer_map
from bertkit.distill.objective import DistillationObjective
from bertkit.distill.student import DistillStudent, init_from_teacher
from bertkit.errors import BertkitError
from bertkit.models.with_heads import EncoderWithHeads
from bertkit.pipelines.distill.general import freeze_unreached

pytestmark = pytest.mark.usefixtures("one_thread")

MODERN = dict(family="modernbert", vocab_size=64, hidden_size=32, num_heads=4, intermediate_size=48,
              max_position_embeddings=64, type_vocab_size=0, pooler=False, norm="pre", local_attention=4,
              hidden_dropout=0.0, attention_dropout=0.0)  # fmt: skip


def modern(**extra) -> ModelConfig:
    return ModelConfig(**{**MODERN, **extra})


def test_config_fills_in_the_paper_and_refuses_what_does_not_apply() -> None:
    cfg = ModelConfig(**{k: v for k, v in MODERN.items() if k != "local_attention"})
    assert type(cfg).__name__ == "ModernBertConfig"
    assert (cfg.global_rope_theta, cfg.local_rope_theta, cfg.local_attention, cfg.global_attn_every_n_layers) == (
        160_000.0, 10_000.0, 128, 3)  # fmt: skip
    assert cfg.bias is False  # the paper's bias-free layout unless model.bias says otherwise
    assert [cfg.is_global_layer(i) for i in range(7)] == [True, False, False, True, False, False, True]
    assert ModelConfig.model_validate(cfg.model_dump()) == cfg  # the resolved values survive a run's metadata
    refused = {
        "norm": ("post", "set model.norm=pre"),
        "pooler": (True, "set model.pooler=false"),
        "type_vocab_size": (2, "set model.type_vocab_size=0"),
        "position_offset": (2, "set model.position_offset=0"),
        "embedding_size": (16, "model.embedding_size is a key of model.family=bert / roberta / albert"),
        "local_attention": (7, "must be even; use 8"),
    }
    for field, (value, fix) in refused.items():
        with pytest.raises(ValidationError, match=fix):
            modern(**{field: value})
    with pytest.raises(ValidationError, match="model.local_attention is a key of model.family=modernbert, and this "
                                              "model is model.family=bert; remove model.local_attention"):
        ModelConfig(local_attention=128)
    with pytest.raises(ValidationError, match="model.bias is a key of model.family=modernbert"):
        ModelConfig(bias=False)
    with pytest.raises(ValidationError, match="head size"):
        modern(hidden_size=36, num_heads=4, local_attention=4)  # head_dim 9: rotary needs pairs


def _batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(5, 64, (2, 20), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 13:] = 0
    return {"input_ids": ids * mask, "attention_mask": mask}


def test_tinybert_losses_run_with_a_modernbert_teacher_and_student() -> None:
    torch.manual_seed(0)
    teacher_cfg = modern(num_layers=6)  # global layers 1 and 4 (1-based); the rest slide over 4 tokens
    student_cfg = modern(hidden_size=16, num_heads=4, intermediate_size=24, num_layers=2, global_attn_every_n_layers=1)
    teacher = EncoderWithHeads(teacher_cfg).eval().requires_grad_(False)
    student = DistillStudent(student_cfg, teacher_hidden_size=32)
    layer_map = [1, 4]
    weights = {"embedding": 1.0, "hidden": 1.0, "attention": 1.0}
    check_windowed_attention(student_cfg, teacher_cfg, weights, layer_map)  # all global: allowed
    objective = DistillationObjective("tinybert", teacher, weights, 1.0, layer_map)
    assert objective.attention_layers() == ([0, 3], True)
    loss, metrics = objective(student, _batch())
    assert torch.isfinite(loss) and loss > 0 and set(metrics) == {"embedding_loss", "hidden_loss", "attention_loss"}
    loss.backward()
    assert student.hidden_proj is not None and student.hidden_proj.weight.grad is not None
    assert student.encoder.layers[1].attention.qkv.weight.grad.abs().sum() > 0

    # The uniform map lands on sliding-window teacher layers: one line naming the layer and the fix.
    uniform = uniform_layer_map(2, 6)
    assert uniform == [3, 6]
    with pytest.raises(
        BertkitError, match=r"teacher's layer 3 is a ModernBERT sliding-window layer.*alpha_attention=0"
    ):
        check_windowed_attention(student_cfg, teacher_cfg, weights, uniform)
    # The hidden-state losses alone read no attention: any map is fine.
    check_windowed_attention(student_cfg, teacher_cfg, {"embedding": 1.0, "hidden": 1.0}, uniform)
    # A student with sliding layers of its own cannot take the attention loss either.
    with pytest.raises(BertkitError, match="student's layer 2 is a ModernBERT sliding-window layer"):
        check_windowed_attention(modern(num_layers=2), teacher_cfg, weights, layer_map)


def test_minilm_and_distilbert_init_with_modernbert() -> None:
    torch.manual_seed(0)
    teacher_cfg = modern(num_layers=4)  # last layer (4) is global
    teacher = EncoderWithHeads(teacher_cfg, mlm_head=True).eval().requires_grad_(False)
    student_cfg = modern(num_layers=2, global_attn_every_n_layers=1)
    student = DistillStudent(student_cfg)
    # DistilBERT's initialisation: layers 0 and 3 of the teacher (layer 0 has no attention norm on either side).
    copied = distilbert_init_layers(2, 4)
    assert copied == [0, 3]
    left = init_from_teacher(student, teacher.state_dict(), teacher_cfg, copied)
    assert left == []
    assert torch.equal(student.encoder.layers[1].ffn.up.weight, teacher.encoder.layers[3].ffn.up.weight)
    # MiniLM (a fresh student: the copy above nearly matches already): the last layers' attention (both global)
    # and values, stopping after the last attention.
    student = DistillStudent(student_cfg)
    weights = {"attention_kl": 1.0, "value_relation": 1.0}
    check_windowed_attention(student_cfg, teacher_cfg, weights, None)
    freeze_unreached(student, "minilm")
    last = student.encoder.layers[1]
    assert not student.encoder.final_norm.weight.requires_grad and last.attn_norm.weight.requires_grad
    loss, _ = DistillationObjective("minilm", teacher, weights, 1.0)(student, _batch())
    assert torch.isfinite(loss) and loss > 1e-4
    loss.backward()
    assert student.encoder.layers[1].attention.qkv.weight.grad.abs().sum() > 0
    # A teacher whose last layer slides cannot give MiniLM's attention distribution; its value relation it can.
    sliding_last = modern(num_layers=3)
    with pytest.raises(
        BertkitError, match="teacher's layer 3 is a ModernBERT sliding-window layer.*alpha_attention_kl"
    ):
        check_windowed_attention(student_cfg, sliding_last, weights, None)
    check_windowed_attention(student_cfg, sliding_last, {"value_relation": 1.0}, None)

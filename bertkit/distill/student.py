"""The student: an encoder (+ MLM head, + classifier) with TinyBERT's learned projections, and its
initialisation from the teacher's layers (DistilBERT).

The projections W_e (embeddings output) and W_h (hidden states) map the student's width onto the
teacher's for the MSE losses. They exist only while distilling and only when the widths differ, and are
never saved with the student: `kept_module` / `kept_state_dict` leave them out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.config.schema import ModelConfig
from bertkit.engine.checkpoint import load_state
from bertkit.errors import BertkitError
from bertkit.fsutil import save_safetensors_atomic
from bertkit.models.layers import init_weights
from bertkit.models.with_heads import EncoderWithHeads, HeadsOutput

PROJECTIONS = ("embedding_proj.", "hidden_proj.")
# W_e / W_h of a general distillation, kept in its run directory (never in the exported model) so that the
# task stage starts from them, as TinyBERT's task distillation does.
PROJECTIONS_FILE = "projections.safetensors"


class DistillStudent(EncoderWithHeads):
    """Student encoder with optional heads; `teacher_hidden_size` adds W_e and W_h when it differs.

    Pass `teacher_hidden_size` only when a loss compares hidden states (TinyBERT); unused parameters
    would stall an engine that expects a gradient for every one of them (DDP).
    """

    def __init__(
        self,
        cfg: ModelConfig,
        teacher_hidden_size: int | None = None,
        mlm_head: bool = False,
        num_labels: int | None = None,
        classifier_dropout: float | None = None,
        pool: str = "cls",
    ) -> None:
        super().__init__(cfg, mlm_head, num_labels, classifier_dropout, pool)
        self.embedding_proj: nn.Linear | None = None
        self.hidden_proj: nn.Linear | None = None
        if teacher_hidden_size is not None and teacher_hidden_size != cfg.hidden_size:
            # Two maps, as in the TinyBERT paper (its code shares one); both read the encoder's width H,
            # since hidden_states[0] is the embeddings output after any E -> H projection.
            self.embedding_proj = nn.Linear(cfg.hidden_size, teacher_hidden_size)
            self.hidden_proj = nn.Linear(cfg.hidden_size, teacher_hidden_size)
            self.embedding_proj.apply(init_weights)
            self.hidden_proj.apply(init_weights)
        if num_labels is None and self.encoder.pooler is not None:
            # No head reads the pooled output: keep it for export but frozen, as PretrainingModel does.
            self.encoder.pooler.requires_grad_(False)

    def forward(self, *args: Any, **kwargs: Any) -> HeadsOutput:
        """EncoderWithHeads.forward, with the hidden states projected onto the teacher's width (W_e, W_h)."""
        out = super().forward(*args, **kwargs)
        if self.embedding_proj is None or self.hidden_proj is None or not out.hidden_states:
            return out
        first, *rest = out.hidden_states
        projected = [self.embedding_proj(first), *(self.hidden_proj(h) for h in rest)]
        return out._replace(projected=projected)

    def projection_state(self) -> dict[str, torch.Tensor]:
        """W_e and W_h (`embedding_proj.*`, `hidden_proj.*`); empty when the widths are equal."""
        return {k: v.detach().clone() for k, v in self.state_dict().items() if k.startswith(PROJECTIONS)}

    def carry_projections(self, state: dict[str, torch.Tensor]) -> bool:
        """Start W_e / W_h from a general distillation's; False (kept at their initialisation) when there are
        none or their shapes are not this student's (another teacher width)."""
        own = self.projection_state()
        if not own or set(state) != set(own) or any(state[k].shape != own[k].shape for k in own):
            return False
        load_state(self, state, "projections", strict=False)
        return True

    def kept_module(self) -> nn.Module:
        """The student as it is saved: encoder + heads, sharing these parameters, without the projections.

        Its state dict has PretrainingModel's keys (`encoder.*`, `mlm_head.*`) or SequenceClassifier's
        (`encoder.*`, `classifier.*`), so `save_model_dir` and the HF export take it as it is.
        """
        kept = nn.Module()
        kept.encoder = self.encoder
        if self.mlm_head is not None:
            kept.mlm_head = self.mlm_head
        if self.classifier is not None:
            if self.head is not None:
                kept.head = self.head
            kept.classifier = self.classifier
        return kept

    def kept_state_dict(self) -> dict[str, torch.Tensor]:
        """The state dict without W_e and W_h."""
        return self.kept_module().state_dict()


def save_projections(run_dir: Path, student: DistillStudent) -> None:
    """The general stage's W_e / W_h in its run directory (nothing when the widths are equal)."""
    state = student.projection_state()
    if state:
        save_safetensors_atomic(run_dir / PROJECTIONS_FILE, state)


def load_projections(model_dir: Path) -> dict[str, torch.Tensor]:
    """W_e / W_h of the general run a student model directory belongs to (RUN/model -> RUN), or {}."""
    from safetensors.torch import load_file

    for folder in (model_dir, model_dir.parent):
        path = folder / PROJECTIONS_FILE
        if path.is_file():
            return load_file(str(path))
    return {}


def check_compatible(
    student_cfg: ModelConfig, teacher_cfg: ModelConfig, same_width: bool = False, same_heads: bool = False
) -> None:
    """What every distillation needs (the teacher's vocabulary), plus what its losses need: equal widths
    for DistilBERT's cosine loss, equal head counts for attention losses (TinyBERT, MiniLM)."""
    if student_cfg.vocab_size != teacher_cfg.vocab_size:
        raise BertkitError(
            f"the student's vocabulary has {student_cfg.vocab_size} tokens but the teacher's {teacher_cfg.vocab_size}; "
            f"the student reads the teacher's tokenizer: set model.vocab_size={teacher_cfg.vocab_size}"
        )
    if same_width and student_cfg.hidden_size != teacher_cfg.hidden_size:
        raise BertkitError(
            f"this distillation compares hidden states directly, but the student's hidden_size is "
            f"{student_cfg.hidden_size} and the teacher's {teacher_cfg.hidden_size}; "
            f"set model.hidden_size={teacher_cfg.hidden_size}"
        )
    if same_heads and student_cfg.num_heads != teacher_cfg.num_heads:
        raise BertkitError(
            f"attention transfer compares heads one to one, but the student has {student_cfg.num_heads} heads "
            f"and the teacher {teacher_cfg.num_heads}; set model.num_heads={teacher_cfg.num_heads}"
        )


def _teacher_key(key: str, layers: Sequence[int]) -> str | None:
    """The teacher tensor a student tensor is copied from; None for the student's own (classifier, W_e, W_h)."""
    if key.startswith("encoder.layers."):
        index, rest = key.removeprefix("encoder.layers.").split(".", 1)
        return f"encoder.layers.{layers[int(index)]}.{rest}"
    if key.startswith(("encoder.", "mlm_head.")):
        return key
    return None


def init_from_teacher(
    student: DistillStudent,
    teacher_weights: dict[str, torch.Tensor],
    teacher_cfg: ModelConfig,
    layers: Sequence[int],
) -> list[str]:
    """DistilBERT's initialisation: copy the teacher's embeddings, its layers `layers` (0-based, one per
    student layer, see `distilbert_init_layers`), its final norm and pooler when both have them, and its
    MLM head when both have one. Returns the student keys left at their own initialisation.

    `teacher_weights` are in bertkit's key space (`load_model_dir`). Needs equal widths; a student without
    segment embeddings (DistilBERT) simply does not take the teacher's.
    """
    cfg = student.config
    if cfg.hidden_size != teacher_cfg.hidden_size:
        raise BertkitError(
            f"initialising the student from the teacher's layers needs the teacher's width, but the student's "
            f"hidden_size is {cfg.hidden_size} and the teacher's {teacher_cfg.hidden_size}; use --init random "
            f"or set model.hidden_size={teacher_cfg.hidden_size}"
        )
    if cfg.layer_sharing != "none" or teacher_cfg.layer_sharing != "none":
        raise BertkitError("layers shared across depth (ALBERT) cannot be picked one by one; use --init random")
    if len(layers) != cfg.num_layers or not all(0 <= i < teacher_cfg.num_layers for i in layers):
        raise BertkitError(
            f"initialising {cfg.num_layers} student layers needs {cfg.num_layers} teacher layers among "
            f"0..{teacher_cfg.num_layers - 1}, got {list(layers)}"
        )
    own = student.state_dict()
    copied: dict[str, torch.Tensor] = {}
    for key, value in own.items():
        source = _teacher_key(key, layers)
        if source is None or source not in teacher_weights:
            continue
        tensor = teacher_weights[source]
        if tensor.shape != value.shape:
            raise BertkitError(
                f"the student's {key} is {tuple(value.shape)} but the teacher's {source} is {tuple(tensor.shape)}; "
                "give the student the teacher's shape apart from the depth, or use --init random"
            )
        copied[key] = tensor.to(dtype=value.dtype)
    for key in own:
        # Every layer and the word embeddings must come from the teacher, or this is no DistilBERT init.
        needed = key.startswith("encoder.layers.") or key == "encoder.embeddings.word_embeddings.weight"
        if needed and key not in copied:
            raise BertkitError(f"the teacher's weights lack {_teacher_key(key, layers)}; use --init random")
    with torch.no_grad():
        for key, tensor in copied.items():
            own[key].copy_(tensor)
    return sorted(set(own) - set(copied))

"""The distillation objective the one training loop drives: teacher forward, student forward, weighted terms.

It is an objective like MLM (bertkit/objectives/base.py): `counts(batch)` gives each term's number of
targets from the batch alone, and a call returns the micro-batch's share of the global mean. The teacher
lives here, but the engine places it (`attach`): on the device, replicated under DDP and ZeRO-1/2, sharded
under FSDP and ZeRO-3, so a large teacher is never held whole on every GPU where the student is sharded.

Terms per method (weights `distill.alpha_*`):
- distilbert: `ce` T²·KL of the MLM distributions at the masked positions, `mlm` the student's own MLM loss,
  `cos` 1 − cos of the last hidden states (non-padding tokens). Teacher and student read the masked input.
- tinybert: `embedding` and `hidden` MSE through the student's W_e / W_h along the layer map, `attention`
  MSE of the pre-softmax scores; task stage: then `prediction`, soft cross-entropy of the classifier at t.
- minilm: `attention_kl` and `value_relation` KL of the last layers' attention distributions and values.
TinyBERT and MiniLM distil from clean text: the masked tokens of a corpus batch are put back first.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config.schema import DistillMethod
from bertkit.distill import losses
from bertkit.models.capture import LayerCapture
from bertkit.models.with_heads import HeadsOutput
from bertkit.objectives.base import Counts, Metrics, share

# Each term: its target count from a batch (see losses.TARGET_COUNTS).
_COUNTS = {
    "ce": losses.TARGET_COUNTS["distilbert_soft_ce"],
    "mlm": losses.TARGET_COUNTS["distilbert_soft_ce"],
    "cos": losses.TARGET_COUNTS["cosine_loss"],
    "embedding": losses.TARGET_COUNTS["hidden_mse_loss"],
    "hidden": losses.TARGET_COUNTS["hidden_mse_loss"],
    "attention": losses.TARGET_COUNTS["attention_score_mse_loss"],
    "prediction": losses.TARGET_COUNTS["prediction_soft_ce"],
    "attention_kl": losses.TARGET_COUNTS["attention_kl_loss"],
    "value_relation": losses.TARGET_COUNTS["value_relation_kl_loss"],
}
INTERMEDIATE = ("embedding", "hidden", "attention")
# Which terms each method has in the general stage (on a corpus).
GENERAL_TERMS: dict[str, tuple[str, ...]] = {
    "distilbert": ("ce", "mlm", "cos"),
    "tinybert": INTERMEDIATE,
    "minilm": ("attention_kl", "value_relation"),
}
_ALPHA = {
    "ce": "alpha_ce",
    "mlm": "alpha_mlm",
    "cos": "alpha_cos",
    "embedding": "alpha_embedding",
    "hidden": "alpha_hidden",
    "attention": "alpha_attention",
    "prediction": "alpha_prediction",
    "attention_kl": "alpha_attention_kl",
    "value_relation": "alpha_value_relation",
}


def unmask(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch with its masked tokens put back (TinyBERT and MiniLM distil from the original text)."""
    if "mlm_positions" not in batch:
        return batch
    ids = batch["input_ids"].clone()
    ids.view(-1)[batch["mlm_positions"]] = batch["mlm_labels"]
    return {**batch, "input_ids": ids}


class DistillationObjective:
    name = "distill"

    def __init__(
        self,
        method: DistillMethod,
        teacher: nn.Module,
        weights: dict[str, float],
        temperature: float,
        layer_map: list[int] | None = None,
    ) -> None:
        """`weights`: term -> alpha (terms at 0 are dropped). The task stage's phases are separate runs, each with
        an objective of its own terms."""
        self.method, self.teacher, self.temperature = method, teacher, temperature
        self.weights = {term: w for term, w in weights.items() if w > 0}
        self.layer_map = layer_map or []
        self.clean_input = method != "distilbert"
        self.requires = ("mlm_positions", "mlm_labels") if method == "distilbert" and "mlm" in self.weights else ()

    def attach(self, backend: Any) -> None:
        """Called by the loop once the engine is set up: the engine places (or shards) the teacher."""
        self.teacher = backend.prepare_frozen(self.teacher)

    @property
    def terms(self) -> tuple[str, ...]:
        return tuple(self.weights)

    def counts(self, batch: dict[str, torch.Tensor]) -> Counts:
        return {term: float(_COUNTS[term](batch)) for term in self.terms}

    def attention_layers(self) -> tuple[list[int] | bool, list[int] | bool]:
        """(teacher, student) layers whose attention the terms read, as a LayerCapture takes them:
        0-based (negative from the end), True for all, False for none. Only those layers leave the fast SDPA
        kernel for the explicit path (scores, probabilities, values), which costs far more: TinyBERT reads the
        layer map's teacher layers and every student layer, MiniLM the last layer of each."""
        terms = set(self.terms)
        teacher: set[int] = set()
        student: list[int] | bool = False
        if "attention" in terms:
            teacher |= {g - 1 for g in self.layer_map}
            student = True
        if {"attention_kl", "value_relation"} & terms:
            teacher.add(-1)
            student = True if student is True else [-1]
        return sorted(teacher), student

    def captures(self) -> tuple[LayerCapture, LayerCapture]:
        """(teacher, student) captures of what the terms read from inside the encoders: the attention of
        `attention_layers`, hidden states for the embedding and hidden terms. MiniLM's terms read the last layers'
        scores and values and nothing after them: neither model computes the rest of its last layer (for the
        teacher, most of a layer's forward; for the student, also its backward)."""
        teacher_layers, student_layers = self.attention_layers()
        hidden = bool({"embedding", "hidden"} & set(self.terms))
        stop = set(self.terms) <= set(GENERAL_TERMS["minilm"])
        return (
            LayerCapture(teacher_layers, hidden_states=hidden, stop_at_last_attention=stop),
            LayerCapture(student_layers, hidden_states=hidden, stop_at_last_attention=stop),
        )

    def _inputs(self, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        terms = self.terms
        inputs: dict[str, Any] = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        if "token_type_ids" in batch:
            inputs["token_type_ids"] = batch["token_type_ids"]
        if "mlm_positions" in batch and {"ce", "mlm"} & set(terms):
            inputs["mlm_positions"] = batch["mlm_positions"]
        if "document_ids" in batch:  # a corpus of packed documents: both models keep attention within each
            inputs["document_ids"] = batch["document_ids"]
        return inputs

    def __call__(
        self, model: nn.Module, batch: dict[str, torch.Tensor], totals: Counts | None = None
    ) -> tuple[torch.Tensor, Metrics]:
        if self.clean_input:
            batch = unmask(batch)
        totals = self.counts(batch) if totals is None else totals
        inputs = self._inputs(batch)
        teacher_capture, student_capture = self.captures()
        teacher: HeadsOutput = self.teacher(**inputs, capture=teacher_capture)
        student: HeadsOutput = model(**inputs, capture=student_capture)
        mask = batch["attention_mask"]
        loss = torch.zeros((), device=mask.device)
        metrics: Metrics = {}
        for term in self.terms:
            value = share(self._term(term, student, teacher, batch, mask), totals[term])
            loss = loss + self.weights[term] * value
            metrics[f"{term}_loss"] = value.detach()
        return loss, metrics

    def _term(
        self, term: str, student: HeadsOutput, teacher: HeadsOutput, batch: dict[str, torch.Tensor],
        mask: torch.Tensor,
    ) -> torch.Tensor:  # fmt: skip
        t = self.temperature
        if term == "ce":
            return losses.distilbert_soft_ce(student.mlm_logits, teacher.mlm_logits, t)
        if term == "mlm":
            return F.cross_entropy(student.mlm_logits.float(), batch["mlm_labels"], reduction="sum")
        if term == "cos":
            return losses.cosine_loss(student.last_hidden_state, teacher.last_hidden_state, mask)
        if term == "embedding":
            return losses.hidden_mse_loss(student.projected[:1], teacher.hidden_states[:1], mask)
        if term == "hidden":
            chosen = [teacher.hidden_states[g] for g in self.layer_map]
            return losses.hidden_mse_loss(student.projected[1:], chosen, mask)
        if term == "attention":
            chosen = [teacher.attention_scores[g - 1] for g in self.layer_map]
            return losses.attention_score_mse_loss(student.attention_scores, chosen, mask)
        if term == "prediction":
            # DistilBERT's soft targets carry T² (gradients keep their scale as T grows); TinyBERT's t = 1 has none.
            scale = t**2 if self.method == "distilbert" else 1.0
            return scale * losses.prediction_soft_ce(student.logits, teacher.logits, t)
        if term == "attention_kl":
            return losses.attention_kl_loss(student.attention_scores[-1], teacher.attention_scores[-1], mask)
        if term == "value_relation":
            return losses.value_relation_kl_loss(student.values[-1], teacher.values[-1], mask)
        raise ValueError(f"unknown distillation term {term}")


def term_weights(cfg: Any, terms: tuple[str, ...]) -> dict[str, float]:
    """Each term's alpha from the recipe's distill section."""
    return {term: float(getattr(cfg, _ALPHA[term])) for term in terms}

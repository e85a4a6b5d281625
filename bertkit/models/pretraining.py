"""Encoder + pretraining heads as one module, so engines can wrap a single nn.Module.

The forward pass takes batch tensors and returns every head's outputs from one encoder pass; the
objectives (bertkit/objectives) turn them into losses.
"""

from __future__ import annotations

import torch
from torch import nn

from bertkit.config.schema import ModelConfig, ObjectiveConfig
from bertkit.models.bert import BertEncoder
from bertkit.models.heads import MLMHead, PairHead, SBOHead, gather_rows

# Only RoBERTa's LM head fixes its activation (GeLU); the others follow the encoder's hidden_act.
MLM_HEAD_ACT = {"roberta": "gelu"}


class PretrainingModel(nn.Module):
    """Encoder + the heads its objectives need: MLM (sparse: logits only at the masked positions, which
    skips the V-wide matmul for the ~85% of tokens without a label), NSP or SOP on the pooled output,
    SBO on span boundaries."""

    def __init__(self, cfg: ModelConfig, objective: ObjectiveConfig | None = None) -> None:
        super().__init__()
        objective = objective or ObjectiveConfig()
        self.config, self.objective_config = cfg, objective
        self.encoder = build_encoder(cfg)
        self.mlm_head = build_mlm_head(cfg) if objective.mlm else None
        self.nsp_head = PairHead(cfg) if objective.nsp else None
        self.sop_head = PairHead(cfg) if objective.sop else None
        self.sbo_head = SBOHead(cfg, objective.sbo_max_span) if objective.sbo else None
        if self.nsp_head is None and self.sop_head is None and self.encoder.pooler is not None:
            # No head reads the pooled output. The pooler stays (exports carry it, as BERT checkpoints do)
            # but is frozen: an engine that updates every parameter it owns, gradient or not (ZeRO's
            # weight decay), must leave it exactly where one process leaves it.
            self.encoder.pooler.requires_grad_(False)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        mlm_positions: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        sbo_left: torch.Tensor | None = None,
        sbo_right: torch.Tensor | None = None,
        sbo_offsets: torch.Tensor | None = None,
        mlm_labels: torch.Tensor | None = None,  # accepted so every family takes the same batch; unused here
        document_ids: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        # Only a corpus of packed documents has them; an encoder without document support never sees the argument.
        documents = {"document_ids": document_ids} if document_ids is not None else {}
        encoded = self.encoder(input_ids, attention_mask, token_type_ids, **documents)
        hidden = encoded.last_hidden_state
        decoder = self.encoder.word_embeddings
        out: dict[str, torch.Tensor] = {"last_hidden_state": hidden}
        if self.mlm_head is not None:
            selected = (
                hidden.reshape(-1, hidden.shape[-1]) if mlm_positions is None else gather_rows(hidden, mlm_positions)
            )
            out["mlm_logits"] = self.mlm_head(selected, decoder)
        pair_head = self.nsp_head or self.sop_head
        if pair_head is not None and encoded.pooled is not None:
            out["pair_logits"] = pair_head(encoded.pooled)
        if self.sbo_head is not None and sbo_left is not None and sbo_right is not None and sbo_offsets is not None:
            out["sbo_logits"] = self.sbo_head(
                gather_rows(hidden, sbo_left), gather_rows(hidden, sbo_right), sbo_offsets, decoder
            )
        return out


# The name the MLM-only pipelines have always used.
MaskedLMModel = PretrainingModel


def build_pretraining_model(cfg: ModelConfig, objective: ObjectiveConfig | None = None) -> nn.Module:
    if cfg.family == "xlnet":
        from bertkit.models.xlnet import XLNetPretraining

        return XLNetPretraining(cfg, objective)
    if cfg.family == "electra":
        from bertkit.models.electra import ElectraPretraining

        return ElectraPretraining(cfg, objective)
    return PretrainingModel(cfg, objective)


def build_encoder(cfg: ModelConfig) -> nn.Module:
    """The family's encoder alone (what fine-tuning and embedding put a head on)."""
    if cfg.family == "xlnet":
        from bertkit.models.xlnet import XLNetEncoder

        return XLNetEncoder(cfg)
    if cfg.family == "modernbert":
        from bertkit.models.modernbert import ModernBertEncoder

        return ModernBertEncoder(cfg)
    return BertEncoder(cfg)


def build_mlm_head(cfg: ModelConfig) -> nn.Module:
    """The family's MLM head; each takes (hidden rows, tied decoder weight)."""
    if cfg.family == "modernbert":
        from bertkit.models.modernbert import ModernBertMLMHead

        return ModernBertMLMHead(cfg)
    return MLMHead(cfg, MLM_HEAD_ACT.get(cfg.family))


def build_task_head(cfg: ModelConfig) -> nn.Module | None:
    """What a family puts between the encoder and a task's classifier beyond dropout: ModernBERT's `head`
    (dense, activation, norm), on the pooled state for sequences and on every token for taggers and QA, as in
    transformers' ModernBert*For* classes; None for the others (their classifiers read the encoder directly)."""
    if cfg.family == "modernbert":
        from bertkit.models.modernbert import ModernBertPredictionHead

        return ModernBertPredictionHead(cfg)
    return None


def default_objective(cfg: ModelConfig) -> ObjectiveConfig:
    """The objective a family's checkpoint is trained with when nothing says otherwise."""
    if cfg.family == "electra":
        return ObjectiveConfig(rtd=50.0)
    if cfg.family == "xlnet":
        return ObjectiveConfig(mlm=0.0, plm=1.0)
    return ObjectiveConfig()


# Trained only to help pretraining, never kept: ELECTRA's generator and SpanBERT's SBO head.
_NOT_KEPT = ("generator.", "generator_head.", "sbo_head.")


def count_parameters(cfg: ModelConfig, with_heads: bool = True, objective: ObjectiveConfig | None = None) -> int:
    """Parameter count computed on the meta device: exact, instant, and no memory for the weights.

    What is counted is the network kept after pretraining: the encoder (with its pooler, if any) and the
    heads that ship with it (MLM, NSP/SOP, ELECTRA's discriminator head). Not counted: ELECTRA's generator
    and SpanBERT's SBO head, which exist only during pretraining. `with_heads=False` counts the encoder.
    """
    if objective is None:
        objective = default_objective(cfg)
    with torch.device("meta"):
        model = build_pretraining_model(cfg, objective)
    return sum(
        p.numel()
        for name, p in model.named_parameters()
        if (with_heads or name.startswith("encoder.")) and not name.startswith(_NOT_KEPT)
    )

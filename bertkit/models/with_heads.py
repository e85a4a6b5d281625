"""An encoder with optional MLM and classification heads, and one output that carries what distillation compares
(hidden states, attentions, values through a capture): the teacher and the student of `bertkit distill`, and the
student of a sequence classifier's task stage.

Submodule names are those of bertkit's own models (`encoder`, `mlm_head` as in PretrainingModel;
`classifier` as in SequenceClassifier), so state dicts move between them without renaming keys.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from bertkit.config.schema import ModelConfig
from bertkit.models.capture import LayerCapture
from bertkit.models.heads import gather_rows
from bertkit.models.layers import init_weights
from bertkit.models.pooling import mean_pool
from bertkit.models.pretraining import build_encoder, build_mlm_head, build_task_head


class HeadsOutput(NamedTuple):
    # A NamedTuple, not a dataclass: engines that hook module outputs (DeepSpeed ZeRO-3) can see its tensors.
    last_hidden_state: torch.Tensor  # (B, T, H)
    hidden_states: list[torch.Tensor]  # embeddings output + every layer, own width (empty unless asked for)
    # hidden_states in the teacher's width: the student's W_e on entry 0 and W_h on the others; the very
    # same tensors when there is nothing to project (equal widths, or the teacher itself).
    projected: list[torch.Tensor]
    # The next three: one entry per layer when attentions are captured, None for a layer left out of the
    # capture's selection (distillation asks only for the layers it compares).
    attention_scores: list[torch.Tensor]  # per layer (B, heads, T, T), QK^T/sqrt(d) before masking
    attentions: list[torch.Tensor]  # per layer (B, heads, T, T), softmax probabilities
    values: list[torch.Tensor]  # per layer (B, heads, T, head_dim)
    # (N, V) at `mlm_positions`, None without them: the logits of every token (B*T x V, the largest matmul of
    # the model) are what no loss reads.
    mlm_logits: torch.Tensor | None
    logits: torch.Tensor | None  # (B, num_labels) of the classifier


class EncoderWithHeads(nn.Module):
    """A BERT-family encoder, plus an MLM head and/or a sequence classifier when asked for."""

    def __init__(
        self,
        cfg: ModelConfig,
        mlm_head: bool = False,
        num_labels: int | None = None,
        classifier_dropout: float | None = None,
        pool: str = "cls",
    ) -> None:
        super().__init__()
        self.config, self.pool = cfg, pool
        self.encoder = build_encoder(cfg)
        self.mlm_head = build_mlm_head(cfg) if mlm_head else None
        # ModernBERT's classifier `head` (dense, activation, norm), as SequenceClassifier's; None otherwise.
        self.head = build_task_head(cfg) if num_labels else None
        # Before the classifier, as SequenceClassifier (task.classifier_dropout); the encoder's rate by default.
        self.dropout = nn.Dropout(cfg.hidden_dropout if classifier_dropout is None else classifier_dropout)
        self.classifier = nn.Linear(cfg.hidden_size, num_labels) if num_labels else None
        if self.classifier is not None:
            init_weights(self.classifier)  # BERT's head initialisation, as SequenceClassifier's

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        mlm_positions: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        capture: LayerCapture | None = None,
        **_: torch.Tensor,  # other batch fields (labels, mlm_labels), so a whole batch can be passed
    ) -> HeadsOutput:
        """The output with `projected` = hidden_states (the student replaces it with its projections); what the
        losses read from inside the encoder comes from `capture` (bertkit/models/capture.py), which the
        distillation objective owns.

        A capture that stops at the last layer's attention (MiniLM) leaves the encoder's output uncomputed, and no
        head runs: `mlm_logits` and `logits` are None."""
        out = self.encoder(
            input_ids,
            attention_mask,
            token_type_ids,
            capture=capture,
            # Only for a corpus of packed documents: an encoder without document support never sees the argument.
            **({"document_ids": document_ids} if document_ids is not None else {}),
        )
        hidden = out.last_hidden_state
        stopped = capture is not None and capture.stop_at_last_attention
        mlm_logits = logits = None
        if self.mlm_head is not None and mlm_positions is not None and not stopped:
            mlm_logits = self.mlm_head(gather_rows(hidden, mlm_positions), self.encoder.word_embeddings)
        if self.classifier is not None and not stopped:
            # As SequenceClassifier: the mean over non-padding tokens, or the pooled [CLS] (else [CLS] itself).
            if self.pool == "mean":
                pooled = mean_pool(hidden, attention_mask)
            else:
                pooled = out.pooled if out.pooled is not None else hidden[:, 0]
            if self.head is not None:
                pooled = self.head(pooled)
            logits = self.classifier(self.dropout(pooled))
        if capture is None:
            return HeadsOutput(hidden, [], [], [], [], [], mlm_logits, logits)
        states = list(capture.hidden_states)
        return HeadsOutput(
            hidden, states, states, list(capture.attention_scores), list(capture.attentions), list(capture.values),
            mlm_logits, logits,
        )  # fmt: skip

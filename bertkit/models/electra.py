"""ELECTRA: a small generator (masked LM) corrupts the input; the discriminator spots the replaced tokens.

Both share the embedding layer (token, position and segment tables and their LayerNorm), which is stored
once, under the discriminator. The generator's samples are drawn without gradient: the discriminator's
loss does not flow back into the generator (the paper trains them jointly but not adversarially).
"""

from __future__ import annotations

import torch
from torch import nn

from bertkit.config.schema import ModelConfig, ObjectiveConfig
from bertkit.models.bert import BertEncoder
from bertkit.models.heads import MLMHead, RTDHead, gather_rows
from bertkit.models.unpad import document_positions


class ElectraPretraining(nn.Module):
    def __init__(self, cfg: ModelConfig, objective: ObjectiveConfig | None = None) -> None:
        super().__init__()
        self.config, self.objective_config = cfg, objective
        self.encoder = BertEncoder(cfg)  # the discriminator: the part that is kept
        self.rtd_head = RTDHead(cfg)
        generator_cfg = cfg.generator_config()
        self.generator = BertEncoder(generator_cfg, with_embeddings=False)
        self.generator_head = MLMHead(generator_cfg, act="gelu")

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        mlm_positions: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        mlm_labels: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        **_: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        if mlm_positions is None or mlm_labels is None:
            raise ValueError("ELECTRA needs mlm_positions and mlm_labels to corrupt and label its input")
        assert self.encoder.embeddings is not None
        word_embeddings = self.encoder.word_embeddings
        positions = None
        if document_ids is not None:
            # Positions restart at every packed document, as the discriminator's own embeddings do.
            mask = attention_mask if attention_mask is not None else torch.ones_like(document_ids)
            positions = document_positions(mask, document_ids) + self.encoder.embeddings.position_offset
        embedded = self.encoder.embeddings(input_ids, token_type_ids, positions)
        generated = self.generator(
            attention_mask=attention_mask, inputs_embeds=embedded, document_ids=document_ids
        ).last_hidden_state
        mlm_logits = self.generator_head(gather_rows(generated, mlm_positions), word_embeddings)
        with torch.no_grad():
            # Sample (not argmax) from the generator, as the paper does; no gradient through the sampling.
            sampled = torch.multinomial(mlm_logits.detach().float().softmax(-1), 1).squeeze(-1)
            flat = input_ids.reshape(-1)
            corrupted = flat.index_copy(0, mlm_positions, sampled).view_as(input_ids)
            original = flat.index_copy(0, mlm_positions, mlm_labels).view_as(input_ids)
            # A sample equal to the original token counts as "original", as in the paper.
            replaced = corrupted != original
        hidden = self.encoder(corrupted, attention_mask, token_type_ids, document_ids=document_ids).last_hidden_state
        return {
            "mlm_logits": mlm_logits,
            "rtd_logits": self.rtd_head(hidden),
            "replaced": replaced,
            "last_hidden_state": hidden,
        }

    def discriminate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Replaced-token logits of the discriminator alone, for inference and parity checks."""
        return self.rtd_head(self.encoder(input_ids, attention_mask, token_type_ids).last_hidden_state)

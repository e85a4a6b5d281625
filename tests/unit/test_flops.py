"""Training FLOPs count compute, not storage: ALBERT's shared layers count once for every layer that applies them,
so a FLOP budget gives ALBERT the tokens an unshared encoder of its shape would get. Reference: the same
configuration built without sharing (every layer its own weights), whose forward pass does the same matmuls."""

from __future__ import annotations

import pytest

from bertkit.config.recipe import load_recipe
from bertkit.engine.flops import non_embedding_parameters, training_flops
from bertkit.models.pretraining import build_encoder


@pytest.mark.parametrize("sharing", ["all-shared", "shared-attention", "shared-ffn"])
def test_shared_layers_count_once_per_layer_that_applies_them(sharing: str) -> None:
    cfg = load_recipe("albert-tiny").model.model_copy(update={"sharing": sharing})  # type: ignore[union-attr]
    shared, unshared = build_encoder(cfg), build_encoder(cfg.model_copy(update={"sharing": "none"}))
    stored = sum(p.numel() for p in shared.parameters()) - sum(p.numel() for p in unshared.parameters())
    assert stored < 0  # sharing stores fewer weights...
    assert non_embedding_parameters(shared) == non_embedding_parameters(unshared)  # ...but computes as many
    assert training_flops(shared, 1000, 128) == training_flops(unshared, 1000, 128)


def test_unshared_models_count_their_parameters() -> None:
    cfg = load_recipe("bert-tiny").model  # type: ignore[union-attr]
    encoder = build_encoder(cfg)
    embeddings = sum(p.numel() for name, p in encoder.named_parameters() if "embeddings" in name and "norm" not in name)
    assert non_embedding_parameters(encoder) == sum(p.numel() for p in encoder.parameters()) - embeddings

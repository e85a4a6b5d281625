"""Key map and config for Hugging Face `electra` discriminator checkpoints (ElectraForPreTraining).

Only the discriminator is exported, as the paper keeps it; its encoder is BERT's, with an E -> H
projection (`embeddings_project`) when the embedding size differs from the hidden size.
"""

from __future__ import annotations

from typing import Any

from bertkit.config.schema import GeneratorConfig, ModelConfig
from bertkit.errors import BertkitError
from bertkit.interop import hf_bert
from bertkit.interop.keymap import Entry, linear, tensor


def encoder_entries(cfg: ModelConfig, prefix: str, pooler: bool) -> list[Entry]:
    entries = hf_bert.encoder_entries(cfg, prefix, pooler=False)
    if cfg.embedding_dim != cfg.hidden_size:
        entries += linear("encoder.embed_proj", f"{prefix}embeddings_project")
    return entries


def head_entries(cfg: ModelConfig, heads: set[str]) -> list[Entry]:
    if "rtd" not in heads:
        return []
    return linear("rtd_head.dense", "discriminator_predictions.dense") + linear(
        "rtd_head.prediction", "discriminator_predictions.dense_prediction"
    )


def generator_entries(cfg: ModelConfig) -> list[Entry]:
    """ELECTRA's generator as an HF ElectraForMaskedLM: the shared embeddings (stored under the
    discriminator in bertkit) plus the generator's own projection, layers and MLM head."""
    generator = cfg.generator_config()
    embeddings = [e for e in hf_bert.encoder_entries(generator, "electra.", pooler=False) if ".embeddings." in e.ours]
    entries = list(embeddings)
    if generator.embedding_dim != generator.hidden_size:
        entries += linear("generator.embed_proj", "electra.embeddings_project")
    for i in range(generator.num_layers):
        entries += hf_bert.layer_entries(f"generator.layers.{i}.", f"electra.encoder.layer.{i}.")
    entries += linear("generator_head.dense", "generator_predictions.dense")
    entries += linear("generator_head.norm", "generator_predictions.LayerNorm")
    entries += tensor("generator_head.bias", "generator_lm_head.bias")
    return entries


def config_to_hf(cfg: ModelConfig) -> dict[str, Any]:
    if cfg.norm != "post":
        raise BertkitError("Hugging Face ELECTRA is post-LayerNorm; a model.norm=pre encoder has no HF class")
    out = hf_bert.config_to_hf(ModelConfig(**{**cfg.model_dump(exclude={"generator"}), "family": "bert"}))
    out.update(model_type="electra", embedding_size=cfg.embedding_dim)
    return out


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    base = hf_bert.config_from_hf({**hf, "model_type": "bert"})
    # The generator's shape is not in a discriminator checkpoint; the paper's 1/4 is the default.
    return ModelConfig(
        **{
            **base.model_dump(),
            "family": "electra",
            "embedding_size": hf.get("embedding_size", 128),
            "pooler": False,
            "generator": GeneratorConfig(),
        }
    )

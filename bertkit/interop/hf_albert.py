"""Key map and config for Hugging Face `albert` checkpoints.

HF ALBERT groups layers: `num_hidden_groups` groups applied in turn over `num_hidden_layers`. bertkit's
all-shared is one group; no sharing is one group per layer. The partial modes (shared-ffn,
shared-attention) have no HF equivalent.
"""

from __future__ import annotations

from typing import Any

from bertkit.config.schema import ModelConfig
from bertkit.errors import BertkitError
from bertkit.interop import hf_bert
from bertkit.interop.keymap import Entry, fused, linear, tensor


def _groups(cfg: ModelConfig) -> int:
    if cfg.sharing == "all-shared":
        return 1
    if cfg.sharing == "none":
        return cfg.num_layers
    raise BertkitError(f"Hugging Face ALBERT shares all layers or none; sharing '{cfg.sharing}' cannot be exported")


def encoder_entries(cfg: ModelConfig, prefix: str, pooler: bool) -> list[Entry]:
    entries = [
        *tensor("encoder.embeddings.word_embeddings.weight", f"{prefix}embeddings.word_embeddings.weight"),
        *tensor("encoder.embeddings.position_embeddings.weight", f"{prefix}embeddings.position_embeddings.weight"),
        *tensor("encoder.embeddings.token_type_embeddings.weight", f"{prefix}embeddings.token_type_embeddings.weight"),
        *linear("encoder.embeddings.norm", f"{prefix}embeddings.LayerNorm"),
        *linear("encoder.embed_proj", f"{prefix}encoder.embedding_hidden_mapping_in"),
    ]
    for g in range(_groups(cfg)):
        hf, ours = f"{prefix}encoder.albert_layer_groups.{g}.albert_layers.0.", f"encoder.layers.{g}."
        entries += fused(f"{ours}attention.qkv", tuple(f"{hf}attention.{n}" for n in ("query", "key", "value")))
        entries += linear(f"{ours}attention.out", f"{hf}attention.dense")
        entries += linear(f"{ours}attn_norm", f"{hf}attention.LayerNorm")
        entries += linear(f"{ours}ffn.up", f"{hf}ffn")
        entries += linear(f"{ours}ffn.down", f"{hf}ffn_output")
        entries += linear(f"{ours}ffn_norm", f"{hf}full_layer_layer_norm")
    if pooler:
        entries += linear("encoder.pooler.dense", f"{prefix}pooler")
    return entries


def head_entries(cfg: ModelConfig, heads: set[str]) -> list[Entry]:
    entries: list[Entry] = []
    if "mlm" in heads:
        entries += linear("mlm_head.dense", "predictions.dense") + linear("mlm_head.norm", "predictions.LayerNorm")
        entries += tensor("mlm_head.bias", "predictions.bias")
    if "sop" in heads:
        entries += linear("sop_head.classifier", "sop_classifier.classifier")
    return entries


def config_to_hf(cfg: ModelConfig) -> dict[str, Any]:
    if cfg.norm != "post":
        raise BertkitError("Hugging Face ALBERT is post-LayerNorm; a model.norm=pre encoder has no HF class")
    return {
        "model_type": "albert",
        **hf_bert.shared_config_fields(cfg),
        "embedding_size": cfg.embedding_dim,
        "num_hidden_groups": _groups(cfg),
        "inner_group_num": 1,
        "classifier_dropout_prob": 0.1,
    }


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    layers, groups = hf["num_hidden_layers"], hf.get("num_hidden_groups", 1)
    if hf.get("inner_group_num", 1) != 1 or groups not in (1, layers):
        raise BertkitError(
            f"ALBERT with {groups} layer groups of {hf.get('inner_group_num', 1)} layers is not supported; "
            "bertkit reads all-shared (1 group) or unshared (one group per layer) ALBERT"
        )
    return ModelConfig(
        family="albert",
        vocab_size=hf["vocab_size"],
        embedding_size=hf.get("embedding_size", 128),
        hidden_size=hf["hidden_size"],
        num_layers=layers,
        num_heads=hf["num_attention_heads"],
        intermediate_size=hf["intermediate_size"],
        max_position_embeddings=hf.get("max_position_embeddings", 512),
        type_vocab_size=hf.get("type_vocab_size", 2),
        hidden_act=hf.get("hidden_act", "gelu_new"),
        hidden_dropout=hf.get("hidden_dropout_prob", 0.0),
        attention_dropout=hf.get("attention_probs_dropout_prob", 0.0),
        layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
        pad_token_id=int(hf.get("pad_token_id", 0) or 0),
        sharing="all-shared" if groups == 1 and layers > 1 else "none",
        pooler=True,
    )

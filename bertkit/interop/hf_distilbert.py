"""Key map and config for Hugging Face `distilbert` checkpoints (no token types, no pooler)."""

from __future__ import annotations

from typing import Any

from bertkit.config.schema import ModelConfig
from bertkit.errors import BertkitError
from bertkit.interop.keymap import Entry, fused, linear, tensor

# HF DistilBERT hard-codes its LayerNorm epsilon.
EPS = 1e-12


def encoder_entries(cfg: ModelConfig, prefix: str, pooler: bool) -> list[Entry]:
    entries = [
        *tensor("encoder.embeddings.word_embeddings.weight", f"{prefix}embeddings.word_embeddings.weight"),
        *tensor("encoder.embeddings.position_embeddings.weight", f"{prefix}embeddings.position_embeddings.weight"),
        *linear("encoder.embeddings.norm", f"{prefix}embeddings.LayerNorm"),
    ]
    for i in range(cfg.num_layers):
        hf, ours = f"{prefix}transformer.layer.{i}.", f"encoder.layers.{i}."
        entries += fused(f"{ours}attention.qkv", tuple(f"{hf}attention.{n}_lin" for n in ("q", "k", "v")))
        entries += linear(f"{ours}attention.out", f"{hf}attention.out_lin")
        entries += linear(f"{ours}attn_norm", f"{hf}sa_layer_norm")
        entries += linear(f"{ours}ffn.up", f"{hf}ffn.lin1")
        entries += linear(f"{ours}ffn.down", f"{hf}ffn.lin2")
        entries += linear(f"{ours}ffn_norm", f"{hf}output_layer_norm")
    return entries


def head_entries(cfg: ModelConfig, heads: set[str]) -> list[Entry]:
    if "mlm" not in heads:
        return []
    return [
        *linear("mlm_head.dense", "vocab_transform"),
        *linear("mlm_head.norm", "vocab_layer_norm"),
        *tensor("mlm_head.bias", "vocab_projector.bias"),
    ]


def config_to_hf(cfg: ModelConfig) -> dict[str, Any]:
    if cfg.norm != "post" or cfg.layer_norm_eps != EPS or cfg.position_offset:
        raise BertkitError("Hugging Face DistilBERT is post-LayerNorm with eps 1e-12 and positions from 0")
    return {
        "model_type": "distilbert",
        "vocab_size": cfg.vocab_size,
        "dim": cfg.hidden_size,
        "n_layers": cfg.num_layers,
        "n_heads": cfg.num_heads,
        "hidden_dim": cfg.intermediate_size,
        "activation": cfg.hidden_act,
        "dropout": cfg.hidden_dropout,
        "attention_dropout": cfg.attention_dropout,
        "max_position_embeddings": cfg.max_position_embeddings,
        "sinusoidal_pos_embds": False,
        "pad_token_id": cfg.pad_token_id,
        "initializer_range": 0.02,
    }


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    if hf.get("sinusoidal_pos_embds"):
        raise BertkitError("DistilBERT with sinusoidal position embeddings is not supported (learned positions only)")
    return ModelConfig(
        family="distilbert",
        vocab_size=hf["vocab_size"],
        hidden_size=hf["dim"],
        num_layers=hf["n_layers"],
        num_heads=hf["n_heads"],
        intermediate_size=hf["hidden_dim"],
        max_position_embeddings=hf.get("max_position_embeddings", 512),
        type_vocab_size=0,
        hidden_act=hf.get("activation", "gelu"),
        hidden_dropout=hf.get("dropout", 0.1),
        attention_dropout=hf.get("attention_dropout", 0.1),
        layer_norm_eps=EPS,
        pad_token_id=int(hf.get("pad_token_id", 0) or 0),
        pooler=False,
    )

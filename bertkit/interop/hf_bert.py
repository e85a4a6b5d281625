"""Key map and config for Hugging Face `bert` and `roberta` checkpoints (also SpanBERT and TinyBERT,
which are released as `bert`)."""

from __future__ import annotations

from typing import Any

from bertkit.config.schema import ModelConfig
from bertkit.errors import BertkitError
from bertkit.interop.keymap import Entry, fused, linear, tensor


def layer_entries(ours: str, hf: str) -> list[Entry]:
    """One transformer layer in HF's BertLayer naming (BERT, RoBERTa and ELECTRA share it)."""
    entries = fused(f"{ours}attention.qkv", tuple(f"{hf}attention.self.{n}" for n in ("query", "key", "value")))
    entries += linear(f"{ours}attention.out", f"{hf}attention.output.dense")
    entries += linear(f"{ours}attn_norm", f"{hf}attention.output.LayerNorm")
    entries += linear(f"{ours}ffn.up", f"{hf}intermediate.dense")
    entries += linear(f"{ours}ffn.down", f"{hf}output.dense")
    entries += linear(f"{ours}ffn_norm", f"{hf}output.LayerNorm")
    return entries


def encoder_entries(cfg: ModelConfig, prefix: str, pooler: bool) -> list[Entry]:
    entries = [
        *tensor("encoder.embeddings.word_embeddings.weight", f"{prefix}embeddings.word_embeddings.weight"),
        *tensor("encoder.embeddings.position_embeddings.weight", f"{prefix}embeddings.position_embeddings.weight"),
        *tensor("encoder.embeddings.token_type_embeddings.weight", f"{prefix}embeddings.token_type_embeddings.weight"),
        *linear("encoder.embeddings.norm", f"{prefix}embeddings.LayerNorm"),
    ]
    for i in range(cfg.num_layers):
        entries += layer_entries(f"encoder.layers.{i}.", f"{prefix}encoder.layer.{i}.")
    if pooler:
        entries += linear("encoder.pooler.dense", f"{prefix}pooler.dense")
    return entries


def head_entries(cfg: ModelConfig, heads: set[str]) -> list[Entry]:
    entries: list[Entry] = []
    if "mlm" in heads and cfg.family == "roberta":
        entries += linear("mlm_head.dense", "lm_head.dense") + linear("mlm_head.norm", "lm_head.layer_norm")
        entries += tensor("mlm_head.bias", "lm_head.bias")
    elif "mlm" in heads:
        entries += linear("mlm_head.dense", "cls.predictions.transform.dense")
        entries += linear("mlm_head.norm", "cls.predictions.transform.LayerNorm")
        entries += tensor("mlm_head.bias", "cls.predictions.bias")
    if "nsp" in heads:
        entries += linear("nsp_head.classifier", "cls.seq_relationship")
    return entries


def model_type(cfg: ModelConfig) -> str:
    return "roberta" if cfg.family == "roberta" else "bert"


def config_to_hf(cfg: ModelConfig) -> dict[str, Any]:
    if cfg.norm != "post":
        raise BertkitError("Hugging Face BERT/RoBERTa are post-LayerNorm; a model.norm=pre encoder has no HF class")
    if cfg.type_vocab_size < 1:
        raise BertkitError("Hugging Face BERT needs at least one token type; this model has type_vocab_size 0")
    if cfg.family == "roberta" and cfg.position_offset != cfg.pad_token_id + 1:
        raise BertkitError(
            f"Hugging Face RoBERTa numbers positions from pad_token_id + 1 = {cfg.pad_token_id + 1}, "
            f"but this model's position_offset is {cfg.position_offset}"
        )
    if cfg.family != "roberta" and cfg.position_offset:
        raise BertkitError("Hugging Face BERT numbers positions from 0; this model has a position_offset")
    return {"model_type": model_type(cfg), **shared_config_fields(cfg), "position_embedding_type": "absolute"}


def shared_config_fields(cfg: ModelConfig) -> dict[str, Any]:
    """The config.json fields that BertConfig, RobertaConfig, ElectraConfig and AlbertConfig name alike."""
    return {
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "intermediate_size": cfg.intermediate_size,
        "hidden_act": cfg.hidden_act,
        "hidden_dropout_prob": cfg.hidden_dropout,
        "attention_probs_dropout_prob": cfg.attention_dropout,
        "max_position_embeddings": cfg.max_position_embeddings,
        "type_vocab_size": cfg.type_vocab_size,
        "layer_norm_eps": cfg.layer_norm_eps,
        "pad_token_id": cfg.pad_token_id,
        "initializer_range": 0.02,
    }


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise BertkitError("only absolute position embeddings are supported")
    family = hf["model_type"]
    pad = int(hf.get("pad_token_id", 1 if family == "roberta" else 0) or 0)
    return ModelConfig(
        family=family,
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=hf["num_attention_heads"],
        intermediate_size=hf["intermediate_size"],
        max_position_embeddings=hf["max_position_embeddings"],
        type_vocab_size=hf.get("type_vocab_size", 2),
        hidden_act=hf.get("hidden_act", "gelu"),
        hidden_dropout=hf.get("hidden_dropout_prob", 0.1),
        attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
        layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
        pad_token_id=pad,
        # RoBERTa numbers real tokens from padding_idx + 1.
        position_offset=pad + 1 if family == "roberta" else 0,
        pooler=True,
    )

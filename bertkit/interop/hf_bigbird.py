"""Key map and config for Hugging Face `big_bird` checkpoints (BigBirdModel, BigBirdForMaskedLM,
BigBirdForPreTraining; google/bigbird-roberta-base is one).

The layers are named as BERT's (query/key/value, attention.output, intermediate, output), whichever the
attention type; the pooler is a bare Linear (`pooler.weight`), and every HF BigBird class has one (the
masked-LM class too). Positions are numbered from 0, not from pad + 1 as in RoBERTa.
"""

from __future__ import annotations

from typing import Any

from bertkit.config.schema import ModelConfig
from bertkit.errors import BertkitError
from bertkit.interop import hf_bert
from bertkit.interop.keymap import Entry, linear, tensor


def encoder_entries(cfg: ModelConfig, prefix: str, pooler: bool) -> list[Entry]:
    entries = hf_bert.encoder_entries(cfg, prefix, pooler=False)
    if pooler:
        entries += linear("encoder.pooler.dense", f"{prefix}pooler")
    return entries


def head_entries(cfg: ModelConfig, heads: set[str]) -> list[Entry]:
    entries: list[Entry] = []
    if "mlm" in heads:
        entries += linear("mlm_head.dense", "cls.predictions.transform.dense")
        entries += linear("mlm_head.norm", "cls.predictions.transform.LayerNorm")
        entries += tensor("mlm_head.bias", "cls.predictions.bias")
    if "nsp" in heads:
        entries += linear("nsp_head.classifier", "cls.seq_relationship")
    return entries


def config_to_hf(cfg: ModelConfig) -> dict[str, Any]:
    if cfg.family != "bigbird":
        raise BertkitError(
            f"a {cfg.family} model exports as its own Hugging Face family; only model.family=bigbird is BigBird"
        )
    if cfg.norm != "post":
        raise BertkitError("Hugging Face BigBird is post-LayerNorm; a model.norm=pre encoder has no HF class")
    if cfg.type_vocab_size < 1:
        raise BertkitError("Hugging Face BigBird needs at least one token type; this model has type_vocab_size 0")
    if cfg.position_offset:
        raise BertkitError(
            f"Hugging Face BigBird numbers positions from 0, but this model's position_offset is {cfg.position_offset}"
        )
    if not cfg.pooler:
        raise BertkitError("every Hugging Face BigBird class has a pooler; this model has none (model.pooler=false)")
    return {
        "model_type": "big_bird",
        **hf_bert.shared_config_fields(cfg),
        "attention_type": "block_sparse" if cfg.attention == "block_sparse" else "original_full",
        "block_size": cfg.block_size,
        "num_random_blocks": cfg.num_random_blocks,
        "use_bias": True,
        "rescale_embeddings": False,
    }


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    if hf.get("rescale_embeddings", False):
        raise BertkitError("BigBird with rescale_embeddings=true (Pegasus-style) is not supported")
    if not hf.get("use_bias", True):
        raise BertkitError("BigBird without query/key/value biases (use_bias=false) is not supported")
    if hf.get("is_decoder", False) or hf.get("add_cross_attention", False):
        raise BertkitError("BigBird as a decoder (is_decoder / add_cross_attention) is not supported")
    fields = dict(
        family="bigbird",
        vocab_size=hf.get("vocab_size", 50358),
        hidden_size=hf.get("hidden_size", 768),
        num_layers=hf.get("num_hidden_layers", 12),
        num_heads=hf.get("num_attention_heads", 12),
        intermediate_size=hf.get("intermediate_size", 3072),
        max_position_embeddings=hf.get("max_position_embeddings", 4096),
        type_vocab_size=hf.get("type_vocab_size", 2),
        hidden_act=hf.get("hidden_act", "gelu_new"),
        hidden_dropout=hf.get("hidden_dropout_prob", 0.1),
        attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
        layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
        pad_token_id=int(hf.get("pad_token_id", 0) or 0),
        position_offset=0,
        pooler=True,
        block_size=hf.get("block_size", 64),
        num_random_blocks=hf.get("num_random_blocks", 3),
    )
    sparse = hf.get("attention_type", "block_sparse") == "block_sparse"
    full = ModelConfig(**fields, attention="full")
    # A block-sparse config whose sequences are all short enough for full attention runs full attention
    # in transformers too; bertkit's recipes refuse such a config, so it is read as full attention.
    if sparse and full.max_position_embeddings > full.full_attention_limit:
        return ModelConfig(**fields, attention="block_sparse")
    return full

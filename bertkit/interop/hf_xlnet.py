"""Key map and config for Hugging Face `xlnet` checkpoints (XLNetModel, XLNetLMHeadModel; the base model
sits under `transformer.` in task models, and fine-tuned classifiers add `sequence_summary.` and
`logits_proj.`, which bertkit ignores).

bertkit's XLNet (bertkit/models/xlnet.py) keeps the reference's tensor layouts, so every entry is a
one-to-one rename: the (d_model, heads, head_dim) projections q, k, v, o, r, the biases r_w_bias, r_r_bias,
r_s_bias, seg_embed, and `mask_emb`. The LM head (`lm_loss`) is the tied word embedding plus a bias.
"""

from __future__ import annotations

from typing import Any

from bertkit.config.schema import ModelConfig
from bertkit.errors import BertkitError
from bertkit.interop.keymap import Entry, linear, tensor

_ATTENTION_TENSORS = ("q", "k", "v", "o", "r", "r_w_bias", "r_r_bias", "r_s_bias", "seg_embed")


def layer_entries(ours: str, hf: str) -> list[Entry]:
    entries = [e for name in _ATTENTION_TENSORS for e in tensor(f"{ours}attention.{name}", f"{hf}rel_attn.{name}")]
    entries += linear(f"{ours}attention.norm", f"{hf}rel_attn.layer_norm")
    entries += linear(f"{ours}ffn.up", f"{hf}ff.layer_1")
    entries += linear(f"{ours}ffn.down", f"{hf}ff.layer_2")
    entries += linear(f"{ours}ffn.norm", f"{hf}ff.layer_norm")
    return entries


def encoder_entries(cfg: ModelConfig, prefix: str, pooler: bool) -> list[Entry]:
    # `pooler` is ignored: XLNetModel and XLNetLMHeadModel have none (the classifier's sequence_summary
    # belongs to the task model).
    entries = [
        *tensor("encoder.word_embedding.weight", f"{prefix}word_embedding.weight"),
        *tensor("encoder.mask_emb", f"{prefix}mask_emb"),
    ]
    for i in range(cfg.num_layers):
        entries += layer_entries(f"encoder.layers.{i}.", f"{prefix}layer.{i}.")
    return entries


def head_entries(cfg: ModelConfig, heads: set[str]) -> list[Entry]:
    return tensor("plm_head.bias", "lm_loss.bias") if "plm" in heads else []


def config_to_hf(cfg: ModelConfig) -> dict[str, Any]:
    if cfg.family != "xlnet":
        raise BertkitError(f"a {cfg.family} model exports as its own Hugging Face family, not XLNet")
    return {
        "model_type": "xlnet",
        "vocab_size": cfg.vocab_size,
        "d_model": cfg.hidden_size,
        "n_layer": cfg.num_layers,
        "n_head": cfg.num_heads,
        "d_head": cfg.hidden_size // cfg.num_heads,
        "d_inner": cfg.intermediate_size,
        "ff_activation": cfg.hidden_act,
        "attn_type": "bi",
        "dropout": cfg.hidden_dropout,
        "layer_norm_eps": cfg.layer_norm_eps,
        "initializer_range": 0.02,
        # No segment recurrence: bertkit's sequences are independent (see bertkit/models/xlnet.py).
        "mem_len": None,
        "reuse_len": None,
        "use_mems_eval": False,
        "use_mems_train": False,
        "bi_data": False,
        "clamp_len": -1,
        "same_length": False,
        "pad_token_id": cfg.pad_token_id,
    }


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    if hf.get("attn_type", "bi") != "bi":
        raise BertkitError("XLNet with attn_type 'uni' (Transformer-XL's causal attention) is not supported")
    if hf.get("bi_data", False):
        raise BertkitError("XLNet with bi_data=true is not supported; set it to false in config.json")
    if (hf.get("clamp_len") or -1) > 0 or hf.get("same_length", False):
        raise BertkitError("XLNet with clamp_len > 0 or same_length=true is not supported")
    hidden, heads = int(hf.get("d_model", 1024)), int(hf.get("n_head", 16))
    if int(hf.get("d_head") or hidden // heads) != hidden // heads:
        raise BertkitError("XLNet with d_head != d_model / n_head is not supported")
    dropout = float(hf.get("dropout", 0.1))
    return ModelConfig(
        family="xlnet",
        vocab_size=int(hf.get("vocab_size", 32000)),
        hidden_size=hidden,
        num_layers=int(hf.get("n_layer", 24)),
        num_heads=heads,
        intermediate_size=int(hf.get("d_inner", 4096)),
        # Relative positions have no table: this is only the longest sequence bertkit feeds the model.
        max_position_embeddings=512,
        hidden_act=hf.get("ff_activation", "gelu"),
        hidden_dropout=dropout,
        attention_dropout=dropout,
        layer_norm_eps=float(hf.get("layer_norm_eps", 1e-12)),
        pad_token_id=int(hf.get("pad_token_id", 5) or 0),
        pooler=False,
    )

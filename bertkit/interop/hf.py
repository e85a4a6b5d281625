"""Read Hugging Face BERT/RoBERTa checkpoints (config.json + model.safetensors) into bertkit's encoder.

The key map is explicit and total: every HF tensor is either mapped, knowingly ignored, or an error.
HF keeps separate query/key/value projections; bertkit fuses them into one `qkv` matrix (one matmul
instead of three), so the map concatenates them in q, k, v order.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from bertkit.config.schema import ModelConfig
from bertkit.engine.checkpoint import read_weights
from bertkit.errors import BertkitError

SUPPORTED_MODEL_TYPES = ("bert", "roberta")
# Tensors HF checkpoints carry that are buffers or heads bertkit's encoder does not have.
_IGNORED = re.compile(r"^(embeddings\.position_ids|embeddings\.token_type_ids)$")

_EMBEDDINGS = {
    "embeddings.word_embeddings.weight": "embeddings.word_embeddings.weight",
    "embeddings.position_embeddings.weight": "embeddings.position_embeddings.weight",
    "embeddings.token_type_embeddings.weight": "embeddings.token_type_embeddings.weight",
    "embeddings.LayerNorm.weight": "embeddings.norm.weight",
    "embeddings.LayerNorm.bias": "embeddings.norm.bias",
    "pooler.dense.weight": "pooler.dense.weight",
    "pooler.dense.bias": "pooler.dense.bias",
}
_LAYER = {
    "attention.output.dense": "attention.out",
    "attention.output.LayerNorm": "attn_norm",
    "intermediate.dense": "ffn.up",
    "output.dense": "ffn.down",
    "output.LayerNorm": "ffn_norm",
}
_QKV = ("query", "key", "value")


def config_from_hf(hf: dict) -> ModelConfig:
    model_type = hf.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise BertkitError(
            f"model_type '{model_type}' is not supported; bertkit reads: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise BertkitError("only absolute position embeddings are supported")
    pad = int(hf.get("pad_token_id", 0) or 0)
    return ModelConfig(
        family=model_type,
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
        position_offset=pad + 1 if model_type == "roberta" else 0,
        pooler=True,
    )


def encoder_from_hf_state(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Map an HF base-model state dict (any `bert.`/`roberta.` prefix stripped) to bertkit encoder keys."""
    prefix = f"{cfg.family}."
    base = {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)} or dict(state)
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for hf_key, ours in _EMBEDDINGS.items():
        if hf_key in base:
            out[ours] = base[hf_key]
            used.add(hf_key)
    for i in range(cfg.num_layers):
        hf_layer, our_layer = f"encoder.layer.{i}.", f"layers.{i}."
        for kind in ("weight", "bias"):
            parts = [f"{hf_layer}attention.self.{name}.{kind}" for name in _QKV]
            missing = [p for p in parts if p not in base]
            if missing:
                raise BertkitError(f"Hugging Face checkpoint lacks {missing[0]}; is num_hidden_layers right?")
            out[f"{our_layer}attention.qkv.{kind}"] = torch.cat([base[p] for p in parts], dim=0)
            used.update(parts)
            for hf_name, our_name in _LAYER.items():
                key = f"{hf_layer}{hf_name}.{kind}"
                if key in base:
                    out[f"{our_layer}{our_name}.{kind}"] = base[key]
                    used.add(key)
    head_like = re.compile(r"^(cls|lm_head|classifier|qa_outputs|discriminator_predictions)\.")
    leftover = [k for k in base if k not in used and not _IGNORED.match(k) and not head_like.match(k)]
    if leftover:
        raise BertkitError(f"Hugging Face checkpoint has tensors bertkit cannot place: {leftover[:3]}")
    return out


def load_hf_encoder(directory: Path) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """Read `config.json` and `model.safetensors` from a local HF directory (never pickle files)."""
    directory = Path(directory)
    config_file, weights_file = directory / "config.json", directory / "model.safetensors"
    if not config_file.is_file():
        raise BertkitError(f"{directory} has no config.json; not a Hugging Face model directory")
    if not weights_file.is_file():
        raise BertkitError(f"{directory} has no model.safetensors (bertkit never loads pickled .bin weights)")
    cfg = config_from_hf(json.loads(config_file.read_text("utf-8")))
    return cfg, encoder_from_hf_state(read_weights(weights_file), cfg)

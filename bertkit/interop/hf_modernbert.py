"""Key map and config for Hugging Face `modernbert` checkpoints (ModernBertModel, ModernBertForMaskedLM and the
task classes, which keep the base model under `model.`).

Every tensor is a one-to-one rename: transformers fuses Q, K and V into `Wqkv` as bertkit does, in the same
(3, heads, head_dim) layout, and GeGLU's `Wi` holds (input, gate) in the order bertkit's `ffn.up` splits them.
Nothing has a bias (linear layers and norms alike) except the MLM decoder, whose weight is the tied word
embedding; with `model.bias` every linear layer and norm has one (transformers' four bias flags, all set).
Layer 0 has no attention norm (transformers' nn.Identity). The `head` (dense, activation, norm) before the MLM
decoder is bertkit's `mlm_head`; before a task classifier it is bertkit's task `head`.
"""

from __future__ import annotations

from typing import Any

from bertkit.config.schema import ModelConfig
from bertkit.errors import BertkitError
from bertkit.interop.keymap import Entry, linear, tensor

# transformers' bias flags, which bertkit's one model.bias sets together.
_BIASES = ("norm_bias", "attention_bias", "mlp_bias", "classifier_bias")
# transformers' ACT2FN names that are bertkit's activations of the same name.
_ACTIVATIONS = ("gelu", "gelu_new")


def _module(cfg: ModelConfig, ours: str, hf: str) -> list[Entry]:
    """A linear layer or norm: its weight, and its bias when the model has them (model.bias)."""
    return linear(ours, hf) if cfg.bias else tensor(f"{ours}.weight", f"{hf}.weight")


def layer_entries(cfg: ModelConfig, ours: str, hf: str, index: int) -> list[Entry]:
    entries = [] if index == 0 else _module(cfg, f"{ours}attn_norm", f"{hf}attn_norm")
    entries += _module(cfg, f"{ours}attention.qkv", f"{hf}attn.Wqkv")
    entries += _module(cfg, f"{ours}attention.out", f"{hf}attn.Wo")
    entries += _module(cfg, f"{ours}ffn_norm", f"{hf}mlp_norm")
    entries += _module(cfg, f"{ours}ffn.up", f"{hf}mlp.Wi")
    entries += _module(cfg, f"{ours}ffn.down", f"{hf}mlp.Wo")
    return entries


def encoder_entries(cfg: ModelConfig, prefix: str, pooler: bool) -> list[Entry]:
    # `pooler` is ignored: ModernBERT has none (its classifiers' `head` belongs to the task model).
    entries = [
        *tensor("encoder.embeddings.word_embeddings.weight", f"{prefix}embeddings.tok_embeddings.weight"),
        *_module(cfg, "encoder.embeddings.norm", f"{prefix}embeddings.norm"),
    ]
    for i in range(cfg.num_layers):
        entries += layer_entries(cfg, f"encoder.layers.{i}.", f"{prefix}layers.{i}.", i)
    entries += _module(cfg, "encoder.final_norm", f"{prefix}final_norm")
    return entries


def head_entries(cfg: ModelConfig, heads: set[str]) -> list[Entry]:
    if "mlm" not in heads:
        return []
    return [
        *_module(cfg, "mlm_head.dense", "head.dense"),
        *_module(cfg, "mlm_head.norm", "head.norm"),
        *tensor("mlm_head.bias", "decoder.bias"),
    ]


def task_head_entries(cfg: ModelConfig, classifier: str) -> list[Entry]:
    """A fine-tuned model's `head` and its last linear layer (`classifier` for sequences and tags,
    `qa_outputs` for QA), which transformers calls `classifier` in every task class."""
    return [
        *_module(cfg, "head.dense", "head.dense"),
        *_module(cfg, "head.norm", "head.norm"),
        *linear(classifier, "classifier"),
    ]


def config_to_hf(cfg: ModelConfig) -> dict[str, Any]:
    if cfg.family != "modernbert":
        raise BertkitError(f"a {cfg.family} model exports as its own Hugging Face family, not ModernBERT")
    layer_types = ["full_attention" if cfg.is_global_layer(i) else "sliding_attention" for i in range(cfg.num_layers)]
    return {
        "model_type": "modernbert",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "hidden_activation": cfg.hidden_act,
        "classifier_activation": cfg.hidden_act,
        "max_position_embeddings": cfg.max_position_embeddings,
        "norm_eps": cfg.layer_norm_eps,
        "pad_token_id": cfg.pad_token_id,
        # transformers' defaults are answerdotai's ids (50281...), which a vocabulary of another size does not
        # have; the tokenizer files written beside the weights name the special tokens.
        "bos_token_id": None,
        "eos_token_id": None,
        "cls_token_id": None,
        "sep_token_id": None,
        "attention_dropout": cfg.attention_dropout,
        "embedding_dropout": cfg.hidden_dropout,
        "mlp_dropout": cfg.hidden_dropout,
        **dict.fromkeys(_BIASES, bool(cfg.bias)),
        "decoder_bias": True,
        "local_attention": cfg.local_attention,
        # transformers 5 reads layer_types and rope_parameters; 4.x read the three fields after them.
        "layer_types": layer_types,
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": cfg.global_rope_theta},
            "sliding_attention": {"rope_type": "default", "rope_theta": cfg.local_rope_theta},
        },
        "global_attn_every_n_layers": cfg.global_attn_every_n_layers,
        "global_rope_theta": cfg.global_rope_theta,
        "local_rope_theta": cfg.local_rope_theta,
        "classifier_pooling": "cls",
        "classifier_dropout": 0.0,
        "initializer_range": 0.02,
    }


def _global_every(hf: dict[str, Any], layers: int) -> int:
    """n such that layer i is global exactly when i % n == 0, from layer_types (or the 4.x field)."""
    types = hf.get("layer_types")
    if not types:
        return int(hf.get("global_attn_every_n_layers", 3))
    global_layers = [i for i, kind in enumerate(types) if kind == "full_attention"]
    every = global_layers[1] if len(global_layers) > 1 else layers
    expected = ["full_attention" if i % every == 0 else "sliding_attention" for i in range(layers)]
    if list(types) != expected:
        raise BertkitError(
            "config.json's layer_types are not 'global every n-th layer from layer 0', the only pattern bertkit's "
            "ModernBERT builds (model.global_attn_every_n_layers)"
        )
    return every


def _rope_theta(hf: dict[str, Any], kind: str, legacy: str, default: float) -> float:
    params = (hf.get("rope_parameters") or {}).get(kind) or {}
    if params.get("rope_type", "default") != "default":
        kind_of = params["rope_type"]
        raise BertkitError(f"config.json's {kind} uses rope_type '{kind_of}'; bertkit reads plain RoPE only")
    return float(params.get("rope_theta", hf.get(legacy, default)))


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    # transformers' defaults: no bias but the decoder's.
    biases = {name: bool(hf.get(name, False)) for name in _BIASES}
    if len(set(biases.values())) > 1:
        on = ", ".join(name for name, value in biases.items() if value)
        raise BertkitError(
            f"this ModernBERT checkpoint sets {on} but not the others; bertkit's model.bias turns all four on or off"
        )
    if not hf.get("decoder_bias", True):
        raise BertkitError("this ModernBERT checkpoint has no decoder bias; bertkit's ModernBERT MLM head has one")
    act = hf.get("hidden_activation", "gelu")
    if act not in _ACTIVATIONS or hf.get("classifier_activation", "gelu") != act:
        raise BertkitError(
            f"this ModernBERT checkpoint uses hidden_activation '{act}' and classifier_activation "
            f"'{hf.get('classifier_activation', 'gelu')}'; bertkit reads one activation for both, one of {_ACTIVATIONS}"
        )
    layers = int(hf["num_hidden_layers"])
    pad = hf.get("pad_token_id")
    return ModelConfig(
        family="modernbert",
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        num_layers=layers,
        num_heads=hf["num_attention_heads"],
        intermediate_size=hf["intermediate_size"],
        max_position_embeddings=hf.get("max_position_embeddings", 8192),
        type_vocab_size=0,
        hidden_act=act,
        # bertkit has one rate for embeddings and feed-forward; transformers' defaults are 0 for both.
        hidden_dropout=float(hf.get("mlp_dropout", 0.0)),
        attention_dropout=float(hf.get("attention_dropout", 0.0)),
        layer_norm_eps=hf.get("norm_eps", 1e-5),
        pad_token_id=int(pad) if pad is not None else 0,
        pooler=False,
        norm="pre",
        global_rope_theta=_rope_theta(hf, "full_attention", "global_rope_theta", 160_000.0),
        local_rope_theta=_rope_theta(hf, "sliding_attention", "local_rope_theta", 10_000.0),
        local_attention=int(hf.get("local_attention", 128)),
        global_attn_every_n_layers=_global_every(hf, layers),
        bias=biases["norm_bias"],
    )

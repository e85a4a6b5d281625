"""`pretrain --init-from MODEL`: continued pretraining starts from a checkpoint, whose family, shapes and
tokenizer it takes; the recipe gives objectives, optimiser and schedule.

MODEL is a bertkit run or model directory, a local Hugging Face checkpoint directory or a hub name (through the
hub cache, as `distill --teacher` takes one). The model section is the checkpoint's: the recipe file's gives way
to it. A model key given with `--set` must agree with the checkpoint where it fixes the weights or what they
compute (shapes, activation, norms, positions); dropout, the attention pattern and the pooler may differ, the
position and token-type tables may grow (new rows copied), and a context extension may raise ModernBERT's rotary
bases and change its local window (CONTEXT_KEYS). A recipe of another family is refused, bar BigBird's
warm start from RoBERTa, which keeps the recipe's model (block-sparse attention, 4,096 positions) and must match
the checkpoint's shapes. A recipe that names no family (`continue-mlm`) takes the checkpoint's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.config.model import ModelConfig
from bertkit.errors import BertkitError
from bertkit.tokenizers.base import Tokenizer

# Fields that fix the shapes of the weights: a warm start from another family must agree on all of them.
SHAPE_FIELDS = (
    "hidden_size",
    "embedding_dim",
    "num_layers",
    "num_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "layer_sharing",
)
SHAPE_KEYS = {"embedding_dim": "embedding_size", "layer_sharing": "sharing"}  # the recipe key behind each
# Model keys a recipe may set to something else than the checkpoint has: they change training, not what the
# weights mean (dropout), or are built fresh when absent (the pooler, ELECTRA's generator).
FREE_KEYS = {"hidden_dropout", "attention_dropout", "attention", "block_size", "num_random_blocks", "pooler",
             "generator"}  # fmt: skip
# Model keys a context extension changes (ModernBERT's: the global rotary base raised, 10k to 160k, for 8,192 tokens;
# the local one and its window kept apart): rotary positions have no table to grow, so the bases are what extends.
CONTEXT_KEYS = {"global_rope_theta", "local_rope_theta", "local_attention"}
# Model keys the tokenizer owns, as it does from scratch: the checkpoint's (or, extended, the corpus tokenizer's).
TOKENIZER_KEYS = {"vocab_size", "pad_token_id"}
# Tables a checkpoint may have fewer rows of than the recipe asks for: the missing rows are copied (see
# extend_tables).
EXTENDABLE = ("max_position_embeddings", "type_vocab_size")
SAME_FAMILY = {"spanbert": "bert"}  # SpanBERT checkpoints are BERT checkpoints
# The word-embedding tables (XLNet's is `word_embedding`), which tokenize extend grows.
WORD_TABLES = ("word_embeddings.weight", "word_embedding.weight")
# Families a recipe may warm-start from besides its own: BigBird starts from RoBERTa, as in the paper.
WARM_STARTS = {"bigbird": {"roberta"}}


@dataclass
class InitCheckpoint:
    """The checkpoint a run starts from, fitted to the recipe."""

    source: Path  # the directory read (a hub name resolved to its snapshot)
    cfg: ModelConfig  # the model the run trains
    weights: dict[str, torch.Tensor]
    extended: dict[str, Any] = field(default_factory=dict)  # tables grown, as extend_tables reports
    from_checkpoint: bool = True  # whether the model section came from the checkpoint (else the recipe's)

    def load_into(self, model: nn.Module, spec: str) -> list[str]:
        """Load the weights into `model`; the names of the weights the checkpoint did not have (they keep
        the initialisation BERT gives them: a headless checkpoint's MLM head, a pooler)."""
        from bertkit.engine.checkpoint import load_state

        state = model.state_dict()
        absent = [k for k in state if k.startswith("encoder.") and "pooler" not in k and k not in self.weights]
        if absent:
            raise BertkitError(f"--init-from {spec} does not fit this model: it has no {absent[0]}")
        load_state(model, self.weights, str(self.source), strict=False)
        return sorted(k for k in state if k not in self.weights)


def _family(cfg: ModelConfig) -> str:
    return SAME_FAMILY.get(cfg.family, cfg.family)


def load_init_checkpoint(
    spec: str | Path,
    recipe_cfg: ModelConfig,
    recipe: str,
    tokenizer: Tokenizer,
    corpus_dir: Path,
    model_keys: set[str] | frozenset[str] = frozenset(),
) -> InitCheckpoint:
    """Read the checkpoint `spec` names and fit it to the recipe's model section; one line on anything that
    does not fit (another family, another tokenizer than the corpus's, a recipe key that contradicts it)."""
    from bertkit.modelio.modeldir import load_model_dir

    source, _, init_cfg, weights, init_tokenizer = load_model_dir(spec, hub=True)
    warm_start = is_warm_start(recipe_cfg, init_cfg, spec, recipe)
    grown = init_tokenizer.fingerprint() != tokenizer.fingerprint()
    if grown and (tokenizer.extends or {}).get("fingerprint") != init_tokenizer.fingerprint():
        raise BertkitError(
            f"--init-from {spec} has another tokenizer than the corpus {corpus_dir} was built with; build the corpus "
            f"with the checkpoint's (bertkit build-corpus --tokenizer {spec} ...) or with one `bertkit tokenize "
            f"extend --tokenizer {spec}` made"
        )
    if warm_start:
        cfg = _warm_start(recipe_cfg, init_cfg, spec, recipe)
    else:
        cfg = _checkpoint_model(recipe_cfg, init_cfg, spec, recipe, model_keys)
    weights, extended = extend_tables(init_cfg, cfg, weights)
    changed = [f"{key} {getattr(init_cfg, key):g} -> {getattr(cfg, key):g}" for key in sorted(CONTEXT_KEYS)
               if hasattr(init_cfg, key) and getattr(init_cfg, key) != getattr(cfg, key)]  # fmt: skip
    if changed:
        extended["context"] = ", ".join(changed)
    if init_cfg.max_position_embeddings < cfg.max_position_embeddings and "positions" not in extended:
        before, after = init_cfg.max_position_embeddings, cfg.max_position_embeddings
        extended["positions"] = f"{before} -> {after} positions (rotary: no table to grow)"
    if grown:
        assert tokenizer.extends is not None  # checked above: it extends the checkpoint's tokenizer
        weights, rows = grow_vocabulary(weights, tokenizer.extends, tokenizer.vocab_size)
        cfg = cfg.model_copy(update={"vocab_size": rows})
        added = len(tokenizer.extends["pieces"])
        extended["vocabulary"] = (
            f"{added} words added: {init_cfg.vocab_size} -> {rows} rows (each new word's row the mean of its pieces')"
        )
    return InitCheckpoint(source, cfg, weights, extended, from_checkpoint=not warm_start)


def grow_vocabulary(
    weights: dict[str, torch.Tensor], extends: dict[str, Any], size: int
) -> tuple[dict[str, torch.Tensor], int]:
    """The tables indexed by token id (the word embeddings, an MLM head's output bias) with a row for each word
    `tokenize extend` added: the mean of the rows of the pieces the base tokenizer cut it into (its `extends`
    record), written at the word's id in id order, so a word added by a second extension may read the first's.
    A table with spare rows past the base tokenizer (ModernBERT's 50,368 for 50,280 tokens) takes the new rows
    there; else it grows. Returns the tables and their row count."""
    base = int(extends["vocab_size"])
    pieces = list(extends["pieces"].values())
    if base + len(pieces) != size:
        raise BertkitError(
            f"the corpus tokenizer has {size} tokens, but it records {base} + {len(pieces)} added; extend the "
            "checkpoint's tokenizer again with `bertkit tokenize extend`"
        )
    embedding = next((k for k in weights if k.endswith(WORD_TABLES)), None)
    if embedding is None:
        raise BertkitError("the checkpoint has no word-embedding table to grow")
    rows = max(weights[embedding].shape[0], size)
    grown = dict(weights)
    for key, table in weights.items():
        if not (key.endswith(WORD_TABLES) or (key.endswith("head.bias") and table.dim() == 1)):
            continue
        if table.shape[0] != weights[embedding].shape[0]:
            continue
        table = torch.cat([table, table.new_zeros((rows - table.shape[0], *table.shape[1:]))]).contiguous()
        for offset, ids in enumerate(pieces):
            table[base + offset] = table[torch.tensor(ids)].mean(dim=0)
        grown[key] = table
    return grown, rows


def is_warm_start(recipe_cfg: ModelConfig, init_cfg: ModelConfig, spec: str | Path, recipe: str) -> bool:
    """Whether the recipe trains another family than the checkpoint's from it (BigBird from RoBERTa); a
    recipe that names an unrelated family is refused. A recipe that names no family takes the checkpoint's."""
    if "family" not in recipe_cfg.model_fields_set or _family(recipe_cfg) == _family(init_cfg):
        return False
    if _family(init_cfg) not in WARM_STARTS.get(_family(recipe_cfg), ()):
        raise BertkitError(
            f"--init-from {spec} is a {init_cfg.family} model but recipe '{recipe}' trains {recipe_cfg.family}; "
            "pick a recipe of the same family, or continue-mlm (which takes the checkpoint's)"
        )
    return True


def _checkpoint_model(
    recipe_cfg: ModelConfig, init_cfg: ModelConfig, spec: str | Path, recipe: str, model_keys: set[str] | frozenset[str]
) -> ModelConfig:
    """The checkpoint's model (the recipe file's model section gives way to it), with the settings given with
    `--set model.KEY` that may differ from it (dropout, attention, pooler, larger tables); one that contradicts the
    checkpoint is one error naming each."""
    given = {key: getattr(recipe_cfg, key) for key in type(recipe_cfg).model_fields
             if key in model_keys and key != "family" and key not in TOKENIZER_KEYS}  # fmt: skip
    theirs = init_cfg.model_dump()
    conflicts = []
    for key, ours in given.items():
        if key in FREE_KEYS or key in CONTEXT_KEYS or key not in theirs or ours == theirs[key]:
            continue
        if key in EXTENDABLE and ours > theirs[key]:
            continue
        conflicts.append((key, theirs[key], ours))
    if conflicts:
        what = ", ".join(f"--set model.{key}={ours} (the checkpoint has {have})" for key, have, ours in conflicts)
        raise BertkitError(
            f"--init-from {spec} gives the model, which {what} contradicts; drop "
            f"{'these settings' if len(conflicts) > 1 else 'the setting'} or pretrain from scratch"
        )
    family = recipe_cfg.family if "family" in recipe_cfg.model_fields_set else init_cfg.family
    return _validated({**theirs, **given, "family": family}, spec, recipe)


def _validated(fields: dict[str, Any], spec: str | Path, recipe: str) -> ModelConfig:
    """The model the run trains; a combination the family refuses (a pooler on ModernBERT) is one line."""
    from pydantic import ValidationError

    try:
        return ModelConfig.model_validate(fields)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise BertkitError(
            f"--init-from {spec} with recipe '{recipe}': {first['msg']}{f' (model.{where})' if where else ''}"
        ) from None


def _usable_positions(cfg: ModelConfig) -> int:
    return cfg.max_position_embeddings - cfg.position_offset


def _warm_start(recipe_cfg: ModelConfig, init_cfg: ModelConfig, spec: str | Path, recipe: str) -> ModelConfig:
    """A warm start from another family (BigBird from RoBERTa): the recipe's model with the checkpoint's
    vocabulary; one line naming every shape that differs. Fewer positions or token types in the checkpoint are
    accepted: extend_tables fills the rest by copying (BigBird's 4,096 positions from RoBERTa's 512)."""
    extendable = {
        "max_position_embeddings": _usable_positions(init_cfg) <= _usable_positions(recipe_cfg),
        "type_vocab_size": 1 <= init_cfg.type_vocab_size <= recipe_cfg.type_vocab_size,
    }
    differing = [
        (name, getattr(init_cfg, name), getattr(recipe_cfg, name))
        for name in SHAPE_FIELDS
        if getattr(init_cfg, name) != getattr(recipe_cfg, name) and not extendable.get(name, False)
    ]
    if differing:
        what = ", ".join(f"{name} {theirs} vs {ours}" for name, theirs, ours in differing)
        fix = " ".join(f"--set model.{SHAPE_KEYS.get(name, name)}={theirs}" for name, theirs, _ in differing)
        raise BertkitError(f"--init-from {spec} does not fit recipe '{recipe}' ({what}); add {fix}")
    return _validated(
        {**recipe_cfg.model_dump(), "vocab_size": init_cfg.vocab_size, "pad_token_id": init_cfg.pad_token_id},
        spec,
        recipe,
    )


def extend_tables(
    init_cfg: ModelConfig, cfg: ModelConfig, weights: dict[str, torch.Tensor]
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Grow the checkpoint's position and token-type tables to the run's sizes by copying.

    Positions: the learned ones (rows from the checkpoint's offset on) are repeated in order until the
    table is full, as BigBird (and Longformer) extended RoBERTa's 512 positions to 4,096; rows before the
    run's offset (RoBERTa's padding rows) are kept. Token types: new types start as a copy of type 0."""
    weights, report = dict(weights), {}
    key = "encoder.embeddings.position_embeddings.weight"
    old_rows = weights[key].shape[0] if key in weights else cfg.max_position_embeddings
    if key in weights and (old_rows != cfg.max_position_embeddings or init_cfg.position_offset != cfg.position_offset):
        table = weights[key]
        learned = table[init_cfg.position_offset :]
        rows = cfg.max_position_embeddings - cfg.position_offset
        repeats = -(-rows // learned.shape[0])
        tiled = learned.repeat(repeats, 1)[:rows]
        weights[key] = torch.cat([table[: cfg.position_offset], tiled], dim=0).contiguous()
        report["positions"] = f"{learned.shape[0]} learned positions copied to {rows}"
    key = "encoder.embeddings.token_type_embeddings.weight"
    if key in weights and weights[key].shape[0] < cfg.type_vocab_size:
        table = weights[key]
        extra = table[:1].expand(cfg.type_vocab_size - table.shape[0], -1)
        weights[key] = torch.cat([table, extra], dim=0).contiguous()
        report["token_types"] = f"{table.shape[0]} -> {cfg.type_vocab_size} (new types copy type 0)"
    return weights, report

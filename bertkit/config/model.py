"""The `model` section: one configuration class per family, as transformers has one config per model.

`ModelConfig` holds what every family has (sizes, dropout, norms, pooler); each family's class adds its own keys
(ALBERT's `sharing`, ELECTRA's `generator`, ModernBERT's rotary and window settings, the absolute-position
families' factorized embeddings and BigBird attention). A recipe's `model:` is the discriminated union of the
classes on `family` (bert when left out), so a key of another family is refused with the family that takes it,
and `ModelConfig(...)` / `ModelConfig.model_validate(...)` build the family's class.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import Discriminator, Field, Tag, model_validator

from bertkit.config.strict import ChosenByKey, StrictModel

Family = Literal["bert", "roberta", "albert", "electra", "spanbert", "distilbert", "bigbird", "xlnet", "modernbert"]
Attention = Literal["full", "block_sparse"]
Sharing = Literal["none", "all-shared", "shared-ffn", "shared-attention"]
DEFAULT_FAMILY = "bert"


class GeneratorConfig(StrictModel):
    """ELECTRA's generator: a smaller masked LM whose samples the discriminator has to detect."""

    # Generator hidden size as a fraction of the discriminator's (1/4 for small and large, 1/3 for base).
    hidden_fraction: float = Field(0.25, gt=0.0, le=1.0)
    # None: as many layers as the discriminator (the paper shrinks width, not depth).
    num_layers: int | None = Field(None, gt=0)


class ModelConfig(ChosenByKey):
    """Shape of a BERT-family encoder. Defaults are BERT-base."""

    # The family a class configures (its `family` literal; "" on the classes no model is built from).
    FAMILY: ClassVar[str] = ""

    # Architecture family: selects the encoder (and its checks) that the rest of the section configures.
    family: Family = DEFAULT_FAMILY
    # Token embedding rows: at least the tokenizer's vocabulary size.
    vocab_size: int = Field(30522, gt=0)
    # Width of the hidden states (H).
    hidden_size: int = Field(768, gt=0)
    # Transformer layers in the encoder.
    num_layers: int = Field(12, gt=0)
    # Attention heads per layer; must divide hidden_size.
    num_heads: int = Field(12, gt=0)
    # Width of the feed-forward sub-layer.
    intermediate_size: int = Field(3072, gt=0)
    # The longest sequence the model takes, plus position_offset (the position table's size, where there is one).
    max_position_embeddings: int = Field(512, gt=0)
    # 0 disables segment embeddings (RoBERTa keeps one all-zero type in HF; DistilBERT has none).
    type_vocab_size: int = Field(2, ge=0)
    # Activation of the feed-forward sub-layer (gelu_new: the tanh approximation).
    hidden_act: Literal["gelu", "gelu_new", "relu"] = "gelu"
    # Dropout on embeddings and sub-layer outputs.
    hidden_dropout: float = Field(0.1, ge=0.0, lt=1.0)
    # Dropout on the attention probabilities.
    attention_dropout: float = Field(0.1, ge=0.0, lt=1.0)
    # Epsilon of every LayerNorm.
    layer_norm_eps: float = Field(1e-12, gt=0)
    # Id of the padding token (its embedding row gets no gradient).
    pad_token_id: int = Field(0, ge=0)
    # RoBERTa numbers positions from padding_idx + 1 = 2 (fairseq heritage); BERT from 0.
    position_offset: int = Field(0, ge=0)
    # A dense + tanh pooler on [CLS] (BERT's; what NSP/SOP and classifiers read when present).
    pooler: bool = True
    # LayerNorm placement: after each residual sub-layer (post, BERT) or before it (pre).
    norm: Literal["post", "pre"] = "post"

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        declared = "family" in cls.__dict__.get("__annotations__", {})  # a family's class narrows `family`
        cls.FAMILY = cls.model_fields["family"].default if declared else ""

    @classmethod
    def chosen_class(cls, data: dict[str, Any]) -> type[ModelConfig] | None:
        """`ModelConfig(family=..., ...)` and `ModelConfig.model_validate(mapping)` build the family's class."""
        return family_class(data.get("family", DEFAULT_FAMILY)) if cls is ModelConfig else None

    @model_validator(mode="before")
    @classmethod
    def _keys_of_other_families(cls, data: Any) -> Any:
        """A key this family does not have but another does: one message naming the families that take it."""
        if cls is ModelConfig or not isinstance(data, dict):
            return data
        for key in data:
            if key in cls.model_fields:
                continue
            owners = [name for name, other in FAMILY_CLASSES.items() if key in other.model_fields]
            if owners:
                raise ValueError(
                    f"model.{key} is a key of model.family={' / '.join(owners)}, and this model is "
                    f"model.family={cls.FAMILY}; remove model.{key} or set model.family={owners[0]}"
                )
        return data

    # -- what every family answers -------------------------------------------------------------------------
    @property
    def embedding_dim(self) -> int:
        """E: the width token embeddings live in (H unless the family factorizes them)."""
        return getattr(self, "embedding_size", None) or self.hidden_size

    @property
    def block_sparse(self) -> bool:
        """Whether self-attention is BigBird's block-sparse kind (`attention: block_sparse`)."""
        return getattr(self, "attention", "full") == "block_sparse"

    @property
    def layer_sharing(self) -> Sharing:
        """ALBERT's cross-layer sharing (`sharing`); none for the other families."""
        return getattr(self, "sharing", "none")

    def is_global_layer(self, index: int) -> bool:
        """Whether 0-based layer `index` attends to every token (all layers but ModernBERT's local ones)."""
        return True

    def _refuse_settings(self, unsupported: dict[str, tuple[bool, str]]) -> None:
        """key -> (whether its value contradicts this family, the fix): the first contradiction is one error."""
        for name, (bad, fix) in unsupported.items():
            if bad:
                raise ValueError(
                    f"model.{name}={getattr(self, name)} does not apply to model.family={self.FAMILY}; {fix}"
                )

    @model_validator(mode="after")
    def _common_checks(self) -> ModelConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}; "
                "pick a head count that divides it"
            )
        if self.pad_token_id >= self.vocab_size:
            raise ValueError(f"pad_token_id {self.pad_token_id} is outside the vocabulary of {self.vocab_size}")
        return self


class AbsolutePositionConfig(ModelConfig):
    """The families with BERT's embedding tables (tokens, positions, segments) and its attention choices."""

    # ALBERT/ELECTRA factorize the embeddings: tokens live in E dimensions, projected to H. None means E = H.
    embedding_size: int | None = Field(None, gt=0)
    # Self-attention: `full` (SDPA over every pair of tokens) or BigBird's `block_sparse` (ITC: a window of
    # 3 blocks, `num_random_blocks` random blocks per query block, the first and last block global), whose
    # memory grows linearly with the length. Sequences of at most (5 + 2 * num_random_blocks) * block_size
    # tokens use full attention, as transformers does.
    attention: Attention = "full"
    # block_sparse only: tokens per attention block.
    block_size: int = 64
    # block_sparse only: random blocks each query block attends to (0: none).
    num_random_blocks: int = 3

    @property
    def full_attention_limit(self) -> int:
        """The longest sequence that block-sparse attention handles with full attention instead: its pattern
        (2 global + 3 window + num_random_blocks random blocks, with as many again as a buffer) needs more."""
        return (5 + 2 * self.num_random_blocks) * self.block_size

    @model_validator(mode="after")
    def _check_block_sparse(self) -> AbsolutePositionConfig:
        if self.block_size < 1:
            raise ValueError(f"model.block_size must be a positive number of tokens, got {self.block_size}; use 64")
        if self.num_random_blocks < 0:
            raise ValueError(
                f"model.num_random_blocks must be >= 0 (0 turns random attention off), got {self.num_random_blocks}"
            )
        if self.attention != "block_sparse":
            return self
        longest = self.max_position_embeddings - self.position_offset
        if longest % self.block_size:
            fits = [b for b in (128, 64, 32, 16, 8) if longest % b == 0]
            hint = f"set model.block_size={fits[0]}" if fits else "pick a block size that divides it"
            raise ValueError(
                f"model.block_size {self.block_size} does not divide the longest sequence, {longest} tokens "
                f"(max_position_embeddings - position_offset), so it is not a whole number of blocks; {hint}"
            )
        if longest <= self.full_attention_limit:
            raise ValueError(
                f"model.attention=block_sparse never applies: sequences of up to {self.full_attention_limit} tokens "
                f"((5 + 2 * num_random_blocks) * block_size) use full attention, and this model takes at most "
                f"{longest}; lower model.block_size or model.num_random_blocks, raise model.max_position_embeddings, "
                "or set model.attention=full"
            )
        return self


class BertConfig(AbsolutePositionConfig):
    family: Literal["bert"] = "bert"


class RobertaConfig(AbsolutePositionConfig):
    family: Literal["roberta"] = "roberta"


class SpanBertConfig(AbsolutePositionConfig):
    family: Literal["spanbert"] = "spanbert"


class BigBirdConfig(AbsolutePositionConfig):
    family: Literal["bigbird"] = "bigbird"


class DistilBertConfig(AbsolutePositionConfig):
    family: Literal["distilbert"] = "distilbert"

    @model_validator(mode="after")
    def _no_segments(self) -> DistilBertConfig:
        if self.type_vocab_size or self.pooler:
            raise ValueError(
                "DistilBERT has no segment embeddings and no pooler; set type_vocab_size: 0, pooler: false"
            )
        return self


class AlbertConfig(AbsolutePositionConfig):
    family: Literal["albert"] = "albert"
    # ALBERT's cross-layer parameter sharing: all-shared (one layer applied num_layers times), or only the
    # attention / only the feed-forward sub-layer shared (ALBERT paper, Table 4).
    sharing: Sharing = "none"


class ElectraConfig(AbsolutePositionConfig):
    family: Literal["electra"] = "electra"
    # ELECTRA only: the generator trained alongside the discriminator (this config is the discriminator).
    generator: GeneratorConfig | None = None

    @model_validator(mode="after")
    def _discriminator(self) -> ElectraConfig:
        if self.generator is None:
            raise ValueError("an ELECTRA model needs model.generator (e.g. hidden_fraction: 0.25)")
        if self.pooler:
            raise ValueError("ELECTRA's discriminator has no pooler; set model.pooler=false")
        return self

    def generator_config(self) -> BertConfig:
        """The generator's own shape: narrower, same embeddings (E) and depth unless set."""
        assert self.generator is not None
        hidden = max(1, round(self.hidden_size * self.generator.hidden_fraction))
        # The official code keeps 64-dimensional heads: hidden 64 -> 1 head, 256 -> 4 heads.
        heads = max(1, hidden // 64)
        while hidden % heads:
            heads -= 1
        shared = self.model_dump(exclude={"family", "generator"})
        return BertConfig(**{**shared, "hidden_size": hidden, "num_heads": heads, "intermediate_size": hidden * 4,
                             "num_layers": self.generator.num_layers or self.num_layers,
                             "embedding_size": self.embedding_dim, "pooler": False})  # fmt: skip


class XLNetConfig(ModelConfig):
    """XLNet (bertkit/models/xlnet.py) has its own relative attention and no absolute embedding tables.
    `max_position_embeddings` is only the longest sequence a recipe accepts (relative positions have no table),
    `type_vocab_size` is unused (segments are relative: same or different), and `pooler` is the sequence summary
    on `<cls>` that fine-tuning adds (XLNetForSequenceClassification's), off in pretraining."""

    family: Literal["xlnet"] = "xlnet"

    @model_validator(mode="after")
    def _relative(self) -> XLNetConfig:
        self._refuse_settings({
            "norm": (self.norm != "post", "set model.norm=post"),
            "position_offset": (self.position_offset != 0, "set model.position_offset=0 (positions are relative)"),
        })  # fmt: skip
        return self


class ModernBertConfig(ModelConfig):
    """ModernBERT (bertkit/models/modernbert.py): rotary positions (no position or segment tables), a pre-norm
    stack, GeGLU, alternating global and sliding-window attention, no pooler; the paper's values by default."""

    family: Literal["modernbert"] = "modernbert"
    # Rotary position base of the global layers.
    global_rope_theta: float = Field(160_000.0, gt=0)
    # Rotary position base of the sliding-window layers.
    local_rope_theta: float = Field(10_000.0, gt=0)
    # Sliding-window width in tokens: a token sees local_attention / 2 tokens on each side.
    local_attention: int = Field(128, gt=0)
    # Layer i attends globally when i % n == 0.
    global_attn_every_n_layers: int = Field(3, gt=0)
    # Biases in every linear layer and LayerNorm of the encoder and of the heads' dense and norm (transformers'
    # attention_bias, mlp_bias, norm_bias and classifier_bias together). False is the paper's (and cramming's)
    # bias-free layout; true puts BERT's biases back.
    bias: bool = False

    def is_global_layer(self, index: int) -> bool:
        return index % self.global_attn_every_n_layers == 0

    @model_validator(mode="after")
    def _rotary(self) -> ModernBertConfig:
        unsupported = {
            "norm": (self.norm != "pre", "set model.norm=pre (ModernBERT is pre-LayerNorm)"),
            "pooler": (self.pooler, "set model.pooler=false (classifiers put their own head on [CLS] or the mean)"),
            "type_vocab_size": (self.type_vocab_size != 0, "set model.type_vocab_size=0 (no segment embeddings)"),
            "position_offset": (self.position_offset != 0, "set model.position_offset=0 (positions are rotary)"),
            "hidden_act": (self.hidden_act == "relu", "set model.hidden_act=gelu (GeGLU)"),
        }
        self._refuse_settings(unsupported)
        if self.hidden_size // self.num_heads % 2:
            raise ValueError(
                f"rotary positions rotate pairs of dimensions, but hidden_size / num_heads = "
                f"{self.hidden_size // self.num_heads} is odd; pick a head count that leaves an even head size"
            )
        if self.local_attention % 2:
            raise ValueError(
                f"model.local_attention={self.local_attention}: the window spans local_attention / 2 tokens on each "
                f"side, so it must be even; use {self.local_attention + 1} (ModernBERT's is 128)"
            )
        return self


FAMILY_CLASSES: dict[str, type[ModelConfig]] = {
    cls.FAMILY: cls
    for cls in (BertConfig, RobertaConfig, AlbertConfig, ElectraConfig, SpanBertConfig, DistilBertConfig,
                BigBirdConfig, XLNetConfig, ModernBertConfig)  # fmt: skip
}


def family_class(family: Any) -> type[ModelConfig]:
    cls = FAMILY_CLASSES.get(str(family))
    if cls is None:
        raise ValueError(f"model.family must be one of {', '.join(FAMILY_CLASSES)}, not {family!r}")
    return cls


def _family_tag(value: Any) -> str:
    family = value.get("family", DEFAULT_FAMILY) if isinstance(value, dict) else getattr(value, "family", None)
    return str(family)


# A recipe's `model:` section: the family's class, chosen by `family` (bert when left out).
FamilyModelConfig = Annotated[
    Union[tuple(Annotated[cls, Tag(name)] for name, cls in FAMILY_CLASSES.items())],  # noqa: UP007
    Discriminator(_family_tag, custom_error_type="model_family",
                  custom_error_message=f"model.family must be one of {', '.join(FAMILY_CLASSES)}"),  # fmt: skip
]

# Keys of some families that earlier model files wrote for every family, at the value that turns them off.
_OFF_VALUES: dict[str, Any] = {
    "embedding_size": None, "attention": "full", "block_size": 64, "num_random_blocks": 3, "sharing": "none",
    "generator": None, "global_rope_theta": None, "local_rope_theta": None, "local_attention": None,
    "global_attn_every_n_layers": None, "bias": None,
}  # fmt: skip


def saved_model_config(data: dict[str, Any]) -> ModelConfig:
    """A model file's `model` section: keys of other families left at their off value (files written before the
    configurations were per family hold every key) are dropped; any other foreign key is still refused."""
    cls = family_class(data.get("family", DEFAULT_FAMILY))
    kept = {k: v for k, v in data.items() if k in cls.model_fields or k not in _OFF_VALUES or v != _OFF_VALUES[k]}
    return cls.model_validate(kept)

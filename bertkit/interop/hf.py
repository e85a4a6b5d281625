"""Hugging Face interchange: translate HF checkpoints (config.json dict + state dict) into bertkit's configs and
weights and back, through one explicit key map per family (hf_bert, hf_albert, hf_electra, hf_distilbert,
hf_bigbird, hf_xlnet, hf_modernbert). Every HF tensor is either mapped, knowingly ignored (buffers and tied copies),
or an error. No file is read or written here (an HF directory on disk is bertkit/modelio/hf_dir.py's), and
`transformers` itself is never imported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

import torch

from bertkit.config.schema import ModelConfig, ObjectiveConfig
from bertkit.config.task_kinds import SPEC_BY_ARCHITECTURE, SPECS
from bertkit.errors import BertkitError
from bertkit.interop import hf_albert, hf_bert, hf_bigbird, hf_distilbert, hf_electra, hf_modernbert, hf_xlnet
from bertkit.interop.keymap import Entry, linear, to_hf, to_ours

HFHead = Literal["pretraining", "mlm", "base", "generator", "classifier"]

# HF model_type -> (key map module, prefix of the base model inside task models, class prefix)
_MODEL_TYPES: dict[str, tuple[ModuleType, str, str]] = {
    "bert": (hf_bert, "bert.", "Bert"),
    "roberta": (hf_bert, "roberta.", "Roberta"),
    "albert": (hf_albert, "albert.", "Albert"),
    "electra": (hf_electra, "electra.", "Electra"),
    "distilbert": (hf_distilbert, "distilbert.", "DistilBert"),
    "big_bird": (hf_bigbird, "bert.", "BigBird"),
    "xlnet": (hf_xlnet, "transformer.", "XLNet"),
    "modernbert": (hf_modernbert, "model.", "ModernBert"),
}
_FAMILY_TO_TYPE = {"bert": "bert", "spanbert": "bert", "roberta": "roberta", "albert": "albert",
                   "electra": "electra", "distilbert": "distilbert", "bigbird": "big_bird",
                   "xlnet": "xlnet", "modernbert": "modernbert"}  # fmt: skip
# The pair head (on the pooled output) that each HF family's ForPreTraining class carries.
_PAIR_HEAD = {"bert": "nsp", "big_bird": "nsp", "albert": "sop"}
# Buffers and tied copies of the word embeddings / output biases that HF may or may not store.
_IGNORED = re.compile(
    r"(^|\.)embeddings\.(position_ids|token_type_ids)$"
    r"|^cls\.predictions\.decoder\.|^lm_head\.decoder\.|^predictions\.decoder\.|^vocab_projector\.weight$|^lm_loss\.weight$|^decoder\.weight$"
)
# Heads of task models that bertkit's pretraining model has no place for (fine-tuned checkpoints).
# ModernBERT's task classes put a `head` (dense, activation, norm) before their classifier.
_TASK_HEADS = re.compile(r"^(classifier|qa_outputs|pre_classifier|sequence_summary|logits_proj|head)\.")


def hf_model_type(cfg: ModelConfig) -> str:
    return _FAMILY_TO_TYPE[cfg.family]


def _module(model_type: str) -> tuple[ModuleType, str, str]:
    if model_type not in _MODEL_TYPES:
        raise BertkitError(f"model_type '{model_type}' is not supported; bertkit reads: {', '.join(_MODEL_TYPES)}")
    return _MODEL_TYPES[model_type]


def config_to_hf(cfg: ModelConfig) -> dict[str, Any]:
    return _module(hf_model_type(cfg))[0].config_to_hf(cfg)


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    return _module(str(hf.get("model_type")))[0].config_from_hf(hf)


def _entries(cfg: ModelConfig, prefix: str, pooler: bool, heads: set[str]) -> list[Entry]:
    module = _module(hf_model_type(cfg))[0]
    return module.encoder_entries(cfg, prefix, pooler) + module.head_entries(cfg, heads)


# The *ForSequenceClassification classes whose head is bertkit's sequence classifier (dense + tanh on [CLS],
# dropout, one linear layer), so both directions give the same logits. BERT and ALBERT keep that dense in
# their pooler; RoBERTa's classification head holds it (`classifier.dense`), which is bertkit's pooler.
# ModernBERT's classifier is bertkit's modernbert task head (dense, activation, norm on [CLS] or the mean).
SEQUENCE_HEAD_TYPES = ("bert", "albert", "roberta", "modernbert")


def _sequence_head_entries(model_type: str, cfg: ModelConfig) -> list[Entry]:
    """The classifier past the encoder (and, for RoBERTa, the pooler), for a type in SEQUENCE_HEAD_TYPES."""
    if model_type == "roberta":
        return linear("encoder.pooler.dense", "classifier.dense") + linear("classifier", "classifier.out_proj")
    if model_type == "modernbert":
        return hf_modernbert.task_head_entries(cfg, "classifier")
    return linear("classifier", "classifier")


# config.json's problem_type -> the bertkit_model.json architecture of a fine-tuned model (`to_hf_task_checkpoint`
# writes the reverse), as config/task_kinds.py pairs them.
_PROBLEM_TYPES = {spec.hf_problem_type: spec.architecture for spec in SPECS.values() if spec.hf_problem_type}
# transformers' default problem_type of a sequence classifier's head: one output regresses, more classify.
_ONE_OUTPUT_PROBLEM, _CLASSES_PROBLEM = "regression", "single_label_classification"


# ---------------------------------------------------------------------------------------------- import


@dataclass
class HFModel:
    config: ModelConfig
    objective: ObjectiveConfig  # the heads the checkpoint carries, as objective weights
    # in bertkit's key space: a pretraining model's (encoder.*, mlm_head.*, ...) or a fine-tuned sequence
    # classifier's (encoder.*, classifier.*)
    weights: dict[str, torch.Tensor]
    architecture: str  # the HF class, config.json's architectures[0]
    # A *ForSequenceClassification checkpoint whose head bertkit reads: the architecture a bertkit fine-tuned
    # model of that kind has (sequence-classification, -multi-label, -regression) and its classes, in id order.
    task: str | None = None
    labels: list[str] = field(default_factory=list)
    # What that classifier reads: [CLS] ("cls") or the mean over the tokens (ModernBERT's classifier_pooling).
    pool: str = "cls"


def from_hf_state(hf_config: dict[str, Any], state: dict[str, torch.Tensor], source: str) -> HFModel:
    cfg = config_from_hf(hf_config)
    model_type = hf_model_type(cfg)
    _, prefix, _ = _module(model_type)
    architecture = str((hf_config.get("architectures") or [model_type])[0])
    # Task models store the encoder under `bert.` (etc.); base models store it at the root.
    has_prefix = any(key.startswith(prefix) for key in state)
    heads = {"mlm", "nsp", "sop", "rtd", "plm"}
    if model_type == "modernbert" and "decoder.bias" not in state:
        heads.discard("mlm")  # no MLM decoder: its `head` is a task classifier's, not the MLM head's
    entries = _entries(cfg, prefix if has_prefix else "", cfg.pooler, heads)
    # A sequence classifier's head is read where bertkit has the same one; other families' heads (DistilBERT's
    # pre_classifier + ReLU, ELECTRA's gelu head, ...) stay behind with the other task heads: the encoder alone.
    classifier = (
        architecture.endswith("ForSequenceClassification")
        and model_type in SEQUENCE_HEAD_TYPES
        and any(key.startswith("classifier.") for key in state)
    )
    if classifier:
        entries += _sequence_head_entries(model_type, cfg)
    weights = to_ours(entries, state, source)
    used = {key for entry in entries for key in entry.hf if key in state}
    leftover = [k for k in state if k not in used and not _IGNORED.search(k) and not _TASK_HEADS.match(k)]
    if leftover:
        raise BertkitError(f"{source} has tensors bertkit cannot place: {leftover[:3]}")
    needed = [e.ours for e in _entries(cfg, "", False, set())]
    absent = [key for key in needed if key not in weights]
    if absent:
        raise BertkitError(f"{source} lacks the encoder tensor for {absent[0]}; is num_hidden_layers right?")
    if cfg.pooler and "encoder.pooler.dense.weight" not in weights:
        cfg = cfg.model_copy(update={"pooler": False})  # e.g. a BertForMaskedLM checkpoint
    _check_shapes(cfg, weights, source)
    heads = {name.split("_head.")[0] for name in weights if "_head." in name}
    xlnet = cfg.family == "xlnet"  # an XLNet checkpoint, with or without its LM head, is a PLM model
    weights_of = {
        "mlm": 1.0 if "mlm" in heads or cfg.family == "electra" else 0.0,
        "plm": 1.0 if xlnet else 0.0,
        "nsp": 1.0 if "nsp" in heads else 0.0,
        "sop": 1.0 if "sop" in heads else 0.0,
        "rtd": 50.0 if cfg.family == "electra" else 0.0,
    }
    # A bare encoder (AutoModel checkpoint) carries no head: it is described as an MLM model without one.
    objective = ObjectiveConfig(**weights_of) if any(weights_of.values()) else ObjectiveConfig()
    if not classifier:
        return HFModel(cfg, objective, weights, architecture)
    task, labels = _sequence_task(hf_config, weights, cfg, source)
    pool = str(hf_config.get("classifier_pooling", "cls")) if model_type == "modernbert" else "cls"
    if pool not in ("cls", "mean"):
        raise BertkitError(f"{source}/config.json: classifier_pooling '{pool}' is not cls or mean")
    return HFModel(cfg, objective, weights, architecture, task, labels, pool)


def _sequence_task(
    hf_config: dict[str, Any], weights: dict[str, torch.Tensor], cfg: ModelConfig, source: str
) -> tuple[str, list[str]]:
    """(bertkit architecture, class names in id order) of a sequence classifier, from its config.json
    (problem_type, id2label) checked against its classifier's shape."""
    before = "head.dense.weight" if cfg.family == "modernbert" else "encoder.pooler.dense.weight"
    if "classifier.weight" not in weights or before not in weights:
        missing = "classifier.weight" if "classifier.weight" not in weights else f"the dense layer {before}"
        raise BertkitError(f"{source} is a sequence classifier without {missing}; is model.safetensors complete?")
    rows, width = weights["classifier.weight"].shape
    if width != cfg.hidden_size:
        raise BertkitError(
            f"{source}: the classifier reads {width} features but config.json says hidden_size {cfg.hidden_size}"
        )
    raw = hf_config.get("id2label") or {str(i): f"LABEL_{i}" for i in range(rows)}  # transformers' own default
    try:
        id2label = {int(key): str(name) for key, name in raw.items()}
    except (AttributeError, TypeError, ValueError):
        raise BertkitError(f"{source}/config.json: id2label must map class ids (0, 1, ...) to names") from None
    if sorted(id2label) != list(range(len(id2label))):
        raise BertkitError(f"{source}/config.json: id2label must number its classes 0..{len(id2label) - 1}")
    labels = [id2label[i] for i in range(len(id2label))]
    problem = hf_config.get("problem_type") or (_ONE_OUTPUT_PROBLEM if rows == 1 else _CLASSES_PROBLEM)
    if problem not in _PROBLEM_TYPES:
        raise BertkitError(
            f"{source}/config.json: problem_type '{problem}' is not one bertkit reads ({', '.join(_PROBLEM_TYPES)})"
        )
    task = _PROBLEM_TYPES[problem]
    if problem == _ONE_OUTPUT_PROBLEM:
        if rows != 1:
            raise BertkitError(f"{source}: a regression head has one output, this classifier has {rows}")
        return task, []  # as bertkit's own regression models: one score, no class names
    if rows != len(labels) or len(set(labels)) != len(labels):
        raise BertkitError(
            f"{source}: the classifier has {rows} outputs but config.json's id2label names {len(set(labels))} "
            "distinct classes; they must agree"
        )
    return task, labels


def _check_shapes(cfg: ModelConfig, weights: dict[str, torch.Tensor], source: str) -> None:
    """Every tensor must have the shape its config.json implies (built on the meta device: no memory)."""
    from bertkit.models.pretraining import build_pretraining_model

    heads = ObjectiveConfig(mlm=1.0, nsp=1.0 if cfg.pooler and cfg.family in ("bert", "bigbird") else 0.0,
                            sop=1.0 if cfg.pooler and cfg.family == "albert" else 0.0,
                            rtd=50.0 if cfg.family == "electra" else 0.0)  # fmt: skip
    if cfg.family == "xlnet":
        heads = ObjectiveConfig(mlm=0.0, plm=1.0)
    with torch.device("meta"):
        expected = build_pretraining_model(cfg, heads).state_dict()
    for key, value in weights.items():
        if key in expected and tuple(expected[key].shape) != tuple(value.shape):
            raise BertkitError(
                f"{source}: {key} has shape {tuple(value.shape)} but its config.json implies "
                f"{tuple(expected[key].shape)}; the weights do not fit the config"
            )


# ---------------------------------------------------------------------------------------------- export


def export_plan(cfg: ModelConfig, available_heads: set[str], head: HFHead) -> tuple[str, set[str], bool]:
    """(HF class, heads to write, whether to write the pooler) for the requested kind of checkpoint."""
    model_type = hf_model_type(cfg)
    _, _, cls = _module(model_type)
    if head == "generator" and model_type != "electra":
        raise BertkitError("--head generator exports ELECTRA's generator; this model is not an ELECTRA model")
    if head == "generator":
        return "ElectraForMaskedLM", {"generator"}, False
    if head == "base":
        return f"{cls}Model", set(), cfg.pooler and model_type not in ("distilbert", "xlnet")
    if model_type == "xlnet":
        # XLNet's one pretraining head is its LM head, for --head pretraining and mlm alike.
        return "XLNetLMHeadModel", {"plm"}, False
    if model_type == "electra":
        if head == "mlm":
            raise BertkitError(
                "the ELECTRA discriminator has no MLM head; use --head pretraining (ElectraForPreTraining), "
                "--head base, or --head generator (the generator, as ElectraForMaskedLM)"
            )
        return "ElectraForPreTraining", {"rtd"}, False
    pair = _PAIR_HEAD.get(model_type)
    if head == "pretraining" and pair and pair in available_heads:
        return f"{cls}ForPreTraining", {"mlm", pair}, True
    # BigBirdForMaskedLM keeps its base model's pooler; the other families' masked-LM classes have none.
    return f"{cls}ForMaskedLM", {"mlm"}, model_type == "big_bird"


def to_hf_checkpoint(
    cfg: ModelConfig, weights: dict[str, torch.Tensor], head: HFHead = "pretraining"
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """bertkit pretraining-model weights -> (HF config.json dict, HF state dict)."""
    available = {name.split("_head.")[0] for name in weights if "_head." in name}
    architecture, heads, pooler = export_plan(cfg, available, head)
    _, prefix, _ = _module(hf_model_type(cfg))
    if head == "generator":
        entries, config_cfg = hf_electra.generator_entries(cfg), cfg.generator_config()
    else:
        entries, config_cfg = _entries(cfg, prefix if head != "base" else "", pooler, heads), cfg
    missing = [e.ours for e in entries if e.ours not in weights]
    if missing:
        what = "head" if "_head." in missing[0] else "tensor"
        raise BertkitError(
            f"this model has no {what} {missing[0]} needed for {architecture}; "
            f"{'try --head base' if what == 'head' else 'is the model directory complete?'}"
        )
    hf_config = hf_electra.config_to_hf(config_cfg) if head == "generator" else config_to_hf(config_cfg)
    config = {**hf_config, "architectures": [architecture], "tie_word_embeddings": True}
    return config, to_hf(entries, weights)


# Fine-tuned bertkit models (bertkit_model.json `architecture`) and the HF class suffix each exports as.
TASK_CLASSES = {spec.architecture: spec.hf_class for spec in SPECS.values() if spec.hf_class}


def to_hf_task_checkpoint(
    cfg: ModelConfig, weights: dict[str, torch.Tensor], architecture: str, labels: list[str], pool: str = "cls"
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """A fine-tuned model (encoder.* + classifier.*) -> (HF config.json dict, HF state dict) for its family's
    *ForSequenceClassification, *ForTokenClassification or *ForQuestionAnswering class (encoder.* + qa_outputs.*),
    which gives the same logits."""
    if architecture not in TASK_CLASSES:
        raise BertkitError(
            f"--head classifier exports fine-tuned models; this one is a {architecture} model "
            "(use --head pretraining, mlm or base)"
        )
    spec = SPEC_BY_ARCHITECTURE[architecture]
    model_type = hf_model_type(cfg)
    module, prefix, cls = _module(model_type)
    name = f"{cls}{TASK_CLASSES[architecture]}"
    entries = module.encoder_entries(cfg, prefix, False)
    if model_type == "modernbert":
        # Every ModernBert*For* class: `head` (dense, activation, norm), dropout, `classifier`, as bertkit's
        # modernbert task models; the sequence classifier pools [CLS] or the mean (classifier_pooling).
        last = "qa_outputs" if spec.head == "span" else "classifier"
        entries += hf_modernbert.task_head_entries(cfg, last)
    elif spec.head == "span":
        # *ForQuestionAnswering: qa_outputs (hidden -> start, end) on every token, no pooler. BigBird's and
        # XLNet's QA classes put their own layers there, which bertkit's one linear head lacks.
        if model_type in ("big_bird", "xlnet"):
            raise BertkitError(
                f"{name} puts its own layers between the encoder and the start/end logits, which this {cfg.family} "
                "model (one linear qa_outputs layer) lacks; export the encoder with --head base"
            )
        entries += linear("qa_outputs", "qa_outputs")
    elif spec.head == "token":
        # Every family's ForTokenClassification is encoder + dropout + linear; BigBird's keeps its pooler.
        if model_type == "big_bird" and cfg.pooler:
            entries += module.encoder_entries(cfg, prefix, True)[len(entries) :]
        entries += linear("classifier", "classifier")
    else:
        if pool != "cls":
            raise BertkitError(
                f"this classifier reads mean-pooled states (task.pool={pool}), which no Hugging Face "
                "*ForSequenceClassification class does; export the encoder with --head base"
            )
        if model_type not in SEQUENCE_HEAD_TYPES or not cfg.pooler:
            raise BertkitError(
                f"{name} puts its own layers between [CLS] and the classifier, which this {cfg.family} classifier "
                "(a linear layer on the raw [CLS] state) lacks; export the encoder with --head base"
            )
        if model_type != "roberta":
            # BERT/ALBERT: the pooler (dense + tanh on [CLS]) is the base model's, then the classifier.
            entries += module.encoder_entries(cfg, prefix, True)[len(entries) :]
        entries += _sequence_head_entries(model_type, cfg)
    missing = [e.ours for e in entries if e.ours not in weights]
    if missing:
        raise BertkitError(f"this model has no tensor {missing[0]} needed for {name}; is the model directory complete?")
    regression = spec.hf_problem_type == _ONE_OUTPUT_PROBLEM
    base_config = config_to_hf(cfg)
    if model_type == "modernbert":
        base_config["classifier_pooling"] = pool
    if spec.head == "span":
        return {**base_config, "architectures": [name], "tie_word_embeddings": True}, to_hf(entries, weights)
    names = ["LABEL_0"] if regression else list(labels)
    config = {
        **base_config,
        "architectures": [name],
        "tie_word_embeddings": True,
        "id2label": {str(i): label for i, label in enumerate(names)},
        "label2id": {label: i for i, label in enumerate(names)},
    }
    if spec.hf_problem_type:
        config["problem_type"] = spec.hf_problem_type
    return config, to_hf(entries, weights)

"""A bertkit model directory: `model.safetensors` + `bertkit_model.json` + the tokenizer files.

`pretrain` and `finetune` write one as `RUN_DIR/model`. Every command that takes a model resolves its argument
here, through `resolve_model_path`, in one order: that directory, or the run directory around it, or a local
Hugging Face checkpoint directory (`config.json` + `model.safetensors` + tokenizer files) of a supported family,
read by bertkit/modelio/hf_dir.py through the explicit key maps in bertkit/interop; and, only where a teacher is
loaded (`hub=True`), a Hugging Face hub name (bertkit/modelio/hub.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.config.model import ModelConfig, saved_model_config
from bertkit.errors import BertkitError
from bertkit.fsutil import atomic_output_dir, read_json
from bertkit.modelio.layout import MODEL_META
from bertkit.modelio.weights import WEIGHTS, read_weights, save_weights
from bertkit.tokenizers.base import Tokenizer, load_tokenizer

FORMAT_VERSION = 1
# `bertkit export --to onnx` writes MODEL_META too (so an export names its task, labels and tokenizer like a
# model directory does), with "format": "onnx": a graph for inference, with no weights that training can load.
ONNX_FORMAT = "onnx"


def save_model_dir(
    path: Path,
    model: nn.Module | dict[str, torch.Tensor],
    model_cfg: ModelConfig,
    architecture: str,
    tokenizer: Tokenizer,
    extra: dict[str, Any] | None = None,
    overwrite: bool = True,
) -> Path:
    from bertkit.fsutil import write_json_atomic

    with atomic_output_dir(path, overwrite=overwrite) as tmp:
        save_weights(model, tmp / WEIGHTS)
        tokenizer.save(tmp)
        meta = {
            "bertkit_model": FORMAT_VERSION,
            "architecture": architecture,
            "model": model_cfg.model_dump(mode="json"),
            **(extra or {}),
        }
        write_json_atomic(tmp / MODEL_META, meta)
    return path


def resolve_model_path(spec: str | Path, hub: bool = False) -> Path:
    """The local model directory a model argument names: an existing directory as it is (a run directory gives
    its `model/`), else with `hub` a hub name or one of hub.ALIASES, resolved through the hub cache (HF_HOME,
    HF_HUB_OFFLINE). Without `hub` (every model argument but a teacher's) only a directory is a model."""
    if hub:
        from bertkit.modelio.hub import download, looks_like_path

        path = Path(spec).expanduser()
        if path.exists() or looks_like_path(str(spec)):
            return find_model_dir(path)  # one clear error for a missing or foreign directory
        return download(str(spec))
    return find_model_dir(Path(spec))


def find_model_dir(path: Path) -> Path:
    from bertkit.modelio.hf_dir import is_hf_dir

    path = Path(path)
    for candidate in (path, path / "model"):
        if (candidate / MODEL_META).is_file():
            return candidate
    if not path.exists():
        raise BertkitError(f"model directory not found: {path}")
    if is_hf_dir(path):
        return path
    raise BertkitError(
        f"{path} is not a bertkit model or run directory (no {MODEL_META}) nor a Hugging Face model directory "
        "(no config.json); pass the output of `bertkit pretrain` or `bertkit finetune`, or an HF checkpoint"
    )


def onnx_export_dir(path: Path) -> Path | None:
    """The directory of an ONNX export (`bertkit export --to onnx`) if `path` is one, else None."""
    for candidate in (Path(path), Path(path) / "model"):
        if (candidate / MODEL_META).is_file():
            meta = read_json(candidate / MODEL_META, "model metadata")
            return candidate if isinstance(meta, dict) and meta.get("format") == ONNX_FORMAT else None
    return None


def load_model_dir(
    path: str | Path, hub: bool = False
) -> tuple[Path, dict[str, Any], ModelConfig, dict[str, torch.Tensor], Tokenizer]:
    """Return (model dir, metadata, model config, weights, tokenizer) of the model `path` names (resolved by
    `resolve_model_path`; `hub`: a hub name too), checking they agree.

    Weights are in the key space of bertkit's pretraining model (`encoder.*`, `mlm_head.*`, ...) or of its
    fine-tuned models (`encoder.*`, `classifier.*`). For a Hugging Face directory the metadata names the HF
    architecture and the heads found, as `objective`; a BERT, ALBERT or RoBERTa *ForSequenceClassification
    checkpoint is described as a bertkit fine-tuned classifier (architecture, labels from id2label).
    """
    model_dir = resolve_model_path(path, hub)
    if (model_dir / MODEL_META).is_file():
        meta = read_json(model_dir / MODEL_META, "model metadata")
        if meta.get("format") == ONNX_FORMAT:
            # Every command that trains, distils or exports a model needs its PyTorch weights.
            raise BertkitError(
                f"{model_dir} is an ONNX export, which only `bertkit predict` and `bertkit embed` run; "
                f"pass the bertkit run it was exported from ({meta.get('onnx', {}).get('source', 'see its metadata')})"
            )
        try:
            cfg = saved_model_config(meta["model"])
        except Exception as err:
            raise BertkitError(f"{model_dir / MODEL_META} has an invalid model section: {err}") from None
        weights = read_weights(model_dir / WEIGHTS)
    else:
        from bertkit.modelio.hf_dir import load_hf_dir

        hf = load_hf_dir(model_dir)
        cfg, weights = hf.config, hf.weights
        meta = {
            "architecture": f"huggingface:{hf.architecture}",
            "model": cfg.model_dump(mode="json"),
            "objective": hf.objective.model_dump(mode="json"),
        }
        if hf.task is not None:
            # A classifier whose head bertkit reads is described as `bertkit finetune` describes its own (a
            # [CLS] classifier, classes in id2label order), so it predicts, exports and teaches like one.
            meta.update(architecture=hf.task, huggingface=hf.architecture, labels=hf.labels, task={"pool": hf.pool})
        from bertkit.modelio.st_dir import read_st_embedding

        embedding = read_st_embedding(model_dir)
        if embedding is not None:  # a sentence-transformers directory: how its vectors are pooled
            meta["embedding"] = embedding
    tokenizer = load_tokenizer(model_dir)
    if tokenizer.vocab_size != cfg.vocab_size:
        raise BertkitError(
            f"{model_dir}: tokenizer has {tokenizer.vocab_size} tokens but the model's vocabulary is {cfg.vocab_size}"
        )
    return model_dir, meta, cfg, weights, tokenizer


def encoder_weights(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The encoder's tensors out of a full model's state dict (heads dropped)."""
    return {k.removeprefix("encoder."): v for k, v in weights.items() if k.startswith("encoder.")}

def window_length(cfg: ModelConfig, task: dict[str, Any], max_seq_len: int | None) -> int:
    """Tokens per input: --max-seq-len, else what the model was fine-tuned with, never more than its positions."""
    limit = cfg.max_position_embeddings - cfg.position_offset
    return min(max_seq_len if max_seq_len is not None else task.get("max_seq_len") or limit, limit)

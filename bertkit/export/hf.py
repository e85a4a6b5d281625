"""`bertkit export --to hf`: a bertkit model or run directory in, a Hugging Face checkpoint directory out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError
from bertkit.fsutil import atomic_output_dir
from bertkit.interop.hf import TASK_CLASSES, HFHead, to_hf_checkpoint, to_hf_task_checkpoint
from bertkit.modelio.hf_dir import HF_CONFIG, HF_WEIGHTS, write_hf_dir
from bertkit.modelio.modeldir import load_model_dir

HEADS: tuple[str, ...] = ("auto", "pretraining", "mlm", "base", "generator", "classifier")


def export_hf(model_path: Path, output: Path, head: str = "auto", overwrite: bool = False) -> dict[str, Any]:
    """Write config.json, model.safetensors and the tokenizer files; `head` picks the HF class:
    `auto` (`classifier` for a fine-tuned model, else `pretraining`), `classifier` (a fine-tuned model as
    its family's *ForSequenceClassification or *ForTokenClassification, labels in id2label),
    `pretraining` (AutoModelForPreTraining: every pretraining head the family has in HF), `mlm`
    (AutoModelForMaskedLM), `base` (AutoModel, the encoder alone) or, for ELECTRA, `generator`
    (ElectraForMaskedLM). Each loads into its class with no
    missing or unexpected weights."""
    if head not in HEADS:
        raise BertkitError(f"--head must be one of {', '.join(HEADS)}, got '{head}'")
    model_dir, meta, cfg, weights, tokenizer = load_model_dir(model_path)
    architecture = str(meta.get("architecture"))
    if head == "auto":
        head = "classifier" if architecture in TASK_CLASSES else "pretraining"
    if head == "classifier":
        task = meta.get("task") or {}
        labels = list(meta.get("labels") or [])
        config, state = to_hf_task_checkpoint(cfg, weights, architecture, labels, task.get("pool", "cls"))
    else:
        hf_head: HFHead = head  # type: ignore[assignment]
        config, state = to_hf_checkpoint(cfg, weights, hf_head)
    with atomic_output_dir(output, overwrite) as tmp:
        write_hf_dir(tmp, config, state)
        tokenizer.save(tmp)
        files = sorted(p.name for p in tmp.iterdir())
    return {
        "output": str(output),
        "source": str(model_dir),
        "architecture": config["architectures"][0],
        "model_type": config["model_type"],
        "tensors": len(state),
        "parameters": sum(t.numel() for t in state.values()),
        "files": files,
        "config": HF_CONFIG,
        "weights": HF_WEIGHTS,
    }

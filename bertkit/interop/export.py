"""`bertkit export --to hf`: a bertkit model or run directory in, a Hugging Face checkpoint directory out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError
from bertkit.fsutil import atomic_output_dir
from bertkit.interop.hf import HF_CONFIG, HF_WEIGHTS, HFHead, to_hf_checkpoint, write_hf_dir
from bertkit.modeldir import load_model_dir

HEADS: tuple[HFHead, ...] = ("pretraining", "mlm", "base", "generator")


def export_hf(model_path: Path, output: Path, head: str = "pretraining", overwrite: bool = False) -> dict[str, Any]:
    """Write config.json, model.safetensors and the tokenizer files; `head` picks the HF class:
    `pretraining` (AutoModelForPreTraining: every pretraining head the family has in HF), `mlm`
    (AutoModelForMaskedLM), `base` (AutoModel, the encoder alone) or, for ELECTRA, `generator`
    (ElectraForMaskedLM). Each loads into its class with no
    missing or unexpected weights."""
    if head not in HEADS:
        raise BertkitError(f"--head must be one of {', '.join(HEADS)}, got '{head}'")
    model_dir, meta, cfg, weights, tokenizer = load_model_dir(model_path)
    config, state = to_hf_checkpoint(cfg, weights, head)  # type: ignore[arg-type]
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

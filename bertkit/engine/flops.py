"""Model FLOPs utilisation (MFU): achieved training FLOP/s over the device's peak.

Training FLOPs per token follow the usual estimate (Kaplan et al. 2020; PaLM appendix B):
    6 * N  +  12 * layers * hidden * seq_len
with N the non-embedding parameters (embedding lookups do no matmul; a decoder tied to the word
embeddings is not counted either; a layer ALBERT shares counts once per layer that applies it),
forward + backward = 3 x forward. The same formula is used for
every model we compare, so MFU figures are comparable with each other.

Peaks assumed (dense, no sparsity), overridable with `engine.peak_tflops`:
- NVIDIA GPUs: the datasheet's bf16/fp16 tensor-core peak for bf16/fp16, TF32 for fp32 (table below).
- CPU: threads x clock x FLOP/cycle of the detected ISA (bertkit/engine/cpu.py): 64 fp32 FLOP/cycle with
  AVX-512, 32 with AVX2; for bf16, 2,048 with AMX and 128 with AVX512-BF16, else the fp32 figure (emulated
  bf16 has no faster units). An upper bound (one FMA unit halves it): set engine.peak_tflops for your CPU.
"""

from __future__ import annotations

import torch
from torch import nn

# name fragment -> (bf16/fp16 dense TFLOP/s, fp32 (TF32) TFLOP/s)
GPU_PEAK_TFLOPS: dict[str, tuple[float, float]] = {
    "H200": (989.0, 494.0),
    "H100": (989.0, 494.0),
    "A100": (312.0, 156.0),
    "A10G": (125.0, 62.5),
    "L40S": (362.0, 183.0),
    "L4": (121.0, 60.0),
    "V100": (125.0, 15.7),
    "T4": (65.0, 8.1),
}


def non_embedding_parameters(model: nn.Module) -> int:
    """The parameters a token's forward pass multiplies by, once per use: ALBERT's shared layers count once for
    every layer that applies them (compute, not storage; `BertEncoder.reused_parameters`)."""
    embedding_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    stored = sum(p.numel() for p in model.parameters() if id(p) not in embedding_ids)
    return stored + sum(m.reused_parameters() for m in model.modules() if hasattr(m, "reused_parameters"))


def _shape(model: nn.Module) -> tuple[int, int] | None:
    """(layers, hidden) from a bertkit or Hugging Face config found on the model or a submodule."""
    for module in model.modules():
        cfg = getattr(module, "config", None)
        layers = getattr(cfg, "num_layers", None) or getattr(cfg, "num_hidden_layers", None)
        hidden = getattr(cfg, "hidden_size", None)
        if layers and hidden:
            return int(layers), int(hidden)
    return None


def training_flops(model: nn.Module, tokens: int, seq_len: float, params: int | None = None) -> float:
    """FLOPs of one training pass over `tokens` tokens in sequences of (mean) length `seq_len`."""
    n = non_embedding_parameters(model) if params is None else params
    shape = _shape(model)
    attention = 12 * shape[0] * shape[1] * seq_len if shape else 0.0
    return tokens * (6 * n + attention)


def peak_flops(device: torch.device, precision: str, override_tflops: float | None = None) -> float:
    if override_tflops:
        return override_tflops * 1e12
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for fragment, (half, single) in GPU_PEAK_TFLOPS.items():
            if fragment in name:
                return (half if precision in ("bf16", "fp16") else single) * 1e12
        return 100e12  # unknown GPU: an order of magnitude; set engine.peak_tflops
    from bertkit.engine.cpu import cpu_peak_flops

    return cpu_peak_flops(precision)

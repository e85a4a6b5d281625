"""The machinery shared by the per-family key maps: one entry pairs a bertkit tensor with the Hugging Face
tensor(s) it is made of. bertkit fuses query/key/value into one `qkv` matrix (one matmul instead of
three), so such an entry names three HF tensors, concatenated in q, k, v order on import and split on export.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bertkit.errors import BertkitError


@dataclass(frozen=True)
class Entry:
    ours: str
    hf: tuple[str, ...]


def linear(ours: str, hf: str) -> list[Entry]:
    """A Linear or LayerNorm: weight and bias under the same two names."""
    return [Entry(f"{ours}.weight", (f"{hf}.weight",)), Entry(f"{ours}.bias", (f"{hf}.bias",))]


def fused(ours: str, hf_parts: tuple[str, str, str]) -> list[Entry]:
    return [Entry(f"{ours}.{kind}", tuple(f"{part}.{kind}" for part in hf_parts)) for kind in ("weight", "bias")]


def tensor(ours: str, hf: str) -> list[Entry]:
    return [Entry(ours, (hf,))]


def to_ours(entries: list[Entry], hf_state: dict[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """Every entry whose HF tensors are present; an entry half present (a lone `query`) is an error."""
    out: dict[str, torch.Tensor] = {}
    for entry in entries:
        present = [key in hf_state for key in entry.hf]
        if all(present):
            parts = [hf_state[key] for key in entry.hf]
            out[entry.ours] = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
        elif any(present):
            missing = entry.hf[present.index(False)]
            raise BertkitError(f"{source} lacks {missing} (it has the other parts of {entry.ours})")
    return out


def to_hf(entries: list[Entry], state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for entry in entries:
        if entry.ours not in state:
            continue
        value = state[entry.ours]
        chunks = value.chunk(len(entry.hf), dim=0) if len(entry.hf) > 1 else (value,)
        for key, chunk in zip(entry.hf, chunks, strict=True):
            out[key] = chunk.contiguous().clone()
    return out

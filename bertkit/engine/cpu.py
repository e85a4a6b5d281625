"""What this CPU can do: its vector ISA, whether bf16 is native, and the peak FLOP/s that MFU divides by.

bf16 autocast on a CPU without native bf16 (AVX512-BF16 or AMX) is emulated through fp32 conversions and
runs tens of times slower than fp32 (measured on a 2-core AMD EPYC without AVX-512: 1.3 GFLOP/s bf16
against 186 GFLOP/s fp32). Nothing fails, so a user only sees a run that crawls; `bf16_warning` says so.
"""

from __future__ import annotations

import contextlib
import functools
import time
from dataclasses import dataclass
from pathlib import Path

import torch

DEFAULT_GHZ = 2.5
# fp32 FLOP per cycle per core for torch's CPU capability: two FMA units x lanes x 2 (multiply + add).
# An upper bound: many cores have one AVX-512 FMA unit, and AVX-512 clocks lower.
FP32_FLOP_PER_CYCLE = {"AVX512": 64, "AVX2": 32, "DEFAULT": 8}
# bf16 FLOP per cycle per core where it is native: AMX tiles (Sapphire Rapids: 1,024 bf16 FMAs per cycle),
# or AVX512-BF16 dot products (two units x 32 bf16 pairs x 2).
AMX_BF16_FLOP_PER_CYCLE = 2048
AVX512_BF16_FLOP_PER_CYCLE = 128
# A bf16 matmul this many times slower than fp32 is emulated, whatever the flags say.
SLOW_BF16_RATIO = 3.0


@dataclass(frozen=True)
class CpuInfo:
    capability: str  # torch's: DEFAULT, AVX2, AVX512 (ARM: NEON, SVE...)
    flags: frozenset[str]
    ghz: float

    @property
    def native_bf16(self) -> bool:
        return bool({"avx512_bf16", "amx_bf16"} & self.flags) or "bf16" in self.flags  # "bf16": ARMv8.6

    def flop_per_cycle(self, precision: str) -> int:
        if precision == "bf16" and "amx_bf16" in self.flags:
            return AMX_BF16_FLOP_PER_CYCLE
        if precision == "bf16" and "avx512_bf16" in self.flags:
            return AVX512_BF16_FLOP_PER_CYCLE
        # Emulated bf16 has no faster units than fp32: the fp32 peak is what the hardware offers.
        return FP32_FLOP_PER_CYCLE.get(self.capability, FP32_FLOP_PER_CYCLE["DEFAULT"])


@functools.cache
def cpu_info() -> CpuInfo:
    """Flags and clock from /proc/cpuinfo (Linux); elsewhere the capability alone and 2.5 GHz."""
    flags: set[str] = set()
    ghz = DEFAULT_GHZ
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("flags", "Features") and not flags:
            flags = set(value.split())
        elif key == "cpu MHz" and ghz == DEFAULT_GHZ:
            with contextlib.suppress(ValueError):
                ghz = float(value) / 1000 or DEFAULT_GHZ
    return CpuInfo(torch.backends.cpu.get_cpu_capability(), frozenset(flags), ghz)


def cpu_peak_flops(precision: str, threads: int | None = None) -> float:
    info = cpu_info()
    return (threads or torch.get_num_threads()) * info.ghz * 1e9 * info.flop_per_cycle(precision)


def _matmul_seconds(a: torch.Tensor, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - start)
    return best


@functools.cache
def bf16_slowdown(size: int = 256, repeats: int = 5) -> float:
    """How many times slower a bf16 matmul runs than fp32 here (a probe of a few milliseconds). Both are
    warmed up first: the first calls pick kernels and start the thread pool."""
    a = torch.randn(size, size, generator=torch.Generator().manual_seed(0))
    b = a.to(torch.bfloat16)
    for _ in range(2):
        a @ a, b @ b
    return _matmul_seconds(b, repeats) / max(_matmul_seconds(a, repeats), 1e-9)


@dataclass(frozen=True)
class LayerShape:
    """The width of the model a run trains: what the precision calibration times."""

    hidden: int
    heads: int
    intermediate: int
    vocab: int  # the output projection over the vocabulary (a masked LM's decoder); 0: none


def _step_seconds(layer: torch.nn.Module, decoder: torch.nn.Module | None, x: torch.Tensor, bf16: bool,
                  repeats: int) -> float:  # fmt: skip
    best = float("inf")
    for _ in range(repeats + 1):  # the first is a warm-up (kernel choice, thread pool)
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            h = layer(x)
            out = decoder(h[:, : h.shape[1] // 8]) if decoder is not None else h  # the masked eighth is decoded
        out.float().square().mean().backward()
        best = min(best, time.perf_counter() - start)
    return best


@functools.cache
def bf16_step_ratio(shape: LayerShape, tokens: int = 512, repeats: int = 2) -> float:
    """bf16 autocast's time over fp32's for one transformer layer's forward and backward at `shape`, on `tokens`
    tokens (4 sequences of 128), with the vocabulary projection of an eighth of them (the masked ones) when there is
    one: a calibration of about a second at base size. Whether bf16 pays on a CPU depends on the CPU and on the
    width (casts cost more than they save on small matrices), so it is measured, not assumed. Global random state
    is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(shape.hidden, shape.heads, shape.intermediate, dropout=0.0,
                                                 activation="gelu", batch_first=True)  # fmt: skip
        decoder = torch.nn.Linear(shape.hidden, shape.vocab) if shape.vocab else None
        x = torch.randn(max(1, tokens // 128), min(128, tokens), shape.hidden)
        fp32 = _step_seconds(layer, decoder, x, False, repeats)
        bf16 = _step_seconds(layer, decoder, x, True, repeats)
    return bf16 / max(fp32, 1e-9)


def bf16_warning() -> str | None:
    """One warning line when bf16 autocast would be emulated on this CPU, else None. The flags decide
    first (no probe on a CPU with native bf16); the probe confirms and gives the figure."""
    info = cpu_info()
    if info.native_bf16:
        return None
    ratio = bf16_slowdown()
    if ratio < SLOW_BF16_RATIO:
        return None
    return (
        f"warning: this CPU ({info.capability}) has no native bf16 (AVX512-BF16 or AMX), so bf16 autocast is "
        f"emulated: a bf16 matmul ran {ratio:.0f}x slower than fp32 here; use --set engine.precision=fp32"
    )

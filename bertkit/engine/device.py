"""Device and precision selection."""

from __future__ import annotations

import contextlib
import os

import torch

from bertkit.config.schema import EngineConfig
from bertkit.engine.cpu import LayerShape
from bertkit.errors import BertkitError


def check_device_request(cfg: EngineConfig) -> None:
    """The device and precision the recipe asks for exist here: one error line, before any output is written."""
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise BertkitError(
            "the recipe asks for a GPU (engine.device=cuda) but none is available; use --set engine.device=cpu or auto"
        )
    if cfg.precision == "fp16" and (cfg.device == "cpu" or not torch.cuda.is_available()):
        raise BertkitError(
            "engine.precision=fp16 (dynamic loss scaling) needs a GPU; on CPU use --set engine.precision=bf16 or fp32"
        )


def resolve_device(cfg: EngineConfig) -> torch.device:
    """The device of this process: under a launcher, GPU number LOCAL_RANK."""
    from bertkit.engine.dist import local_rank

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    check_device_request(cfg)
    if cfg.device == "cpu" or (cfg.device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    index = local_rank() if cfg.backend != "single" else torch.cuda.current_device()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


# Overrides the CPU's bf16 detection for engine.precision=auto: 0 treats this CPU as emulating bf16 (fp32),
# 1 as running it natively (bf16). For machines whose flags mislead (some VMs hide them), and for test suites
# that compare runs exactly and want fp32 on every CPU.
CPU_BF16_ENV = "BERTKIT_CPU_BF16"


def cpu_runs_bf16() -> bool:
    """Whether this CPU runs bf16 natively (AVX512-BF16, AMX or ARM's bf16), or what BERTKIT_CPU_BF16 says."""
    forced = os.environ.get(CPU_BF16_ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    from bertkit.engine.cpu import cpu_info

    return cpu_info().native_bf16


def resolve_precision(requested: str, device: torch.device,
                      shape: LayerShape | None = None) -> tuple[str, str | None]:  # fmt: skip
    """The precision a run trains in, and for `auto` the one line that says what it picked and why. On a CPU that
    runs bf16 natively, `auto` times bf16 autocast against fp32 at the model's `shape` (bf16_step_ratio) and picks
    the faster; BERTKIT_CPU_BF16 decides without timing."""
    if requested != "auto":
        return requested, None
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        # Compute capability 8.0 (Ampere) and later have bf16 tensor cores; torch.cuda.is_bf16_supported() also
        # says yes where bf16 is emulated (Turing, Volta), which is slower than fp32 there.
        if torch.cuda.get_device_capability(device) >= (8, 0):
            return "bf16", f"precision: bf16 autocast (engine.precision=auto; {name} runs bf16 natively)"
        return "fp32", (
            f"precision: fp32 (engine.precision=auto; {name} has no native bf16; --set engine.precision=fp16 "
            "for half precision with loss scaling)"
        )
    if cpu_runs_bf16():
        forced = os.environ.get(CPU_BF16_ENV, "").strip() == "1"
        if forced or shape is None:
            why = f"{CPU_BF16_ENV}=1" if forced else "this CPU runs bf16 natively: AMX or AVX512-BF16"
            return "bf16", f"precision: bf16 autocast (engine.precision=auto; {why})"
        from bertkit.engine.cpu import bf16_step_ratio

        ratio = bf16_step_ratio(shape)
        width = f"a layer {shape.hidden} wide" + (f" and a {shape.vocab:,}-token output" if shape.vocab else "")
        if ratio < 1.0:
            return "bf16", (f"precision: bf16 autocast (engine.precision=auto; measured {1 / ratio:.1f}x faster than "
                            f"fp32 on this CPU for {width})")  # fmt: skip
        return "fp32", (f"precision: fp32 (engine.precision=auto; bf16 autocast measured {ratio:.1f}x slower than fp32 "
                        f"on this CPU for {width})")  # fmt: skip
    return "fp32", (
        "precision: fp32 (engine.precision=auto; this CPU has no native bf16 (AVX512-BF16 or AMX), where bf16 "
        "autocast would be emulated and many times slower)"
    )


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bf16/fp16 autocast keeps fp32 master weights; matmuls run in half precision."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    if precision == "fp16":
        return torch.autocast(device_type=device.type, dtype=torch.float16)
    return contextlib.nullcontext()

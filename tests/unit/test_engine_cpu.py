"""CPU capability: emulated bf16 is detected and reported in one line; MFU's CPU peak follows the ISA."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bertkit.config.schema import EngineConfig, TrainConfig
from bertkit.engine import cpu
from bertkit.engine.cpu import CpuInfo, bf16_slowdown, bf16_warning, cpu_peak_flops
from bertkit.engine.flops import peak_flops
from bertkit.engine.loop import train


def fake(monkeypatch: pytest.MonkeyPatch, capability: str, flags: set[str], ghz: float = 2.0) -> None:
    monkeypatch.setattr(cpu, "cpu_info", lambda: CpuInfo(capability, frozenset(flags), ghz))


def test_peak_follows_the_isa(monkeypatch: pytest.MonkeyPatch) -> None:
    fake(monkeypatch, "AVX2", {"avx2", "fma"})
    assert cpu_peak_flops("fp32", threads=2) == 2 * 2.0e9 * 32
    assert cpu_peak_flops("bf16", threads=2) == 2 * 2.0e9 * 32  # emulated: no faster units than fp32
    fake(monkeypatch, "AVX512", {"avx512f", "avx512_bf16", "amx_bf16"})
    assert cpu_peak_flops("fp32", threads=4) == 4 * 2.0e9 * 64
    assert cpu_peak_flops("bf16", threads=4) == 4 * 2.0e9 * 2048
    assert peak_flops(torch.device("cpu"), "bf16") == cpu_peak_flops("bf16")
    assert peak_flops(torch.device("cpu"), "bf16", override_tflops=1.5) == 1.5e12


def test_native_bf16_needs_no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    fake(monkeypatch, "AVX512", {"avx512f", "avx512_bf16"})
    monkeypatch.setattr(cpu, "bf16_slowdown", lambda: pytest.fail("probed a CPU with native bf16"))
    assert bf16_warning() is None


def test_emulated_bf16_is_one_warning_line(monkeypatch: pytest.MonkeyPatch) -> None:
    fake(monkeypatch, "AVX2", {"avx2", "fma"})
    monkeypatch.setattr(cpu, "bf16_slowdown", lambda: 34.0)
    assert bf16_warning() == (
        "warning: this CPU (AVX2) has no native bf16 (AVX512-BF16 or AMX), so bf16 autocast is emulated: a bf16 "
        "matmul ran 34x slower than fp32 here; use --set engine.precision=fp32"
    )
    monkeypatch.setattr(cpu, "bf16_slowdown", lambda: 1.2)  # flags missing but the probe is fast: say nothing
    assert bf16_warning() is None


def test_the_probe_measures_this_machine() -> None:
    """Whatever this CPU is, the probe returns a finite ratio, and the warning agrees with it."""
    ratio = bf16_slowdown()
    assert 0 < ratio < 1000
    if cpu.cpu_info().native_bf16 or ratio < cpu.SLOW_BF16_RATIO:
        assert bf16_warning() is None
    else:
        assert f"ran {ratio:.0f}x slower" in (bf16_warning() or "")


def test_a_bf16_cpu_run_warns_once_at_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from tests.unit.test_engine_loop import OPTIM, SCHEDULE, Regression, make_model, objective

    fake(monkeypatch, "AVX2", {"avx2"})
    monkeypatch.setattr(cpu, "bf16_slowdown", lambda: 34.0)
    engine = EngineConfig(device="cpu", precision="bf16")
    train(make_model(), objective, Regression(8), tmp_path, TrainConfig(steps=2, batch_size=8), OPTIM, SCHEDULE,
          engine, quiet=True)  # fmt: skip
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(lines) == 1 and "bf16 autocast is emulated" in lines[0]

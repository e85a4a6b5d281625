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


def test_auto_precision_follows_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """engine.precision=auto: bf16 on a CPU with AMX or AVX512-BF16, fp32 on one that would emulate it, each
    with one line that says why; explicit values are kept as given; BERTKIT_CPU_BF16 overrides the flags."""
    from bertkit.engine.device import resolve_precision

    here = torch.device("cpu")
    monkeypatch.delenv("BERTKIT_CPU_BF16", raising=False)
    fake(monkeypatch, "AVX2", {"avx2", "fma"})
    precision, line = resolve_precision("auto", here)
    assert precision == "fp32" and "no native bf16" in (line or "")
    fake(monkeypatch, "AVX512", {"avx512f", "amx_bf16"})
    precision, line = resolve_precision("auto", here)
    assert precision == "bf16" and "runs bf16 natively" in (line or "")
    for explicit in ("fp32", "bf16"):
        assert resolve_precision(explicit, here) == (explicit, None)
    monkeypatch.setenv("BERTKIT_CPU_BF16", "0")
    assert resolve_precision("auto", here)[0] == "fp32"
    fake(monkeypatch, "AVX2", {"avx2"})
    monkeypatch.setenv("BERTKIT_CPU_BF16", "1")
    assert resolve_precision("auto", here)[0] == "bf16"


def test_auto_precision_on_a_native_bf16_cpu_takes_what_it_measures(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the model's width, `auto` times bf16 autocast against fp32 (a CPU with AMX ran a tiny model 2.2x slower
    in bf16) and keeps the faster, saying the figure; BERTKIT_CPU_BF16=1 takes bf16 without timing."""
    from bertkit.engine.cpu import LayerShape
    from bertkit.engine.device import resolve_precision

    here, shape = torch.device("cpu"), LayerShape(128, 2, 512, 0)
    monkeypatch.delenv("BERTKIT_CPU_BF16", raising=False)
    fake(monkeypatch, "AVX512", {"avx512f", "amx_bf16"})
    ratios = iter([2.2, 0.5])
    monkeypatch.setattr(cpu, "bf16_step_ratio", lambda _: next(ratios))
    precision, line = resolve_precision("auto", here, shape)
    assert precision == "fp32" and "bf16 autocast measured 2.2x slower than fp32" in (line or "")
    precision, line = resolve_precision("auto", here, shape)
    assert precision == "bf16" and "measured 2.0x faster than fp32" in (line or "") and "128 wide" in (line or "")
    monkeypatch.setenv("BERTKIT_CPU_BF16", "1")
    assert resolve_precision("auto", here, shape) == ("bf16", "precision: bf16 autocast (engine.precision=auto; "
                                                       "BERTKIT_CPU_BF16=1)")  # fmt: skip


def test_the_calibration_measures_without_touching_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real timing at a small width (what a run measures at start): a positive ratio, and the global random state
    (dropout masks, data order) exactly as it was."""
    from bertkit.engine.cpu import LayerShape, bf16_step_ratio

    torch.manual_seed(123)
    before = torch.get_rng_state()
    ratio = bf16_step_ratio.__wrapped__(LayerShape(64, 2, 128, 1000), tokens=256, repeats=1)
    assert ratio > 0 and torch.equal(torch.get_rng_state(), before)


def test_this_cpu_gets_what_its_flags_say(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the machine running the tests, without the override: bf16 exactly where the CPU has native bf16."""
    from bertkit.engine.device import resolve_precision

    monkeypatch.delenv("BERTKIT_CPU_BF16", raising=False)
    expected = "bf16" if cpu.cpu_info().native_bf16 else "fp32"
    assert resolve_precision("auto", torch.device("cpu"))[0] == expected


def test_an_auto_run_says_its_precision_once_and_records_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The default recipe setting is auto; the run says what it picked in one line at start (not with --quiet)
    and the result records it."""
    from tests.unit.test_engine_loop import OPTIM, SCHEDULE, Regression, make_model, objective

    assert EngineConfig().precision == "auto"
    engine = EngineConfig(device="cpu", tensorboard=False)
    result = train(make_model(), objective, Regression(8), tmp_path / "said", TrainConfig(steps=2, batch_size=8),
                   OPTIM, SCHEDULE, engine)  # fmt: skip
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("precision:")]
    assert lines == [lines[0]] and "engine.precision=auto" in lines[0]
    assert result.precision == "fp32"  # the suite's conftest sets BERTKIT_CPU_BF16=0
    train(make_model(), objective, Regression(8), tmp_path / "quiet", TrainConfig(steps=2, batch_size=8),
          OPTIM, SCHEDULE, engine, quiet=True)  # fmt: skip
    assert "precision:" not in capsys.readouterr().err

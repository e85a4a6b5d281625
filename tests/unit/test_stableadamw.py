"""StableAdamW (optim.name=stableadamw, from torch-optimi) against a reference written from the paper, the
1-sqrt decay of the warmup-stable-decay schedule against its formula, and the one line when optimi is missing."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
from cli_helpers import run_error
from torch import nn

from bertkit.config.schema import EngineConfig, OptimConfig, ScheduleConfig, check_engine_optimizer
from bertkit.engine.optim import build_optimizer, build_scheduler, lr_multiplier, parameter_groups
from bertkit.errors import BertkitError

STEPS = 6


def _model() -> nn.Module:
    torch.manual_seed(0)
    # float64: the reference and optimi order their floating-point operations differently; in double precision
    # that difference is far below the tolerance, so any real disagreement in the update rule shows.
    return nn.Sequential(nn.Linear(6, 5), nn.LayerNorm(5), nn.Linear(5, 3)).double()


def _loss(model: nn.Module, x: torch.Tensor, step: int) -> torch.Tensor:
    # The loss grows 10x per step, so gradients outgrow the second-moment estimate and the clip engages.
    return model(x).pow(2).sum() * 10.0**step


def reference_stableadamw(
    model: nn.Module, x: torch.Tensor, cfg: OptimConfig, lrs: list[float]
) -> tuple[dict[str, torch.Tensor], int]:
    """Wortsman et al. 2023 ("Stable and low-precision training for large-scale vision-language models"),
    Algorithm 2, per parameter tensor, with decay only on the tensors BERT decays (2-D weights):

        b1_t = b1 (1 - b1^(t-1)) / (1 - b1^t),  b2_t likewise       (Adafactor's bias correction in the betas)
        u_t = b1_t u + (1 - b1_t) g,  v_t = b2_t v + (1 - b2_t) g^2
        RMS_t = sqrt(mean(g^2 / max(v_t, eps^2)))
        eta_t = lr_t / max(1, RMS_t)
        theta_t = theta - eta_t wd theta - eta_t u_t / (sqrt(v_t) + eps)

    Returns the final weights and how many (tensor, step) updates were clipped."""
    b1, b2 = cfg.betas
    params = dict(model.named_parameters())
    u = {n: torch.zeros_like(p) for n, p in params.items()}
    v = {n: torch.zeros_like(p) for n, p in params.items()}
    clipped = 0
    for t in range(1, len(lrs) + 1):
        model.zero_grad()
        _loss(model, x, t - 1).backward()
        b1_t = b1 * (1 - b1 ** (t - 1)) / (1 - b1**t)
        b2_t = b2 * (1 - b2 ** (t - 1)) / (1 - b2**t)
        with torch.no_grad():
            for name, p in params.items():
                g = p.grad
                u[name] = b1_t * u[name] + (1 - b1_t) * g
                v[name] = b2_t * v[name] + (1 - b2_t) * g * g
                rms = math.sqrt(float((g * g / torch.clamp(v[name], min=cfg.eps**2)).mean()))
                clipped += rms > 1
                eta = lrs[t - 1] / max(1.0, rms)
                wd = cfg.weight_decay if p.ndim >= 2 else 0.0
                p.copy_(p - eta * wd * p - eta * u[name] / (v[name].sqrt() + cfg.eps))
    return {n: p.detach().clone() for n, p in params.items()}, clipped


def test_stableadamw_step_matches_the_paper() -> None:
    cfg = OptimConfig(name="stableadamw", lr=1e-2, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.1)
    schedule = ScheduleConfig(warmup_steps=2, decay="wsd", decay_fraction=0.5, decay_shape="1-sqrt")
    x = torch.randn(4, 6, dtype=torch.float64)
    model = _model()
    optimizer = build_optimizer(model, cfg)
    assert type(optimizer).__name__ == "StableAdamW"
    # The same groups, hence the same weight-decay exclusions, as AdamW's.
    expected_groups = parameter_groups(model, cfg.weight_decay)
    assert [[id(p) for p in g["params"]] for g in optimizer.param_groups] == [
        [id(p) for p in g["params"]] for g in expected_groups
    ]
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0]
    scheduler = build_scheduler(optimizer, STEPS, schedule)
    lrs = []
    for step in range(STEPS):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.zero_grad()
        _loss(model, x, step).backward()
        optimizer.step()
        scheduler.step()
    assert lrs == pytest.approx([cfg.lr * lr_multiplier(s, STEPS, schedule) for s in range(STEPS)], rel=1e-15)

    expected, clipped = reference_stableadamw(_model(), x, cfg, lrs)
    assert clipped >= STEPS  # the clip did engage: this is not just AdamW agreeing with AdamW
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.detach(), expected[name], rtol=1e-12, atol=1e-14, msg=name)


def test_stableadamw_is_refused_under_deepspeed() -> None:
    with pytest.raises(ValueError, match="optim.name=stableadamw is not supported with engine.backend=deepspeed"):
        check_engine_optimizer(EngineConfig(backend="deepspeed"), OptimConfig(name="stableadamw"))


def test_without_torch_optimi_one_line_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, corpus_dir: Path, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "optimi", None)  # `import optimi` now raises ImportError
    with pytest.raises(BertkitError, match=r'pip install "bertkit\[stableadamw\]"'):
        build_optimizer(_model(), OptimConfig(name="stableadamw"))
    line = run_error("pretrain", "-r", "modernbert-tiny", "-c", str(corpus_dir), "-o", str(tmp_path / "run"),
                     "--set", "optim.name=stableadamw", "--set", "train.steps=2", "--set", "engine.threads=1",
                     "--set", "engine.tensorboard=false")  # fmt: skip
    assert line == 'error: optim.name=stableadamw needs torch-optimi: pip install "bertkit[stableadamw]"'


def test_wsd_one_minus_sqrt_decay() -> None:
    """lr = peak * (1 - sqrt((t - t_start) / decay_steps)) over the last `decay_fraction` of the steps
    (ModernBERT's OneMinusSqrtScheduler), after the same warm-up and stable phase as the linear decay."""
    total, decay_steps = 100, 20
    cfg = ScheduleConfig(warmup_steps=10, decay="wsd", decay_fraction=0.2, decay_shape="1-sqrt")
    values = [lr_multiplier(s, total, cfg) for s in range(total)]
    assert values[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert all(v == 1.0 for v in values[10:80])
    start = total - decay_steps
    for step in range(start, total):
        assert values[step] == pytest.approx(1 - math.sqrt((step - start) / decay_steps), abs=1e-15)
    assert values[85] == pytest.approx(0.5)  # a quarter of the way in, half the rate left: sqrt(1/4) = 1/2
    floor = ScheduleConfig(decay="wsd", decay_fraction=0.2, decay_shape="1-sqrt", min_lr_ratio=0.1)
    assert lr_multiplier(85, total, floor) == pytest.approx(0.1 + 0.9 * 0.5)
    with pytest.raises(ValueError, match="decay_shape=1-sqrt shapes the final decay of schedule.decay=wsd only"):
        ScheduleConfig(decay="cosine", decay_shape="1-sqrt")

"""Optimizers, schedules, budgets and the sharded sampler, against independent references."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from bertkit.config.schema import OptimConfig, ScheduleConfig, TrainConfig, parse_budget
from bertkit.corpus.loader import EpochSampler
from bertkit.engine.budget import Budget
from bertkit.engine.optim import BudgetScheduler, Lamb, build_optimizer, lr_multiplier, parameter_groups


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.LayerNorm(5), nn.Linear(5, 3))


def test_no_weight_decay_on_bias_and_layernorm() -> None:
    model = _model()
    decay, no_decay = parameter_groups(model, 0.01)
    assert {id(p) for p in decay["params"]} == {id(model[0].weight), id(model[2].weight)}
    assert {id(p) for p in no_decay["params"]} == {
        id(model[0].bias),
        id(model[1].weight),
        id(model[1].bias),
        id(model[2].bias),
    }
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 0.01


def test_lamb_without_adaptation_is_adam() -> None:
    """With no trust ratio and no weight decay, LAMB's update is exactly bias-corrected Adam's."""
    a, b = _model(), _model()
    lamb = Lamb([{"params": list(a.parameters()), "adapt": False}], lr=1e-2, eps=1e-6)
    adam = torch.optim.Adam(b.parameters(), lr=1e-2, eps=1e-6)
    x = torch.randn(4, 6)
    for _ in range(5):
        for model, opt in ((a, lamb), (b, adam)):
            opt.zero_grad()
            model(x).pow(2).sum().backward()
            opt.step()
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6)


def test_lamb_trust_ratio_scales_each_layer_step_to_its_norm() -> None:
    """The defining property (You et al. 2019): ||w_t+1 - w_t|| = lr * ||w_t|| per adapted tensor."""
    model = _model()
    lamb = build_optimizer(model, OptimConfig(name="lamb", lr=0.01, weight_decay=0.01))
    assert isinstance(lamb, Lamb)
    model(torch.randn(4, 6)).pow(2).sum().backward()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    lamb.step()
    for name in ("0.weight", "2.weight"):
        step = (model.get_parameter(name).detach() - before[name]).norm()
        assert float(step) == pytest.approx(0.01 * float(before[name].norm()), rel=1e-4)


def test_budget_progress_and_a_budget_changed_on_resume() -> None:
    budget = Budget.parse("10m")
    assert (budget.kind, budget.total) == ("seconds", 600)
    assert budget.progress(150) == 0.25 and budget.progress(600) == budget.progress(900) == 1.0
    # Resumed at 40% (240 s) with twice the budget: the rest (60% of the schedule) is spread over the 960 s left.
    longer = Budget.parse("20m").resumed(240, 0.4)
    assert longer.progress(240) == pytest.approx(0.4) and longer.progress(1200) == 1.0
    assert longer.progress(240 + 480) == pytest.approx(0.7)
    # A shorter budget than the time already spent ends at once.
    assert Budget.parse("3m").resumed(240, 0.4).progress(240) == 1.0
    assert Budget.parse("5Mtok").progress(1e6) == pytest.approx(0.2)


@pytest.mark.parametrize("decay", ["linear", "cosine", "wsd"])
def test_budget_scheduler_is_the_step_schedule_at_the_budget_share(decay: str) -> None:
    """Cramming's fake step: at progress p the rate of step p x steps, so the schedule ends on the deadline."""
    cfg = ScheduleConfig(warmup_fraction=0.1, decay=decay, min_lr_ratio=0.05)
    param = nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([param], lr=0.5)
    scheduler = BudgetScheduler(optimizer, 200, cfg)
    for progress in (0.0, 0.03, 0.1, 0.5, 0.85, 0.999, 1.0):
        scheduler.set_progress(progress)
        assert optimizer.param_groups[0]["lr"] == pytest.approx(0.5 * lr_multiplier(progress * 200, 200, cfg))
    assert scheduler.get_last_lr() == [pytest.approx(0.5 * 0.05)]  # at the deadline: the floor, decay complete
    scheduler.set_progress(0.1)
    assert scheduler.get_last_lr() == [pytest.approx(0.5)]  # the peak at the end of the warm-up share
    again = BudgetScheduler(torch.optim.SGD([param], lr=0.5), 200, cfg)
    again.load_state_dict(scheduler.state_dict())
    assert again.get_last_lr() == scheduler.get_last_lr()


def test_schedules() -> None:
    linear = ScheduleConfig(warmup_steps=10, decay="linear")
    assert lr_multiplier(0, 100, linear) == pytest.approx(0.1)
    assert lr_multiplier(9, 100, linear) == pytest.approx(1.0)
    assert lr_multiplier(55, 100, linear) == pytest.approx(0.5)
    cosine = ScheduleConfig(warmup_steps=0, decay="cosine", min_lr_ratio=0.1)
    assert lr_multiplier(50, 100, cosine) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_multiplier(100, 100, cosine) == pytest.approx(0.1)
    wsd = ScheduleConfig(warmup_steps=10, decay="wsd", decay_fraction=0.2)
    values = [lr_multiplier(s, 100, wsd) for s in range(100)]
    assert values[9] == 1.0 and all(v == 1.0 for v in values[10:80])  # stable phase at the peak
    assert values[90] == pytest.approx(0.5)  # halfway through the last 20 steps
    assert all(later < earlier for earlier, later in zip(values[80:], values[81:], strict=False))


def test_budget_parsing() -> None:
    assert parse_budget("30m") == ("seconds", 1800)
    assert parse_budget("2h") == ("seconds", 7200)
    assert parse_budget("5Mtok") == ("tokens", 5e6)
    assert parse_budget("250k tokens") == ("tokens", 250e3)
    with pytest.raises(ValueError, match="cannot read budget"):
        TrainConfig(budget="soon")


@pytest.mark.parametrize("world", [2, 4])
def test_sharded_sampler_splits_the_single_process_order(world: int) -> None:
    """N ranks together take exactly what one process takes, in order, and end in the same state."""
    indices = np.arange(37)
    single = EpochSampler(indices, seed=3)
    ranks = [EpochSampler(indices, seed=3, rank=r, world_size=world) for r in range(world)]
    for _ in range(25):  # crosses several epochs
        expected = single.take(8)
        got = [item for sampler in ranks for item in sampler.take(8)]
        assert got == expected
        assert all(s.state == single.state for s in ranks)
    with pytest.raises(ValueError, match="evenly"):
        ranks[0].take(8 * world + 1)

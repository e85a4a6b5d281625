"""A linear probe fitted to convergence: the head of a frozen encoder, trained on features computed once.

SentEval's protocol: the encoder runs once over every example (every tagged word, for taggers), the features are
standardised, and a linear model is fitted to the optimum of its regularised loss: a softmax (classes), one
sigmoid per label (multi-label) or least squares (regression), by L-BFGS, or in closed form for least squares.
The L2 strength is chosen from a grid by the loss on a tenth of the training features held out (seeded), then
the head is fitted again on all of them. No learning rate, no epochs: the result depends on the features alone,
which is what a probe is meant to measure. The standardisation is folded into the weights, so the head reads the
raw features as the fine-tuned model's classifier does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F

ProbeLoss = Literal["softmax", "sigmoid", "squared"]
# The L2 strengths tried (on standardised features, the loss a mean over examples): sklearn's C from 1,000 down to
# 0.1 for a set of 10,000 examples.
DEFAULT_L2 = (1e-4, 1e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)
HELD_OUT = 0.1
SEARCH_ITERATIONS = 100  # per L2 strength while choosing (sklearn's default); the final fit runs to tolerance


@dataclass
class ProbeData:
    """What a kind gives the probe: features of its training targets and those targets."""

    features: torch.Tensor  # (N, H) float: what the classifier layer reads
    targets: torch.Tensor  # (N,) class ids (softmax), (N, L) 0/1 (sigmoid) or (N,) scores (squared)
    loss: ProbeLoss
    outputs: int  # the classifier's outputs: classes, labels, or 1
    evaluate: Callable[[Any], dict[str, float]] | None  # the dev metrics of the model with the fitted head


@dataclass
class LinearHead:
    weight: torch.Tensor  # (outputs, H)
    bias: torch.Tensor  # (outputs,)
    report: dict[str, Any]  # what the run summary records: the L2 chosen, each one's held-out loss, iterations


def _loss(logits: torch.Tensor, targets: torch.Tensor, kind: ProbeLoss) -> torch.Tensor:
    if kind == "softmax":
        return F.cross_entropy(logits, targets)
    if kind == "sigmoid":
        return F.binary_cross_entropy_with_logits(logits, targets.float())
    return F.mse_loss(logits[:, 0], targets.float())  # the closed form below solves this loss


Start = tuple[torch.Tensor, torch.Tensor] | None


def _fit(x: torch.Tensor, y: torch.Tensor, kind: ProbeLoss, outputs: int, l2: float, start: Start = None,
         max_iter: int = 500) -> tuple[torch.Tensor, torch.Tensor, int]:  # fmt: skip
    """The minimiser of loss + l2/2 ||W||^2 on standardised `x` (the bias unpenalised), from `start` (a warm start)
    or zeros: (W, b, iterations)."""
    hidden = x.shape[1]
    if kind == "squared":  # ridge regression in closed form, on centred features and scores
        scores = y.double()
        # the gradient of mean((xw + b - y)^2) + l2/2 |w|^2 is zero where (X'X/N + l2/2 I) w = X'(y - mean y)/N
        gram = x.double().T @ x.double() / len(x) + 0.5 * l2 * torch.eye(hidden, dtype=torch.float64)
        weight = torch.linalg.solve(gram, x.double().T @ (scores - scores.mean()) / len(x))
        return weight.float()[None, :], scores.mean().float()[None], 0
    weight = torch.zeros(outputs, hidden) if start is None else start[0].clone()
    bias = torch.zeros(outputs) if start is None else start[1].clone()
    weight.requires_grad_(True)
    bias.requires_grad_(True)
    optimizer = torch.optim.LBFGS([weight, bias], lr=1.0, max_iter=max_iter, history_size=20, tolerance_grad=1e-5,
                                  tolerance_change=1e-10, line_search_fn="strong_wolfe")  # fmt: skip

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        value = _loss(x @ weight.T + bias, y, kind) + 0.5 * l2 * weight.pow(2).sum()
        value.backward()
        return value

    optimizer.step(closure)
    iterations = int(optimizer.state[optimizer._params[0]].get("n_iter", 0))
    return weight.detach(), bias.detach(), iterations


def fit_linear_head(data: ProbeData, seed: int, l2_grid: tuple[float, ...] | list[float] = DEFAULT_L2) -> LinearHead:
    """The probe's classifier layer for `data`: the L2 strength with the lowest loss on a held-out tenth (seeded by
    `seed`), then the fit on every example with it, in the layout of an `nn.Linear` over the raw features."""
    x = data.features.float()
    y = data.targets
    mean = x.mean(0)
    std = x.std(0, unbiased=False).clamp_min(1e-6)
    z = (x - mean) / std
    order = torch.randperm(len(z), generator=torch.Generator().manual_seed(seed))
    cut = max(1, math.floor(len(z) * HELD_OUT)) if len(z) >= 10 else 0
    held, kept = order[:cut], order[cut:]
    losses: dict[str, float] = {}
    best_l2, previous, chosen = l2_grid[0], None, None
    if cut and len(l2_grid) > 1:
        best_value = math.inf
        for l2 in sorted(l2_grid, reverse=True):  # strongest first: each fit starts from the last (warm start)
            fit = _fit(z[kept], y[kept], data.loss, data.outputs, l2, previous, max_iter=SEARCH_ITERATIONS)
            weight, bias = fit[0], fit[1]
            with torch.no_grad():
                value = float(_loss(z[held] @ weight.T + bias, y[held], data.loss))
            losses[f"{l2:g}"] = round(value, 6)
            if value < best_value:
                best_value, best_l2, chosen = value, l2, (weight, bias)
            previous = (weight, bias)
    weight, bias, iterations = _fit(z, y, data.loss, data.outputs, best_l2, chosen)
    raw_weight = weight / std  # W z + b = (W / std) x + (b - (W / std) . mean)
    raw_bias = bias - raw_weight @ mean
    report = {"solver": "lbfgs" if data.loss != "squared" else "closed-form", "l2": best_l2,
              "held_out_loss": losses, "iterations": iterations, "examples": len(z)}  # fmt: skip
    return LinearHead(raw_weight, raw_bias, report)

"""`bertkit finetune --feature` with the head fitted by L-BFGS (task.head_solver=lbfgs, the default): the frozen
encoder runs once over the training targets, `bertkit/tasks/probe.py` fits the classifier layer to the optimum,
and the model is scored on the dev set. No training loop: a probe measures the features, not a schedule."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from bertkit.config.schema import TaskConfig
from bertkit.progress import stderr_console
from bertkit.tasks.kinds.base import Prepared
from bertkit.tasks.probe import DEFAULT_L2, fit_linear_head


def fit_probe(model: nn.Module, prepared: Prepared, task: TaskConfig, device: torch.device, seed: int,
              quiet: bool) -> dict[str, Any]:  # fmt: skip
    """Fit `model.classifier` of the frozen `model` in place; the summary entries of the run (what the loop's
    summary gives: eval metrics, seconds; and the probe's L2 choice)."""
    assert prepared.probe is not None
    start = time.perf_counter()
    model.requires_grad_(False)
    data = prepared.probe(model, device)
    extracted = time.perf_counter() - start
    if not quiet:
        stderr_console.print(f"probe: features of {len(data.features):,} training targets in {extracted:.1f} s; "
                             "fitting the head")  # fmt: skip
    head = fit_linear_head(data, seed, task.probe_l2 or DEFAULT_L2)
    classifier: nn.Linear = model.classifier  # type: ignore[assignment]
    with torch.no_grad():
        classifier.weight.copy_(head.weight)
        classifier.bias.copy_(head.bias)
    model.eval().to(device)
    with torch.no_grad():
        metrics = data.evaluate(model) if data.evaluate is not None else {}
    seconds = time.perf_counter() - start
    if not quiet:
        shown = ", ".join(f"{k} {v:.4g}" for k, v in metrics.items() if k != "examples")
        dev = f"; dev {shown}" if shown else ""
        stderr_console.print(f"probe: L2 {head.report['l2']:g} in {seconds:.1f} s{dev}")
    return {"epochs": None, "steps": 0, "stopped": "fitted", "seconds": round(seconds, 1), "precision": "fp32",
            "eval": metrics, "eval_last": metrics,
            "probe": {**head.report, "feature_seconds": round(extracted, 1)}}  # fmt: skip

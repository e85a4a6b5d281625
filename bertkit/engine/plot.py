"""Training curves from metrics.jsonl as a PNG (matplotlib, imported only here)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise BertkitError(
            f"{run_dir} has no metrics.jsonl; pass a run directory written by pretrain, distill or finetune"
        )
    rows = []
    for number, line in enumerate(path.read_text("utf-8").splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise BertkitError(f"{path}:{number} is not valid JSON") from None
    return rows


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg back-end: figures are written, never shown in a window."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, output: Path) -> None:
    """Write the figure under a temporary name, then rename: never a half-written PNG under the final name."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, output)


def plot_run(run_dir: Path, output: Path, overwrite: bool = False) -> dict[str, Any]:
    rows = read_metrics(run_dir)
    train_rows = [r for r in rows if "loss" in r]
    if not train_rows:
        raise BertkitError(f"{run_dir}/metrics.jsonl has no training rows yet")
    if output.exists() and not overwrite:
        raise BertkitError(f"output {output} already exists; pass --overwrite to replace it")
    plt = pyplot()

    steps = [r["step"] for r in train_rows]
    eval_key = next((k for r in rows for k in r if k in ("eval_mlm_loss", "eval_loss")), None)
    # The losses a run logs term by term (MLM + NSP, ELECTRA's RTD, distillation's terms), each on its own line.
    terms = sorted({k for r in train_rows for k in r if k.endswith("_loss")})
    panels = 4 if terms else 3
    fig, axes = plt.subplots(panels, 1, figsize=(8, 3 * panels), sharex=True)
    axes[0].plot(steps, [r["loss"] for r in train_rows], label="train loss")
    if eval_key:
        eval_rows = [r for r in rows if eval_key in r]
        axes[0].plot([r["step"] for r in eval_rows], [r[eval_key] for r in eval_rows], "o-", label=eval_key)
    axes[0].set_ylabel("loss")
    axes[0].legend()
    if terms:
        for term in terms:
            logged = [(r["step"], r[term]) for r in train_rows if r.get(term) is not None and r[term] > 0]
            axes[1].plot([s for s, _ in logged], [v for _, v in logged], label=term)
        axes[1].set_yscale("log")  # terms differ by orders of magnitude (attention MSE vs cosine)
        axes[1].set_ylabel("loss terms")
        axes[1].legend(fontsize=8)
    lr_axis, speed_axis = axes[-2], axes[-1]
    lr_axis.plot(steps, [r["lr"] for r in train_rows], color="tab:orange")
    lr_axis.set_ylabel("learning rate")
    throughput = [(r["step"], r["tokens_per_s"]) for r in train_rows if r.get("tokens_per_s")]
    speed_axis.plot([s for s, _ in throughput], [t for _, t in throughput], color="tab:green")
    speed_axis.set_ylabel("tokens / s")
    speed_axis.set_xlabel("step")
    mfu = [r["mfu"] for r in train_rows if r.get("mfu")]
    if mfu:
        speed_axis.set_title(f"mean MFU {100 * sum(mfu) / len(mfu):.2f}%", fontsize=9)
    for axis in axes:
        axis.grid(alpha=0.3)
    fig.suptitle(str(run_dir))
    save_figure(fig, output)
    return {"plot": str(output), "steps": steps[-1], "rows": len(train_rows), "terms": terms}


COMPARED = ("eval_mlm_acc", "eval_plm_acc")


def plot_compare(
    run_dirs: list[Path], output: Path, overwrite: bool = False, metric: str | None = None, target: float | None = None
) -> dict[str, Any]:
    """Held-out accuracy of several runs against training seconds and against tokens, one line per run, so a user
    sees which run reached which quality when. Reads the evaluation rows of each run's metrics.jsonl (each carries
    the training time and tokens it was taken at)."""
    if output.exists() and not overwrite:
        raise BertkitError(f"output {output} already exists; pass --overwrite to replace it")
    if target is not None and not math.isfinite(target):
        raise BertkitError(f"--target is the metric's value to reach, a finite number, not {target}")
    curves: dict[str, list[dict[str, Any]]] = {}
    for run_dir in run_dirs:
        rows = read_metrics(run_dir)
        name = metric or next((key for key in COMPARED if any(key in row for row in rows)), None)
        evaluated = [row for row in rows if name and name in row]
        if not evaluated:
            wanted = metric or " or ".join(COMPARED)
            raise BertkitError(
                f"{run_dir}/metrics.jsonl has no {wanted} evaluations to compare (train.eval_every_share)"
            )
        if any("train_seconds" not in row for row in evaluated):
            raise BertkitError(
                f"{run_dir}/metrics.jsonl was written by an older bertkit: its evaluations carry no training time"
            )
        metric = name
        label = run_dir.name if run_dir.name not in curves else str(run_dir)
        curves[label] = evaluated
    plt = pyplot()
    fig, (by_time, by_tokens) = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    summary_runs = {}
    for label, rows in curves.items():
        values = [row[metric] for row in rows]
        by_time.plot([row["train_seconds"] / 60 for row in rows], values, "o-", markersize=3, label=label)
        by_tokens.plot([row["tokens"] / 1e6 for row in rows], values, "o-", markersize=3, label=label)
        best = max(rows, key=lambda row: row[metric])
        summary_runs[label] = {"evaluations": len(rows), "best": best[metric], "at_seconds": best["train_seconds"]}
        if target is not None:
            reached = next((row for row in rows if row[metric] >= target), None)
            summary_runs[label]["seconds_to_target"] = reached["train_seconds"] if reached else None
    for axis, xlabel in ((by_time, "training minutes"), (by_tokens, "tokens (millions)")):
        if target is not None:
            axis.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target:g}")
        axis.set_xlabel(xlabel)
        axis.grid(alpha=0.3)
    by_time.set_ylabel(f"held-out {metric.removeprefix('eval_')}")
    by_time.legend(fontsize=8)
    save_figure(fig, output)
    return {"plot": str(output), "metric": metric, "runs": summary_runs}

"""The evaluation's report for people: one Markdown file (the comparison table to paste into a paper or README,
each task's detail, the protocol) and a PNG per task of each model's score with its seed spread."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bertkit.config.suite import Suite, SuiteTask
from bertkit.engine.plot import pyplot, save_figure

REPORT_MD = "report.md"
PLOTS = "plots"


def _cell(entry: dict[str, Any]) -> str:
    if entry.get("mean") is None:
        return "failed"
    if entry.get("std") is None:
        return f"{entry['mean']:.2f}"
    return f"{entry['mean']:.2f} ± {entry['std']:.2f}"


def comparison_rows(report: dict[str, Any], tasks: list[SuiteTask]) -> tuple[list[str], list[list[str]]]:
    """The header and rows of the comparison table: a row per model, a column per task (its score), the average."""
    header = ["model", *(f"{t.name} ({', '.join(t.score_metrics)})" for t in tasks), "average"]
    rows = []
    for model, entry in report["models"].items():
        scores = [_cell(entry["tasks"][t.name]["score"]) for t in tasks]
        rows.append([model, *scores, _cell(entry["average"])])
    return header, rows


def markdown(report: dict[str, Any], suite: Suite, tasks: list[SuiteTask]) -> str:
    header, rows = comparison_rows(report, tasks)
    lines = [
        f"# {suite.name}: {report['protocol']['mode']}",
        "",
        "Scores in points (mean ± standard deviation over seeds, at each task's chosen learning rate).",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
        "## Tasks",
        "",
        "| task | model | metric | lr | per seed | median | all metrics (means) |",
        "|---|---|---|---|---|---|---|",
    ]
    for task in tasks:
        for model, entry in report["models"].items():
            t = entry["tasks"][task.name]
            metrics = ", ".join(f"{k} {v:.2f}" for k, v in t["metrics"].items())
            head = report["protocol"]["tasks"][task.name].get("head")  # a fitted or absent head has no rate
            lr = "—" if t["lr"] is None or head in ("lbfgs", "none") else f"{t['lr']:g}"
            seeds = ", ".join(f"{s:.2f}" for s in t["scores"]) or "—"
            failed = f" ({t['failed_cells']} failed cells)" if t["failed_cells"] else ""
            median = "—" if t["median"] is None else f"{t['median']:.2f}"
            lines.append(f"| {task.name} | {model} | {t['metric']} | {lr} | {seeds}{failed} | {median} | {metrics} |")
    protocol = report["protocol"]
    lines += ["", "## Protocol", "", protocol["text"], ""]
    for name, p in protocol["tasks"].items():
        warm = f"; warm start from {p['warm_start']}" if p["warm_start"] else ""
        if p.get("head") == "lbfgs":
            schedule = "head fitted by L-BFGS on features computed once (L2 chosen on a held-out tenth of train)"
        elif p.get("head") == "none":
            schedule = "scored as it is (no training)"
        else:
            rates = ", ".join(f"{lr:g}" for lr in p["lrs"])
            schedule = f"rates {rates}, epochs {p['epochs'] or 'from the recipe'}"
        lines.append(
            f"- {name}: {p['kind']}, ranked by {p['metric']}, {schedule}, seeds {', '.join(map(str, p['seeds']))}, "
            f"recipe {p['recipe']}{warm}"
        )
    if protocol.get("rates_from") == "--lrs":
        lines.append("- every task's rates are those of --lrs, in place of the suite's")
    if protocol.get("seeds_from") == "--seeds":
        lines.append("- every task's seeds are those of --seeds, in place of the suite's")
    run = {*protocol["tasks"], *protocol["skipped_tasks"]}
    left_out = [name for name in protocol.get("suite_tasks", []) if name not in run]
    if left_out:
        lines.append(f"- left out by --tasks, so out of the average too: {', '.join(left_out)}")
    if protocol["skipped_tasks"]:
        skipped = ", ".join(protocol["skipped_tasks"])
        lines.append(f"- skipped in this mode: {skipped} (question answering and bi-encoder tasks fine-tune)")
    cells = report["cells"]
    lines += ["", f"Cells: {cells['done']} done, {cells['failed']} failed, of {cells['total']}.", ""]
    return "\n".join(lines)


def _plot_task(path: Path, task: SuiteTask, report: dict[str, Any]) -> None:
    plt = pyplot()
    models = list(report["models"])
    fig, ax = plt.subplots(figsize=(max(4.0, 1.4 * len(models) + 2), 3.6))
    for i, model in enumerate(models):
        score = report["models"][model]["tasks"][task.name]["score"]
        per_seed = score.get("per_seed") or []
        if score["mean"] is not None:
            ax.bar(i, score["mean"], yerr=score["std"] or 0.0, capsize=6, color="#9ecae1", edgecolor="#3182bd")
            ax.scatter([i] * len(per_seed), per_seed, color="#08519c", zorder=3, s=18)
    ax.set_xticks(range(len(models)), [m if len(m) < 28 else "…" + m[-26:] for m in models], rotation=15)
    ax.set_ylabel(f"{', '.join(task.score_metrics)} (points)")
    ax.set_title(f"{task.name}: mean ± std over seeds, dots per seed")
    save_figure(fig, path)


def write_report(output: Path, report: dict[str, Any], suite: Suite, tasks: list[SuiteTask]) -> dict[str, Any]:
    """report.md, and plots/TASK.png when matplotlib is installed (the `plot` extra); the paths written."""
    md = output / REPORT_MD
    tmp = md.with_name(f".{md.name}.tmp")
    tmp.write_text(markdown(report, suite, tasks), encoding="utf-8")
    os.replace(tmp, md)
    files: dict[str, Any] = {"markdown": str(md)}
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        files["plots"] = "not drawn: install the plot extra (pip install 'bertkit[plot]') for a PNG per task"
        return files
    (output / PLOTS).mkdir(exist_ok=True)
    plots = []
    for task in tasks:
        path = output / PLOTS / f"{task.name}.png"
        _plot_task(path, task, report)
        plots.append(str(path))
    files["plots"] = plots
    return files


def print_table(report: dict[str, Any], names: list[str]) -> None:
    """The comparison table on the terminal (stdout), with rich."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{report['suite']} ({report['protocol']['mode']}): points, mean ± std over seeds",
                  title_justify="left")  # fmt: skip
    table.add_column("model", style="bold")
    for name in names:
        table.add_column(name, justify="right")
    table.add_column("average", justify="right", style="bold")
    for model, entry in report["models"].items():
        table.add_row(model, *(_cell(entry["tasks"][n]["score"]) for n in names), _cell(entry["average"]))
    console = Console()
    console.print(table)
    cells = report["cells"]
    console.print(f"cells: {cells['done']} done, {cells['failed']} failed ({cells['resumed']} from an earlier run); "
                  f"report: {report['files']['markdown']}")  # fmt: skip


def plot_suite_curve(evaluation: Path, output: Path, overwrite: bool = False) -> dict[str, Any]:
    """The suite's average (mean ± std over seeds) and each task's score against the training tokens and time at
    which each model was saved: for an evaluation of a pretraining run's snapshots (RUN/snapshots/step-N, whose
    metadata says when it was taken). Models without that metadata are left out and named."""
    from bertkit.errors import BertkitError
    from bertkit.fsutil import read_json
    from bertkit.modelio.modeldir import MODEL_META, resolve_model_path

    report = read_json(evaluation / "report.json", "evaluation report")
    if output.exists() and not overwrite:
        raise BertkitError(f"output {output} already exists; pass --overwrite to replace it")
    points, left_out = [], []
    for spec, entry in report["models"].items():
        try:
            meta = read_json(resolve_model_path(spec) / MODEL_META, "model metadata")
        except BertkitError:  # not a bertkit model directory (a Hugging Face checkpoint, a hub name)
            meta = {}
        if "tokens" not in meta or "train_seconds" not in meta or entry["average"]["mean"] is None:
            left_out.append(spec)  # not a snapshot, or a model without a suite score (a task failed)
            continue
        points.append((meta["tokens"], meta["train_seconds"], meta.get("steps"), entry))
    if len(points) < 2:
        raise BertkitError(
            f"{evaluation} scores {len(points)} pretraining snapshot(s) with a time and token count; a curve needs "
            "two or more: evaluate RUN/snapshots/* (pretrain with train.snapshot_every_share)"
        )
    points.sort(key=lambda p: p[0])
    plt = pyplot()
    tasks = list(points[0][3]["tasks"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, index, label in ((axes[0], 0, "training tokens"), (axes[1], 1, "training time (minutes)")):
        xs = [p[index] / (60.0 if index == 1 else 1.0) for p in points]
        means = [p[3]["average"]["mean"] for p in points]
        stds = [p[3]["average"]["std"] or 0.0 for p in points]
        ax.plot(xs, means, marker="o", color="black", label="average")
        low = [m - s for m, s in zip(means, stds, strict=True)]
        high = [m + s for m, s in zip(means, stds, strict=True)]
        ax.fill_between(xs, low, high, color="black", alpha=0.15)
        for task in tasks:
            ax.plot(xs, [p[3]["tasks"][task]["score"]["mean"] for p in points], marker=".", alpha=0.7, label=task)
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    cut = report["protocol"].get("tasks_from") == "--tasks"  # an average over part of the suite says so
    name = f"{report['suite']} ({', '.join(tasks)})" if cut else report["suite"]
    axes[0].set_ylabel(f"{name} score, points ({report['mode']})")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{name} ({report['mode']}) along pretraining: mean ± std over seeds")
    save_figure(fig, output)
    return {
        "output": str(output),
        "snapshots": [
            {"steps": p[2], "tokens": p[0], "train_seconds": p[1], "average": p[3]["average"]["mean"]} for p in points
        ],  # fmt: skip
        "left_out": left_out,
    }

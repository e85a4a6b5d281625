"""From cell results to the suite's table: the protocol in code, with no I/O.

Per model and task: each rate's mean over seeds of the ranking metric on dev picks the rate; at that rate the
report gives the mean, standard deviation (n-1) and median over seeds. A task's score is the mean of its score
metrics (GLUE averages MRPC's F1 and accuracy); the suite's average is the mean of the task scores, per seed, so
it has a spread too. Scores are points: metrics in [0, 1] times 100, metrics already in percent (SQuAD's) as they
are, so an average over kinds is one scale.
"""

from __future__ import annotations

import statistics
from typing import Any

from bertkit.config.suite import Suite, SuiteTask, lower_is_better
from bertkit.config.task_kinds import SPECS

PROTOCOL = (
    "Each cell (task, learning rate, seed) fine-tunes with the task's recipe and keeps its best dev evaluation "
    "by the task's metric; the rate is picked by the mean over seeds on dev; mean, standard deviation (n-1) and "
    "median are over seeds at that rate; a task's score is the mean of its score metrics, in points; the average "
    "is the mean of the task scores and is what models are ranked by."
)


def points(task: SuiteTask, metric: str, value: float) -> float:
    """`value` of `metric` on the report's scale: percent points (lower-is-better metrics as they are)."""
    if SPECS[task.kind].percent or lower_is_better(metric):  # SQuAD's script gives percentages already
        return value
    return value * 100.0


def spread(values: list[float]) -> dict[str, float | None]:
    """Mean, standard deviation (n-1; 0 for one value) and median, rounded to 2 decimals (None for no values)."""
    if not values:
        return {"mean": None, "std": None, "median": None}
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {
        "mean": round(statistics.fmean(values), 2),
        "std": round(std, 2),
        "median": round(statistics.median(values), 2),
    }


def summarize_task(
    task: SuiteTask, lrs: list[float], seeds: list[int], results: dict[tuple[float, int], dict[str, Any]]
) -> dict[str, Any]:
    """One model's entry for `task` from its cell results, keyed (lr, seed): each a cell's result.json
    (`status` done or failed; `metrics` when done)."""
    metric = task.rank_metric
    sign = -1.0 if lower_is_better(metric) else 1.0
    by_rate: dict[float, list[float]] = {}
    for lr in lrs:
        done = [results[(lr, s)] for s in seeds if results.get((lr, s), {}).get("status") == "done"]
        by_rate[lr] = [points(task, metric, float(r["metrics"][metric])) for r in done]
    means = {lr: statistics.fmean(v) for lr, v in by_rate.items() if v}
    failed = sum(1 for r in results.values() if r.get("status") == "failed")
    entry: dict[str, Any] = {"metric": metric, "score_metrics": task.score_metrics, "failed_cells": failed}
    if not means:
        return {**entry, "lr": None, "scores": [], "seeds": [], **spread([]), "score": spread([]), "metrics": {},
                "rates": {}}  # fmt: skip
    # The first rate of the grid wins a tie, so the choice does not depend on dictionary order.
    chosen = max(means, key=lambda lr: (sign * means[lr], -lrs.index(lr)))
    done_seeds = [s for s in seeds if results.get((chosen, s), {}).get("status") == "done"]
    cells = [results[(chosen, s)]["metrics"] for s in done_seeds]
    task_scores = [statistics.fmean(points(task, m, float(c[m])) for m in task.score_metrics) for c in cells]
    names = [name for name in task.reported_metrics if any(name in c for c in cells)]  # not counts (examples...)
    return {
        **entry,
        "lr": chosen,
        "seeds": done_seeds,
        "scores": [round(v, 2) for v in by_rate[chosen]],
        **spread(by_rate[chosen]),
        "score": {**spread(task_scores), "per_seed": [round(v, 2) for v in task_scores]},
        "metrics": {
            n: round(statistics.fmean(points(task, n, float(c[n])) for c in cells if n in c), 2) for n in names
        },
        "rates": {str(lr): round(mean, 2) for lr, mean in means.items()},
    }


def summarize_model(suite: Suite, tasks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The suite's average of one model from its task entries: the mean of the task scores; when every task has
    the same seeds, also per seed (the mean of that seed's task scores), and the std and median of those. None
    when a task has no score."""
    present = [t.name for t in suite.tasks if t.name in tasks]
    if not present or any(tasks[name]["score"]["mean"] is None for name in present):
        return {"tasks": tasks, "average": {**spread([]), "per_seed": [], "seeds": []}}
    mean = round(statistics.fmean(tasks[name]["score"]["mean"] for name in present), 2)
    seeds = tasks[present[0]]["seeds"]
    if any(tasks[name]["seeds"] != seeds for name in present):
        # Seeds differ between tasks (a task's own seeds, or failed cells): no per-seed average to spread.
        return {"tasks": tasks, "average": {"mean": mean, "std": None, "median": None, "per_seed": [], "seeds": []}}
    per_seed = [statistics.fmean(tasks[name]["score"]["per_seed"][i] for name in present) for i in range(len(seeds))]
    average = {**spread(per_seed), "mean": mean, "per_seed": [round(v, 2) for v in per_seed], "seeds": seeds}
    return {"tasks": tasks, "average": average}

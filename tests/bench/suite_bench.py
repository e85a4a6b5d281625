"""The offline `local` suite as the benches use it (test_evaluate_bench.py, ttq.py, variants.py): the bench's sizes,
a smoke cut, the task files written once under a bench's work folder, and which of the shipped suite's tasks a bench
runs (`bertkit evaluate --tasks`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

# The suite's own sizes for QNLI and NER, whose small cuts leave both models on a plateau in 3 epochs (800 VitaminC
# pairs or 600 tweets did); the others cut so that both modes fit in about an hour for two models.
SUITE_SIZES = {"sentiment_train": 800, "sentiment_dev": 400, "stsb_train": 800, "stsb_dev": 400, "qnli_train": 2000,
               "qnli_dev": 600, "ner_train": 1500, "ner_dev": 400, "qa_train": 300, "qa_dev": 150}  # fmt: skip


def smoke_sizes():
    """40 training and 20 dev examples a task, but 400 training tweets, so that every tag of NER's dev set is one
    its training set has."""
    from bertkit.data.local_suite import LocalSizes

    return dataclasses.replace(LocalSizes.every(40, 20), ner_train=400)


def suite_data(work: Path, smoke: bool, qa: tuple[int, int] | None = None) -> Path:
    """The suite's task files under `work`, written once: at SUITE_SIZES, or the smoke's sizes; with `qa` (training and
    dev questions of SQuAD v1.1 dev, whole articles apart), QA at that size, in a folder of its own."""
    from bertkit.data.local_suite import LocalSizes, write_local_suite

    sizes = smoke_sizes() if smoke else LocalSizes(**SUITE_SIZES)
    name = "local-suite-smoke" if smoke else "local-suite"
    if qa is not None:
        sizes = dataclasses.replace(sizes, qa_train=qa[0], qa_dev=qa[1])
        name += f"-qa{qa[0]}-{qa[1]}"
    data = work / name
    if not data.exists():
        write_local_suite(data, sizes=sizes)
    return data


# The seeds of a smoke run (`bertkit evaluate --seeds`); a full run keeps the suite's three.
SMOKE_SEEDS = (0,)


def suite_tasks(leave_out: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The shipped `local` suite's tasks, as bertkit reads them, without `leave_out`: a bench's `--tasks`."""
    from bertkit.config.suite import load_suite

    suite, _ = load_suite("local")
    return tuple(task.name for task in suite.tasks if task.name not in leave_out)

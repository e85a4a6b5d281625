"""The data, student and evaluation of the task stage, for the kind of model the teacher was fine-tuned as.

`prepare_task` checks the recipe's task section against the teacher, asks the teacher's task kind
(bertkit/tasks/kinds/) for the data read the way `bertkit finetune` reads it, lined up with the teacher, and
returns a `TaskSetup`: the batches both phases draw from, the student of the prediction phase, the evaluation,
what the distilled model records, and the training inputs' fingerprint (the data half of the teacher-output
cache's key).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.config.recipe import DistillRecipe
from bertkit.config.schema import ModelConfig
from bertkit.config.task_config import as_kind
from bertkit.config.task_kinds import spec_of_architecture
from bertkit.distill.cache import examples_fingerprint
from bertkit.distill.teacher import Teacher
from bertkit.errors import BertkitError
from bertkit.tasks.kinds import TaskKind, task_kind
from bertkit.tasks.kinds.base import DistillData, FineTuned


@dataclass
class TaskSetup:
    architecture: str  # what the distilled model is saved as: the teacher's
    kind: TaskKind
    data: DistillData
    fingerprint: str  # of the training inputs: the data half of the cache's key

    @property
    def lengths(self) -> list[int]:
        """Token count of every training sequence (the teacher-output cache's layout)."""
        return [len(row) for row in self.data.input_ids]

    @property
    def sequences(self) -> int:
        """What an epoch passes over: the training examples, or for QA their windows (as finetune plans it)."""
        return len(self.data.input_ids)

    @property
    def meta(self) -> dict[str, Any]:
        """bertkit_model.json's labels and task."""
        return {"labels": self.data.labels, "task": self.data.meta}


def prepare_task(
    teacher: Teacher,
    recipe: DistillRecipe,
    student_cfg: ModelConfig,
    train_file: Path,
    eval_file: Path | None,
) -> TaskSetup:
    architecture = str(teacher.architecture)
    expected = spec_of_architecture(architecture).name
    if "kind" in recipe.task.model_fields_set and recipe.task.kind != expected:
        raise BertkitError(
            f"task.kind is {recipe.task.kind}, but the teacher {teacher.source} is fine-tuned for {expected}; the task "
            "stage distils what the teacher does: leave task.kind unset"
        )
    try:
        task = as_kind(recipe.task, expected)
    except ValueError as err:
        raise BertkitError(f"{err} (the teacher {teacher.source} is fine-tuned for {expected})") from None
    kind = task_kind(architecture)
    fine_tuned = FineTuned(
        source=str(teacher.source),
        outputs=list(teacher.tags or teacher.labels or []),
        task=teacher.task,
        tokenizer=teacher.tokenizer,
        config=teacher.config,
        huggingface=teacher.huggingface,
    )
    data = kind.distill_data(fine_tuned, task, student_cfg, train_file, eval_file, recipe.train.seed)
    return TaskSetup(architecture, kind, data, examples_fingerprint(data.input_ids, data.token_types))

"""The task stage's data, student and evaluation: the kind of model the teacher was fine-tuned as decides, and
that kind reads the training (and evaluation) file the way `bertkit finetune` reads it for the kind
(`teacher_task` in bertkit/tasks/kinds/):

- sequence classification (single texts or pairs): the classes are the teacher's, in its order;
- token classification: the teacher's tags and tag scheme; each word's first sub-word is a target;
- extractive QA: the teacher's window length and stride, so every window is one the teacher has read.
"""

from __future__ import annotations

from pathlib import Path

from bertkit.config.recipe import DistillRecipe
from bertkit.config.schema import ModelConfig
from bertkit.distill.teacher import Teacher
from bertkit.errors import BertkitError
from bertkit.tasks.kinds import task_kind
from bertkit.tasks.kinds.base import TeacherTask


def prepare_task(
    teacher: Teacher,
    recipe: DistillRecipe,
    student_cfg: ModelConfig,
    train_file: Path,
    eval_file: Path | None,
) -> TeacherTask:
    architecture = teacher.architecture
    expected = {"sequence-classification": "classification"}.get(str(architecture), architecture)
    if "kind" in recipe.task.model_fields_set and recipe.task.kind != expected:
        raise BertkitError(
            f"task.kind is {recipe.task.kind}, but the teacher {teacher.source} is fine-tuned for {expected}; the task "
            "stage distils what the teacher does: leave task.kind unset"
        )
    try:
        recipe.task.refuse_fields_of_other_kinds(expected)
    except ValueError as err:
        raise BertkitError(f"{err} (the teacher {teacher.source} is fine-tuned for {expected})") from None
    longest = min(c.max_position_embeddings - c.position_offset for c in (student_cfg, teacher.config))
    kind = task_kind(str(architecture))
    return kind.teacher_task(teacher, recipe.task, student_cfg, train_file, eval_file, longest, recipe.train.seed)



"""`bertkit distill --stage task` with a bi-encoder as the teacher (a bertkit retrieval or similarity model, or a
sentence-transformers directory): the student is fine-tuned for retrieval on (query, positive[, negative]) pairs
with the ranking loss and the teacher's vector of every training text (computed once; `task.distill_loss` mse, the
squared distance of the unit vectors, a wider teacher's projected to the student's width, or kl, the teacher's
in-batch ranking), as `bertkit compress` trains its
distilled copy. The recipe is a fine-tuning one (`finetune-retrieval`, pooled as the teacher pools, at the student
rate, unless --recipe names another), so every `task.*`, `optim.*` and `train.*` setting of a retrieval fine-tuning
applies."""

from __future__ import annotations

from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.pipelines.summary import FinetuneSummary

# A student of a few layers moves further than a fine-tuned model: TinyBERT's student rate, the rate `compress`
# trains its copy at (on SQuAD pairs a 2-layer copy of all-MiniLM-L6-v2 scored 0.746 nDCG@10 at 1e-4, 0.688 at
# the retrieval recipe's 2e-5; docs/benchmarks).
STUDENT_LR = 1.0e-4


def distill_bi_encoder(teacher_spec: str, student: Path, train_file: Path, eval_file: Path | None, output: Path,
                       recipe: str | None, overrides: list[str], overwrite: bool, resume: bool | str | None,
                       quiet: bool) -> FinetuneSummary:  # fmt: skip
    from bertkit.config.recipe import load_recipe
    from bertkit.config.task_kinds import kind_spec
    from bertkit.modelio.modeldir import load_model_dir
    from bertkit.modelio.st_dir import trained_pooling
    from bertkit.pipelines.finetune.run import finetune

    teacher_dir, meta, _, _, _ = load_model_dir(teacher_spec, hub=True)
    model = student / "model" if (student / "model").is_dir() else student
    # Without --recipe: pooled as the teacher pools, at the student rate; a recipe of the user's says its own.
    defaults = [f"task.pooling={trained_pooling(meta, teacher_dir) or 'mean'}", "task.normalize=true",
                f"optim.lr={STUDENT_LR}"] if recipe is None else []  # fmt: skip
    settings = [*defaults, *overrides, f"task.teacher={teacher_dir}"]
    loaded = load_recipe(recipe or "finetune-retrieval", settings, kind="finetune")
    if "teacher" not in kind_spec(loaded.task.kind).fields:  # the kinds that learn a bi-encoder teacher's vectors
        raise BertkitError(
            f"the teacher {teacher_dir} is a bi-encoder, so the task stage trains a retrieval student; the recipe "
            f"{loaded.name} is a {loaded.task.kind} recipe: leave --recipe out or name a retrieval one"
        )
    summary = finetune(loaded, model, train_file, output, eval_file, overwrite, resume, quiet)
    return summary.model_copy(update={"stage": "task", "teacher": str(teacher_dir), "student": str(model)})

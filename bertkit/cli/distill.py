"""`bertkit distill`."""

from __future__ import annotations

from pathlib import Path

import typer

from bertkit.cli.common import (
    BUDGET_HELP,
    ENGINE_HELP,
    ENGINES,
    JSON_HELP,
    OVERWRITE_HELP,
    QUIET_HELP,
    REPORT_TO_HELP,
    RESUME_HELP,
    TRACKERS,
    emit_main,
    engine_overrides,
    guarded,
    report_overrides,
)
from bertkit.cli.pretrain import SET_HELP

STAGES = ("general", "task")  # --stage


@guarded
def distill_command(
    teacher: str = typer.Option(
        ...,
        "--teacher",
        "-t",
        help="A bertkit run/model dir, a local Hugging Face checkpoint dir, or a hub name (bert-base-uncased; "
        "short names bert-base, roberta-base, ...), read through the Hugging Face cache (HF_HOME, HF_HUB_OFFLINE). "
        "--stage task: a run of `bertkit finetune` or an HF BERT/ALBERT/RoBERTa *ForSequenceClassification "
        "checkpoint (classes from its id2label), or a bi-encoder (a retrieval model, a sentence-transformers "
        "directory), whose student learns retrieval from pairs and the teacher's vectors.",
    ),
    student: str = typer.Option(
        ...,
        "--student",
        "-s",
        help="A student recipe (tinybert = tinybert-4, distilbert, tinybert-6, any encoder recipe with --set "
        "model.*), or, for --stage task, the run directory of a general distillation.",
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Run directory to write."),
    corpus: str | None = typer.Option(
        None,
        "--corpus",
        "-c",
        help="Corpus from build-corpus (or its s3:// URL), built with the teacher's tokenizer (general stage).",
    ),
    method: str | None = typer.Option(
        None,
        "--method",
        metavar="distilbert|tinybert|minilm",
        help="distilbert, tinybert or minilm (distill.method); default: follows the student.",
    ),
    init: str | None = typer.Option(
        None,
        "--init",
        metavar="teacher-layers|random",
        help="teacher-layers (DistilBERT: copy embeddings and every other layer) or random.",
    ),
    stage: str = typer.Option(
        "general", "--stage", metavar="general|task", help="general (on a corpus) or task (on labelled data)."
    ),
    train_file: Path | None = typer.Option(
        None, "--train", help="Task stage: labelled examples (CSV/TSV, JSON lines, Parquet, a datasets directory)."
    ),
    eval_file: Path | None = typer.Option(None, "--eval", help="Task stage: held-out labelled examples."),
    recipe: str | None = typer.Option(
        None, "--recipe", "-r", help="A distill recipe (name or .yaml) merged over the student's recipe."
    ),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    engine: str | None = typer.Option(None, "--engine", metavar=ENGINES, help=ENGINE_HELP),
    budget: str | None = typer.Option(None, "--budget", help=BUDGET_HELP),
    report_to: list[str] = typer.Option([], "--report-to", metavar=TRACKERS, help=REPORT_TO_HELP),
    resume: str | None = typer.Option(None, "--resume", metavar="last|auto", help=RESUME_HELP),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Distil a teacher into a smaller student: DistilBERT, TinyBERT (general and task stage) or MiniLM."""
    from bertkit.config.recipe import load_distill_recipe, resolve_recipe_path
    from bertkit.errors import BertkitError
    from bertkit.pipelines.distill.general import STUDENT_ALIASES, distill_general
    from bertkit.pipelines.rundir import resume_mode

    resume_mode(resume, overwrite)  # a bad --resume fails before anything is loaded
    if stage not in STAGES:
        raise BertkitError(f"--stage must be general or task, not '{stage}'")
    overrides = list(set_) + engine_overrides(engine, budget) + report_overrides(report_to)
    overrides += [f"distill.{key}={value}" for key, value in (("method", method), ("init", init)) if value]
    student_dir = Path(student).expanduser()
    if stage == "task":
        if corpus is not None:
            raise BertkitError("--stage task distils on labelled data (--train FILE), not on a corpus")
        if train_file is None:
            raise BertkitError("--stage task needs labelled examples: pass --train FILE (CSV or JSON lines)")
        if not student_dir.is_dir():
            raise BertkitError(
                f"--stage task continues a general distillation: --student must be its run directory, "
                f"and {student} is not a directory"
            )
        from bertkit.config.recipe import default_recipe
        from bertkit.distill.teacher import teacher_kind, teacher_task
        from bertkit.pipelines.compress import is_bi_encoder
        from bertkit.pipelines.distill.task import distill_task

        if is_bi_encoder(teacher):  # a retrieval student, trained on pairs with the teacher's vectors
            from bertkit.pipelines.distill.bi_encoder import distill_bi_encoder

            if method or init:
                raise BertkitError("--method and --init choose how a classifier is distilled; a bi-encoder's student "
                                   "learns its teacher's vectors: drop them")  # fmt: skip
            summary = distill_bi_encoder(teacher, student_dir, train_file, eval_file, output, recipe,
                                         [*set_, *engine_overrides(engine, budget), *report_overrides(report_to)],
                                         overwrite, resume, quiet)  # fmt: skip
            emit_main(summary.as_json(), json_out, "distillation done")
            return

        # The task stage's recipe follows what the teacher was fine-tuned for (distill-task-KIND for a tagger
        # or QA model), as finetune's follows --task.
        # Its task section is the teacher's kind unless the recipe or --set names one (the stage then checks them).
        loaded = load_distill_recipe(None, recipe or default_recipe("distill", teacher_task(teacher)), overrides,
                                     task_kind=teacher_kind(teacher))  # fmt: skip
        summary = distill_task(loaded, teacher, student_dir, train_file, eval_file, output, overwrite, resume, quiet)
    else:
        if train_file is not None or eval_file is not None:
            raise BertkitError("--train/--eval are for --stage task; the general stage reads --corpus")
        name = STUDENT_ALIASES.get(student, student)
        if student_dir.is_dir() and not name.endswith((".yaml", ".yml")):
            raise BertkitError(
                f"the general stage builds a student from a recipe (tinybert-4, distilbert, ...), not from the "
                f"directory {student}; to train a distilled student on labelled data use --stage task"
            )
        resolve_recipe_path(name)  # an unknown student is one line listing the recipes
        overrides += [f"data.train={corpus}"] if corpus else []
        loaded = load_distill_recipe(name, recipe, overrides)
        vocab_set = any(item.split("=", 1)[0].strip() == "model.vocab_size" for item in set_)
        summary = distill_general(loaded, teacher, output, Path(name).stem, vocab_set, overwrite, resume, quiet)
    emit_main(summary.as_json(), json_out, "distillation done")

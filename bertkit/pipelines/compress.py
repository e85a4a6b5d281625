"""`bertkit compress`: one command from a fine-tuned classifier to a small one, with the table to decide by.

    teacher (fine-tuned) ─┬─ copy N of its layers ─┬─ fine-tune on the gold labels ─────────── baseline/
                          │                        └─ TinyBERT task stage on augmented data ─── distill/ -> model/
                          └─ augment the training data (augmented.<ext>)

1. The student is a copy of the teacher's embeddings and N of its layers (DistilBERT's choice of layers),
   unless `--student` names a generally distilled one.
2. The training data is augmented as TinyBERT does (bertkit/pipelines/augment.py). The number of copies
   per example scales with the data: about AUGMENTED_EXAMPLES examples in all (at most 20 copies, TinyBERT's
   count, and at least 1), so a small set gets many copies and a large one few; `--copies` sets it.
3. The task stage (bertkit/pipelines/distill/task.py) on the augmented data: the prediction layer on the
   teacher's cached logits, after the intermediate layers for a `--student` that did not start as a copy
   of the teacher's layers (a copy skips that phase: `distill.intermediate_for_copies` in
   recipes/distill-task.yaml says why).
4. The baseline a user would otherwise run: the same copy fine-tuned on the gold labels alone, with the
   `finetune-classification` recipe and the teacher's pooling.
5. The table: parameters, inference sentences/s (eval texts, batch INFER_BATCH, at most INFER_MAX_LEN
   tokens, timed in interleaved rounds), accuracy on the evaluation file and % of the teacher, for the
   teacher, the baseline and the distilled student.

Each stage is a run directory of its own under OUT; `OUT/model` (the distilled student, which predict,
embed and export take) and `OUT/summary.json` are written last, so a run that fails half-way leaves nothing
that looks finished.
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.errors import BertkitError
from bertkit.fsutil import check_output_dir
from bertkit.pipelines.compress_common import (
    INFER_BATCH,
    INFER_MAX_LEN,
    INFER_ROUNDS,
    copy_layers,
    relative_to_teacher,
)
from bertkit.pipelines.compress_common import check_layers as _check_layers
from bertkit.pipelines.summary import ClassifierCompressSummary, CompressSummary, write_compress_summary
from bertkit.progress import stderr_console

AUGMENTED_EXAMPLES = 20_000
MAX_COPIES = 20  # TinyBERT's N


@dataclass
class CompressOptions:
    layers: int = 2
    student: Path | None = None  # a generally distilled student instead of a copy of the teacher's layers
    augment: bool = True
    copies: int | None = None  # None: scaled to the data (see module docstring)
    candidates_from: str = "auto"
    mlm_model: Path | None = None
    baseline: bool = True
    overrides: list[str] = field(default_factory=list)  # --set for the distill-task recipe
    baseline_overrides: list[str] = field(default_factory=list)  # --set for the baseline's finetune recipe
    seed: int = 0


def scaled_copies(examples: int) -> int:
    """Copies per example so that the augmented set holds about AUGMENTED_EXAMPLES examples."""
    return max(1, min(MAX_COPIES, math.ceil(AUGMENTED_EXAMPLES / max(examples, 1)) - 1))


def compress(
    teacher_spec: str,
    train_file: Path,
    eval_file: Path,
    output: Path,
    opts: CompressOptions | None = None,
    overwrite: bool = False,
    quiet: bool = False,
) -> CompressSummary:
    from bertkit.config.recipe import load_recipe
    from bertkit.config.task_kinds import head_of
    from bertkit.distill.teacher import PER_TOKEN_HEADS, Teacher
    from bertkit.engine.dist import env_world_size
    from bertkit.tasks.data import read_task_file

    opts = opts or CompressOptions()
    if opts.copies is not None and opts.copies < 0:
        raise BertkitError(f"--copies must be 0 (no augmentation) or more, not {opts.copies}")
    if env_world_size() > 1:
        # Every rank would augment, distil and benchmark on its own into one directory.
        raise BertkitError(
            "compress runs on one machine, in one process; under torchrun or the deepspeed launcher run its stages "
            "instead: `bertkit augment`, `bertkit distill --stage task --engine ddp|fsdp|deepspeed`, `bertkit finetune`"
        )
    started = time.perf_counter()
    if is_bi_encoder(teacher_spec):
        from bertkit.pipelines.compress_embeddings import compress_bi_encoder

        return compress_bi_encoder(teacher_spec, Path(train_file), Path(eval_file), Path(output), opts, overwrite,
                                   quiet, started)  # fmt: skip
    teacher = Teacher.load(teacher_spec)
    if head_of(teacher.architecture) in PER_TOKEN_HEADS:
        raise BertkitError(
            f"compress builds sequence classifiers, and {teacher.source} is a {teacher.architecture} model: distil it "
            "with `bertkit distill --stage task --teacher RUN --student COPY --train FILE --eval FILE`, which takes "
            "taggers and QA models"
        )
    if not teacher.has_classifier or not teacher.labels:
        raise BertkitError(
            f"compress starts from a fine-tuned classifier, but {teacher.source} has none: pass the run directory "
            "of `bertkit finetune` or a Hugging Face *ForSequenceClassification checkpoint as --teacher"
        )
    for path in (train_file, eval_file):
        if not Path(path).exists():
            raise BertkitError(f"{path} not found")
    distill_recipe = load_recipe("distill-task", [f"task.pool={teacher.pool}", *opts.overrides], kind="distill")
    baseline_recipe = load_recipe(
        "finetune-classification", [f"task.pool={teacher.pool}", *opts.baseline_overrides], kind="finetune"
    )
    train_data = read_task_file(Path(train_file), distill_recipe.task, distill_recipe.task.split)  # type: ignore[attr-defined]
    if opts.student is None:
        _check_layers(opts.layers, teacher.config.num_layers)
    check_output_dir(output, overwrite)
    if output.exists() and overwrite:
        shutil.rmtree(output)
    output.mkdir(parents=True)
    from bertkit.engine import tracking

    try:
        # One parent run for the job; the distillation and the baseline each open a run nested under it.
        with tracking.parent_run(output, distill_recipe, "compress") as parent:
            summary = _compress(teacher, train_data, train_file, eval_file, output, opts, distill_recipe,
                                baseline_recipe, started, quiet)  # fmt: skip
            if parent is not None:
                parent.finish(summary.as_json(), Path(summary.model_dir))
            return summary
    except BaseException:
        # Nothing half-made stays behind: compress is one job, and a failed one is run again from the start.
        shutil.rmtree(output, ignore_errors=True)
        raise


def _compress(teacher: Any, train_data: Any, train_file: Path, eval_file: Path, output: Path, opts: CompressOptions,
              distill_recipe: Any, baseline_recipe: Any, started: float,
              quiet: bool) -> ClassifierCompressSummary:  # fmt: skip
    from bertkit.pipelines.augment import AugmentOptions, augment
    from bertkit.pipelines.distill.task import distill_task
    from bertkit.pipelines.finetune.run import finetune
    from bertkit.tasks.data import read_task_file

    seconds: dict[str, float] = {}

    def say(message: str) -> None:
        if not quiet:
            stderr_console.print(f"[bold]compress[/bold] {message}")

    def timed(stage: str, begin: float) -> None:
        seconds[stage] = round(time.perf_counter() - begin, 1)

    # 1. the student
    begin = time.perf_counter()
    if opts.student is not None:
        student_dir = Path(opts.student)
        say(f"student: {student_dir}")
    else:
        student_dir = output / "student"
        copy_layers(teacher, opts.layers, student_dir)
        say(f"student: {opts.layers} layers copied from the teacher into {student_dir}")
    timed("student", begin)

    # 2. augmentation
    distill_train = Path(train_file)
    copies = opts.copies if opts.copies is not None else scaled_copies(len(train_data))
    augmented: dict[str, Any] | None = None
    if opts.augment and copies > 0:
        begin = time.perf_counter()
        distill_train = output / f"augmented{_suffix(Path(train_file))}"
        say(f"augmenting {len(train_data):,} examples x {copies} copies")
        task = distill_recipe.task  # type: ignore[attr-defined]
        augmented = augment(
            Path(teacher.source), Path(train_file), distill_train,
            AugmentOptions(copies=copies, seed=opts.seed, text_field=task.text_field,
                           text_pair_field=task.text_pair_field, label_field=task.label_field, split=task.split,
                           candidates_from=opts.candidates_from, mlm_model=opts.mlm_model),
            quiet=quiet,
        )  # fmt: skip
        timed("augment", begin)

    # 3. the task stage
    begin = time.perf_counter()
    say("distilling: the task stage on the teacher's cached logits")
    distilled = distill_task(distill_recipe, teacher.source, student_dir, distill_train, Path(eval_file),  # type: ignore[arg-type]
                             output / "distill", quiet=quiet)  # fmt: skip
    timed("distill", begin)
    if distilled.model_dir is None:
        raise BertkitError(
            f"the budget ({distill_recipe.train.budget}) ran out in the intermediate phase, before the prediction "  # type: ignore[attr-defined]
            "phase trained the student's classifier: give compress a larger --budget"
        )

    # 4. the baseline
    baseline = None
    if opts.baseline:
        begin = time.perf_counter()
        say("baseline: the same student fine-tuned on the gold labels alone")
        baseline = finetune(baseline_recipe, student_dir, Path(train_file), output / "baseline", Path(eval_file),  # type: ignore[arg-type]
                            quiet=quiet)  # fmt: skip
        timed("baseline", begin)

    # 5. the table
    begin = time.perf_counter()
    say("timing inference and scoring every model on the evaluation file")
    models = [("teacher", Path(teacher.source))]
    if baseline is not None:
        models.append(("student, gold labels only", Path(str(baseline.model_dir))))
    models.append(("student, distilled", Path(distilled.model_dir)))
    eval_data = read_task_file(Path(eval_file), distill_recipe.task, distill_recipe.task.eval_split)  # type: ignore[attr-defined]
    rows = compare_models(models, eval_data.texts, eval_data.pairs, eval_data.labels or [])
    timed("table", begin)
    relative_to_teacher(rows, "sentences_per_s", "accuracy")

    shutil.copytree(Path(distilled.model_dir), output / ".model.tmp")
    (output / ".model.tmp").rename(output / "model")
    summary = ClassifierCompressSummary(
        run_dir=str(output),
        model_dir=str(output / "model"),
        teacher=teacher.source,
        student=str(student_dir),
        layers=opts.layers if opts.student is None else None,
        train_examples=len(train_data),
        eval_examples=len(eval_data.texts),
        copies=copies if augmented else 0,
        augmented_examples=augmented["examples_out"] if augmented else len(train_data),
        phases=[phase["phase"] for phase in distilled.phases],
        distill_stopped=distilled.stopped,  # "budget" when --budget ended the distillation early
        candidate_source=augmented["candidate_source"] if augmented else None,
        inference={"batch_size": INFER_BATCH, "max_length": INFER_MAX_LEN, "threads": torch.get_num_threads(),
                   "device": "cpu"},  # fmt: skip
        rows=rows,
        stage_seconds=seconds,
        seconds=round(time.perf_counter() - started, 1),
        beats_baseline=(rows[-1]["accuracy"] > rows[1]["accuracy"]) if baseline is not None else None,
    )
    write_compress_summary(output, summary)
    return summary


def is_bi_encoder(spec: str) -> bool:
    """A retrieval or similarity model of bertkit's, or a sentence-transformers directory: its metadata says how it
    pools its vectors (read from the metadata files alone: the weights are loaded once, by the compress that runs)."""
    from bertkit.fsutil import read_json
    from bertkit.modelio.layout import MODEL_META
    from bertkit.modelio.modeldir import resolve_model_path

    model_dir = resolve_model_path(spec, hub=True)
    if (model_dir / MODEL_META).is_file():
        return bool(read_json(model_dir / MODEL_META, "model metadata").get("embedding"))
    return (model_dir / "modules.json").is_file()


def _suffix(path: Path) -> str:
    from bertkit.inputs.formats import file_format
    from bertkit.pipelines.augment import FORMAT_SUFFIXES

    kind = file_format(path)
    return FORMAT_SUFFIXES["jsonl" if kind == "dataset" else kind]


def compare_models(
    models: list[tuple[str, Path]], texts: list[str], pairs: list[str] | None, labels: list[str]
) -> list[dict[str, Any]]:
    """Sentences/s and accuracy of each classifier on the same batches: a warm-up, then INFER_ROUNDS rounds
    that time one full pass of every model in turn (interleaved, so load on a shared machine that changes
    between models cannot reorder them); each keeps its best round."""
    from bertkit.distill.teacher import Teacher
    from bertkit.tasks.classification import ClassificationBatches, encode_examples

    loaded = []
    for name, path in models:
        model = Teacher.load(str(path))
        tokenizer = model.tokenizer
        # Encoded as fine-tuning encodes them (pairs trimmed longer side first), in file order.
        examples = encode_examples(texts, pairs, np.zeros(len(texts), dtype=np.int64), tokenizer, INFER_MAX_LEN)
        source = ClassificationBatches(examples, INFER_BATCH, tokenizer.pad_id, 0, use_token_types=pairs is not None)
        batches = []
        for i in range(0, len(texts), INFER_BATCH):
            batch = source.batch_of(list(range(i, min(i + INFER_BATCH, len(texts)))))
            batches.append((batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids")))
        params = sum(p.numel() for p in model.parameters())
        loaded.append({"name": name, "model": model, "batches": batches, "params": params, "best": math.inf})
    with torch.inference_mode():
        for item in loaded:
            for batch in item["batches"][:2]:
                item["model"](*batch)
        for _ in range(INFER_ROUNDS):
            for item in loaded:
                begin = time.perf_counter()
                logits = [item["model"](*batch).logits for batch in item["batches"]]
                item["best"] = min(item["best"], time.perf_counter() - begin)
                item["predicted"] = torch.cat(logits).argmax(-1).tolist()
    rows = []
    for item, (_, path) in zip(loaded, models, strict=True):
        names = item["model"].labels
        correct = [names[p] == gold for p, gold in zip(item["predicted"], labels, strict=True)]
        rows.append({"model": item["name"], "path": str(path), "parameters": item["params"],
                     "sentences_per_s": round(len(texts) / item["best"], 1),
                     "accuracy": round(float(np.mean(correct)), 4)})  # fmt: skip
    return rows

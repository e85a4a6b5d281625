"""`bertkit distill --stage task`: TinyBERT's second stage. A fine-tuned teacher's classifier (a run of
`bertkit finetune`, or a Hugging Face BERT/ALBERT/RoBERTa *ForSequenceClassification checkpoint, classes from
its id2label) is distilled into a generally distilled student on the task's labelled data: first the
intermediate layers (embeddings, hidden states, attention scores; `distill.intermediate_fraction` of the
steps), then the prediction layer (soft cross-entropy at `distill.temperature`). With `--method distilbert`
or `minilm` the whole run distils the prediction layer (DistilBERT's soft targets carry T²).

Data is read as `bertkit finetune` reads it (bertkit/tasks/data.py), and `bertkit augment` can enlarge it
first, as TinyBERT does. The gold labels are not trained on (the teacher's soft targets are), but they
must be there: they name the classes and score the student after every epoch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.config.recipe import DistillRecipe
from bertkit.corpus.loader import split_indices
from bertkit.distill.layer_map import resolve_layer_map
from bertkit.distill.objective import INTERMEDIATE, DistillationObjective, term_weights
from bertkit.distill.student import DistillStudent, check_compatible
from bertkit.distill.teacher import Teacher
from bertkit.engine.checkpoint import load_state
from bertkit.engine.device import resolve_device
from bertkit.engine.dist import is_main
from bertkit.engine.loop import train
from bertkit.errors import BertkitError
from bertkit.modeldir import encoder_weights, load_model_dir, save_model_dir
from bertkit.pipelines.distill import summarize
from bertkit.pipelines.finetune import plan_epochs, read_task_file, subset
from bertkit.pipelines.rundir import prepare_run_dir, write_summary
from bertkit.tasks.classification import ClassificationBatches, encode_examples, evaluate_classifier, label_indices


class LogitsView(nn.Module):
    """The student as `evaluate_classifier` calls a classifier: `{"logits": ...}` from the batch tensors."""

    def __init__(self, student: nn.Module) -> None:
        super().__init__()
        self.student = student

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:  # fmt: skip
        return {"logits": self.student(input_ids, attention_mask, token_type_ids).logits}


def check_labels(teacher: Teacher, data_labels: list[str], source: Path) -> None:
    """Every label of the task data must be one of the teacher's classes: the gold labels score the student
    against the teacher's outputs by class name. A mismatch names where the teacher's names come from."""
    known = teacher.labels or []
    unknown = sorted(set(data_labels) - set(known))
    if not unknown:
        return
    if teacher.huggingface:
        fix = (
            f"if they are the same classes under other names, write the data's names into id2label in "
            f"{Path(teacher.source) / 'config.json'}, in the order of the teacher's class ids"
        )
    else:
        fix = "distil on data labelled with the teacher's classes (task.label_field picks the column)"
    raise BertkitError(
        f"{source} has labels {unknown[:5]} that the teacher {teacher.source} does not predict "
        f"(its classes: {known[:10]}); {fix}"
    )


def distill_task(
    recipe: DistillRecipe,
    teacher_spec: str,
    student_dir: Path,
    train_file: Path,
    eval_file: Path | None,
    output: Path,
    overwrite: bool = False,
    resume: bool | str | None = False,
    quiet: bool = False,
) -> dict[str, Any]:
    teacher = Teacher.load(teacher_spec)
    if not teacher.has_classifier or not teacher.labels:
        what = f" (a {teacher.huggingface} checkpoint)" if teacher.huggingface else ""
        raise BertkitError(
            f"--stage task distils a fine-tuned single-label classifier, but the teacher {teacher.source}{what} has "
            "none; pass the run directory of `bertkit finetune`, or a Hugging Face BERT, ALBERT or RoBERTa "
            "*ForSequenceClassification checkpoint, as --teacher"
        )
    student_path, meta, student_cfg, student_weights, student_tokenizer = load_model_dir(student_dir)
    if student_tokenizer.fingerprint() != teacher.tokenizer.fingerprint():
        raise BertkitError(
            f"the student {student_path} and the teacher {teacher.source} use different tokenizers; the task stage "
            "continues a student distilled from this teacher's tokenizer"
        )
    method = recipe.distill.method or meta.get("method") or "tinybert"
    if method not in ("distilbert", "tinybert", "minilm"):
        raise BertkitError(f"{student_path} names an unknown distillation method '{method}'; pass --method")
    task = recipe.task
    if task.kind != "classification":
        raise BertkitError("--stage task distils a classifier: set task.kind=classification")
    labels = teacher.labels
    train_data = read_task_file(train_file, task, task.split)
    if eval_file is not None:
        eval_data = read_task_file(eval_file, task, task.eval_split)
    else:
        train_idx, eval_idx = split_indices(len(train_data), task.eval_fraction, recipe.train.seed)
        train_data, eval_data = subset(train_data, train_idx), subset(train_data, eval_idx)
    intermediate = method == "tinybert" and recipe.distill.intermediate_fraction > 0
    if intermediate:
        check_compatible(student_cfg, teacher.config, same_heads=recipe.distill.alpha_attention > 0)
    layer_map = resolve_layer_map(recipe.distill.layer_map, student_cfg.num_layers, teacher.config.num_layers)
    longest = min(c.max_position_embeddings - c.position_offset for c in (student_cfg, teacher.config))
    max_len = min(task.max_seq_len, longest)

    def encoded(data: Any, source: Path) -> Any:
        # The teacher's classes, in its order: a label it was never trained on is an error naming the file.
        check_labels(teacher, data.labels or [], source)
        return encode_examples(data.texts, data.pairs, label_indices(data.labels or [], labels, source),
                               teacher.tokenizer, max_len)  # fmt: skip

    train_examples = encoded(train_data, train_file)
    eval_examples = encoded(eval_data, eval_file or train_file) if len(eval_data) else None
    train_cfg, steps_per_epoch = plan_epochs(recipe.train, len(train_data))
    assert train_cfg.steps is not None
    switch = round(train_cfg.steps * recipe.distill.intermediate_fraction) if intermediate else 0
    phases = [(0, INTERMEDIATE), (switch, ("prediction",))] if switch else [(0, ("prediction",))]
    recipe = recipe.model_copy(update={"model": student_cfg})  # recipe.yaml records the student's shape
    resumed = prepare_run_dir(output, recipe, overwrite, resume)

    torch.manual_seed(recipe.train.seed)
    student = DistillStudent(
        student_cfg,
        teacher_hidden_size=teacher.config.hidden_size if intermediate else None,
        num_labels=len(labels),
        classifier_dropout=task.classifier_dropout,
        pool=task.pool,
    )
    load_state(student.encoder, encoder_weights(student_weights), str(student_path))
    weights = term_weights(recipe.distill, (*INTERMEDIATE, "prediction") if intermediate else ("prediction",))
    temperature = recipe.distill.resolved_temperature(method)  # type: ignore[arg-type]
    objective = DistillationObjective(method, teacher, weights, temperature, layer_map, phases)  # type: ignore[arg-type]
    use_types = task.text_pair_field is not None and student_cfg.type_vocab_size > 1
    micro = train_cfg.batch_size // train_cfg.grad_accum
    pad = teacher.tokenizer.pad_id
    source = ClassificationBatches(train_examples, micro, pad, train_cfg.seed, use_types)
    evaluate = None
    if eval_examples is not None:
        eval_batches = ClassificationBatches(eval_examples, micro, pad, train_cfg.seed, use_types)
        device = resolve_device(recipe.engine)
        evaluate = lambda m: evaluate_classifier(LogitsView(m), eval_batches, device)  # noqa: E731
    result = train(student, objective, source, output, train_cfg, recipe.optim, recipe.schedule, recipe.engine,
                   evaluate, resume=resumed, quiet=quiet, description=f"distill task ({method})")  # fmt: skip
    model_dir = output / "model"
    if is_main():
        save_model_dir(model_dir, student.kept_module().cpu(), student_cfg, "sequence-classification",
                       teacher.tokenizer, {"labels": labels, "task": task.model_dump(mode="json"),
                                           "distilled_from": teacher.source, "method": method})  # fmt: skip
    summary = {
        "run_dir": str(output),
        "model_dir": str(model_dir),
        "stage": "task",
        "method": method,
        "teacher": teacher.source,
        "student": str(student_path),
        "labels": labels,
        "phases": [{"from_step": first, "terms": list(terms)} for first, terms in phases],
        "train_examples": len(train_data),
        "eval_examples": len(eval_data),
        "epochs": train_cfg.epochs,
        "steps_per_epoch": steps_per_epoch,
        "steps": result.steps,
        "tokens": result.tokens,  # what a token budget (--budget 5Mtok) counts, as the general stage reports
        "seconds": round(result.seconds, 1),
        **summarize(result, tuple(dict.fromkeys(t for _, terms in phases for t in terms))),
        "eval": result.eval,
        "resumed_from": result.resumed_from,
        "stopped": result.stopped,
        "label_counts": {name: int(np.sum(train_examples.labels == i)) for i, name in enumerate(labels)},
    }
    write_summary(output, summary)
    return summary

"""`bertkit finetune --task question-answering`: extractive QA on SQuAD v1.1 / v2.0 data. The same run
directory, loop, epoch plan and best-model keeping as the other tasks (bertkit/pipelines/finetune/common.py); the
data, head, post-processing and metrics live in bertkit/tasks/qa.py. Every file is read and every training
answer checked before the run directory is created."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from bertkit.config.recipe import FinetuneRecipe
from bertkit.config.schema import qa_doc_stride
from bertkit.engine.checkpoint import load_state
from bertkit.engine.device import resolve_device
from bertkit.engine.dist import is_main
from bertkit.engine.loop import train
from bertkit.errors import BertkitError
from bertkit.modelio.modeldir import encoder_weights, load_model_dir, save_model_dir
from bertkit.models.pretraining import build_encoder
from bertkit.pipelines.finetune.common import BestModel, plan_epochs, skipped_summary, training_summary
from bertkit.pipelines.rundir import prepare_run_dir, write_summary
from bertkit.tasks.qa import (
    QABatches,
    QuestionAnswerer,
    encode_qa,
    evaluate_qa,
    qa_objective,
    read_qa_split,
)

ARCHITECTURE = "question-answering"


def finetune_qa(
    recipe: FinetuneRecipe,
    model_path: Path,
    train_file: Path,
    output: Path,
    eval_file: Path | None = None,
    overwrite: bool = False,
    resume: bool | str | None = False,
    quiet: bool = False,
) -> dict[str, Any]:
    task = recipe.task  # its keys fit the kind: TaskConfig refuses a --split or --feature-based here
    model_dir, _, model_cfg, weights, tokenizer = load_model_dir(model_path)
    if model_cfg.family == "xlnet":
        raise BertkitError(
            "question answering builds [CLS] question [SEP] context [SEP] windows; XLNet's layout differs. "
            "Use a BERT-family model"
        )
    train_data, eval_read, train_examples, eval_examples = read_qa_split(
        train_file, eval_file, task.skip_bad_rows, task.eval_fraction, recipe.train.seed
    )
    with_null = train_data.has_impossible
    max_len = min(task.max_seq_len, model_cfg.max_position_embeddings - model_cfg.position_offset)
    use_types = model_cfg.type_vocab_size > 1
    # Derived from the window actually used (the model's positions may cap task.max_seq_len) when not set.
    stride = qa_doc_stride(max_len, task.doc_stride)
    train_features = encode_qa(train_examples, tokenizer, max_len, stride, use_types)
    eval_features = encode_qa(eval_examples, tokenizer, max_len, stride, use_types) if eval_examples else None

    train_cfg, steps_per_epoch = plan_epochs(recipe.train, len(train_features))
    resumed = prepare_run_dir(output, recipe, overwrite, resume)

    torch.manual_seed(recipe.train.seed)
    model = QuestionAnswerer(build_encoder(model_cfg))
    load_state(model.encoder, encoder_weights(weights), str(model_dir))
    micro = train_cfg.batch_size // train_cfg.grad_accum
    source = QABatches(train_features, micro, tokenizer.pad_id, train_cfg.seed, use_types)
    evaluate = best = None
    if eval_features is not None:
        device = resolve_device(recipe.engine)
        evaluate = lambda m: evaluate_qa(  # noqa: E731
            m, eval_examples, eval_features, device, tokenizer.pad_id, use_types, task, with_null
        )
        best = BestModel.start(output, task.best_metric, task.early_stopping_patience, resumed)
    result = train(
        model, qa_objective, source, output, train_cfg, recipe.optim, recipe.schedule, recipe.engine, evaluate,
        resume=resumed, quiet=quiet, description="finetune", on_eval=best,
    )  # fmt: skip
    saved = output / "model"
    best_info = best.info if best is not None else None
    if is_main():
        model = model.cpu()
        if best is not None:
            best.finish(model, result.steps)
        # The window and stride the model was trained with, resolved (a derived stride is saved as a number).
        task_meta = {**task.model_dump(mode="json"), "max_seq_len": max_len, "doc_stride": stride,
                     "version_2_with_negative": with_null}  # fmt: skip
        save_model_dir(saved, model, model_cfg, ARCHITECTURE, tokenizer, {"labels": [], "task": task_meta,
                                                                          "best": best_info})  # fmt: skip
    summary: dict[str, Any] = {
        "run_dir": str(output),
        "model_dir": str(saved),
        "task": task.kind,
        "recipe": recipe.name,  # the task's own (finetune-KIND) unless --recipe named one
        "version_2_with_negative": with_null,
        "rows_read": train_data.rows_read,
        "rows_skipped": train_data.skipped,
        "answers_shifted": train_data.shifted,
        "train_examples": len(train_examples),
        "eval_examples": len(eval_examples),
        "train_windows": len(train_features),
        "eval_windows": len(eval_features) if eval_features is not None else 0,
        "unreachable_answers": train_features.unreachable,
        **training_summary(result, best, train_cfg, steps_per_epoch),
    }
    summary.update(skipped_summary(train_data, eval_read))
    write_summary(output, summary)
    return summary

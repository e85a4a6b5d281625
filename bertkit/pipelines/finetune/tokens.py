"""`bertkit finetune --task token-classification`: NER or POS tagging. The same run directory, loop, epoch
plan and best-model keeping as sequence tasks (bertkit/pipelines/finetune/common.py); here only the data, the head
and the metrics differ. Every file is read and its tags checked before the run directory is created."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from bertkit.config.recipe import FinetuneRecipe
from bertkit.corpus.loader import split_indices
from bertkit.engine.checkpoint import load_state
from bertkit.engine.device import resolve_device
from bertkit.engine.dist import is_main
from bertkit.engine.loop import train
from bertkit.errors import BertkitError
from bertkit.modelio.modeldir import encoder_weights, load_model_dir, save_model_dir
from bertkit.models.pretraining import build_encoder
from bertkit.pipelines.finetune.common import BestModel, plan_epochs, training_summary
from bertkit.pipelines.rundir import prepare_run_dir, write_summary
from bertkit.tasks.token_classification import (
    TokenBatches,
    TokenClassifier,
    TokenData,
    encode_sentences,
    evaluate_tagger,
    read_token_file,
    resolve_tags,
    tag_indices_check,
    token_classification_objective,
)

ARCHITECTURE = "token-classification"


def finetune_tokens(
    recipe: FinetuneRecipe,
    model_path: Path,
    train_file: Path,
    output: Path,
    eval_file: Path | None = None,
    overwrite: bool = False,
    resume: bool | str | None = False,
    quiet: bool = False,
) -> dict[str, Any]:
    task = recipe.task  # its keys fit the kind: TaskConfig refuses a --split or a pool here
    model_dir, _, model_cfg, weights, tokenizer = load_model_dir(model_path)
    train_data = read_token_file(train_file)
    train_tags = resolve_tags(train_data, task.tag_scheme)
    scheme = train_data.scheme
    with_entities = scheme != "none"
    metric = task.metric or ("f1" if with_entities else "accuracy")
    if not with_entities and metric != "accuracy":
        raise BertkitError(
            f"task.metric {metric} needs entity tags, but {train_file} has plain tags (scheme none); "
            "use task.metric=accuracy"
        )
    names = sorted({tag for tags in train_tags for tag in tags})
    if len(names) < 2:
        raise BertkitError(f"{train_file}: every word has the tag {names[0]!r}; tagging needs at least two tags")
    if eval_file is not None:
        eval_data = read_token_file(eval_file)
        # The evaluation file is read in the training file's scheme (auto: detected on the training file).
        eval_tags = resolve_tags(eval_data, scheme)
        tag_indices_check(eval_tags, names, eval_file)
        train_part, train_part_tags = train_data, train_tags
    else:
        train_idx, eval_idx = split_indices(len(train_data), task.eval_fraction, recipe.train.seed)
        train_part, eval_data = train_data.subset(train_idx), train_data.subset(eval_idx)
        train_part_tags = [train_tags[i] for i in train_idx]
        eval_tags = [train_tags[i] for i in eval_idx]
    max_len = min(task.max_seq_len, model_cfg.max_position_embeddings - model_cfg.position_offset)
    train_examples = encode_sentences(train_part.words, train_part_tags, names, tokenizer, max_len)
    eval_examples = encode_sentences(eval_data.words, eval_tags, names, tokenizer, max_len) if len(eval_data) else None

    train_cfg, steps_per_epoch = plan_epochs(recipe.train, len(train_part))
    resumed = prepare_run_dir(output, recipe, overwrite, resume)

    torch.manual_seed(recipe.train.seed)
    model = TokenClassifier(build_encoder(model_cfg), len(names), task.classifier_dropout)
    load_state(model.encoder, encoder_weights(weights), str(model_dir))
    if task.mode == "feature":
        model.encoder.requires_grad_(False)
    micro = train_cfg.batch_size // train_cfg.grad_accum
    source = TokenBatches(train_examples, micro, tokenizer.pad_id, train_cfg.seed)
    evaluate = best = None
    if eval_examples is not None:
        device = resolve_device(recipe.engine)
        evaluate = lambda m: evaluate_tagger(  # noqa: E731
            m, eval_examples, eval_tags, names, device, tokenizer.pad_id, with_entities
        )
        best = BestModel.start(output, metric, task.early_stopping_patience, resumed)
    result = train(
        model, token_classification_objective, source, output, train_cfg, recipe.optim, recipe.schedule,
        recipe.engine, evaluate, resume=resumed, quiet=quiet, description="finetune", on_eval=best,
    )  # fmt: skip
    saved = output / "model"
    best_info = best.info if best is not None else None
    if is_main():
        model = model.cpu()
        if best is not None:
            best.finish(model, result.steps)
        task_meta = {**task.model_dump(mode="json"), "tag_scheme": scheme, "metric": metric}
        save_model_dir(
            saved, model, model_cfg, ARCHITECTURE, tokenizer, {"labels": names, "task": task_meta, "best": best_info}
        )
    summary: dict[str, Any] = {
        "run_dir": str(output),
        "model_dir": str(saved),
        "task": task.kind,
        "recipe": recipe.name,  # the task's own (finetune-KIND) unless --recipe named one
        "tag_scheme": scheme,
        "labels": names,
        "rows_read": train_data.rows_read,
        "rows_skipped": 0,
        "label_counts": TokenData(train_file, train_part.words, train_part_tags).tag_counts(),
        "train_examples": len(train_part),
        "eval_examples": len(eval_data),
        "train_words": sum(len(w) for w in train_part.words),
        "truncated": train_examples.truncated + (eval_examples.truncated if eval_examples else 0),
        **training_summary(result, best, train_cfg, steps_per_epoch),
        "mode": task.mode,
    }
    if eval_file is not None:
        summary["eval_rows_read"] = eval_data.rows_read
    write_summary(output, summary)
    return summary

"""`bertkit finetune`: a pretrained model and a labelled file in, a fine-tuned model out, for every task kind.

The kind (bertkit/tasks/kinds: reading, encoding, head, objective, metrics) is looked up once; the rest is the
same for all. Order matters: the model and every data file are read and checked before the run directory is
created, so bad input leaves nothing behind. With `train.epochs` the step count comes from the training-set size,
the model is evaluated after each epoch, and `model/` holds the weights of the best evaluation by the task's
metric (optionally stopping early after `task.early_stopping_patience` evaluations without improvement).
"""

from __future__ import annotations

from pathlib import Path

import torch

from bertkit.config.recipe import FinetuneRecipe
from bertkit.engine.checkpoint import load_state
from bertkit.engine.device import resolve_device
from bertkit.engine.dist import is_main
from bertkit.engine.loop import train
from bertkit.errors import BertkitError
from bertkit.modelio.modeldir import encoder_weights, load_model_dir, save_model_dir
from bertkit.models.pretraining import build_encoder
from bertkit.pipelines.finetune.common import BestModel, plan_epochs, training_summary
from bertkit.pipelines.finetune.probe import fit_probe
from bertkit.pipelines.rundir import join_job, prepare_run_dir
from bertkit.pipelines.summary import FinetuneSummary, write_summary
from bertkit.tasks.kinds import task_kind
from bertkit.tasks.kinds.embedding import checkpoint_task


def finetune(
    recipe: FinetuneRecipe,
    model_path: Path,
    train_file: Path,
    output: Path,
    eval_file: Path | None = None,
    overwrite: bool = False,
    resume: bool | str | None = False,
    quiet: bool = False,
) -> FinetuneSummary:
    task = recipe.task
    join_job(
        recipe,
        {"output": output, "model": model_path, "train": train_file, "eval": eval_file, "overwrite": overwrite,
         "resume": resume},
        {"model": model_path, "training file": train_file, "evaluation file": eval_file},
    )  # fmt: skip
    kind = task_kind(task.kind)
    model_dir, meta, model_cfg, weights, tokenizer = load_model_dir(model_path)
    task = checkpoint_task(task, meta)
    prepared = kind.prepare(task, model_cfg, tokenizer, train_file, eval_file, recipe.train.seed)
    train_cfg, steps_per_epoch = plan_epochs(recipe.train, prepared.examples)
    if prepared.whole_batch and train_cfg.batch_size > prepared.examples:
        raise BertkitError(
            f"train.batch_size {train_cfg.batch_size} is larger than the {prepared.examples} training examples, so a "
            "batch would hold an example twice (its own negative): lower train.batch_size"
        )
    if prepared.whole_batch and train_cfg.grad_accum > 1:
        raise BertkitError(
            f"a {task.kind} loss compares the examples of a batch with each other, so the batch must be one pass: "
            f"set train.grad_accum=1 (train.batch_size {train_cfg.batch_size} sequences per pass)"
        )
    if task.reads("cache_chunk") and task.cache_chunk and recipe.engine.backend != "single":
        raise BertkitError(
            f"task.cache_chunk runs under engine.backend=single; under {recipe.engine.backend} leave it at 0 and "
            "give each process a batch that fits"
        )
    fitted = task.reads("mode") and task.mode == "feature" and task.head_solver == "lbfgs"
    if fitted and (prepared.probe is None or recipe.engine.backend != "single"):
        why = "runs in one process" if prepared.probe is not None else f"has no {task.kind} head to fit"
        raise BertkitError(f"the L-BFGS probe (task.head_solver=lbfgs) {why}: set engine.backend=single, or "
                           "task.head_solver=optimizer to train the head with the recipe's optimizer")  # fmt: skip
    # Everything is read and valid: only now does the run directory appear.
    resumed = prepare_run_dir(output, recipe, overwrite, resume)

    torch.manual_seed(recipe.train.seed)  # reproducible initial weights (and the same on every rank)
    model = prepared.build(build_encoder(prepared.model_cfg))
    own = encoder_weights(weights)
    load_state(model.encoder, own, str(model_dir), strict=all(key in own for key in prepared.fresh))
    device = resolve_device(recipe.engine)
    best: BestModel | None = None
    if fitted:
        entries = fit_probe(model, prepared, task, device, recipe.train.seed, quiet)
        last_step = 0
    else:
        micro = train_cfg.batch_size // train_cfg.grad_accum
        source, evaluate = prepared.sources(model, micro, train_cfg.seed, device)
        best = BestModel.start(output, prepared.metric, task.early_stopping_patience, resumed) if evaluate else None
        result = train(
            model, prepared.objective, source, output, train_cfg, recipe.optim, recipe.schedule, recipe.engine,
            evaluate, resume=resumed, quiet=quiet, description="finetune", on_eval=best,
        )  # fmt: skip
        entries, last_step = training_summary(result, best, train_cfg, steps_per_epoch), result.steps
    saved = output / "model"
    best_info = best.info if best is not None else None
    if is_main():  # under a distributed engine only rank 0 writes
        model = model.cpu()
        if best is not None:
            best.finish(model, last_step)
        extra = {"labels": prepared.labels, "task": prepared.task_meta, "best": best_info, **prepared.model_meta}
        save_model_dir(saved, model, prepared.model_cfg, kind.architecture, tokenizer, extra)
    summary = FinetuneSummary(
        run_dir=str(output),
        model_dir=str(saved),
        task=task.kind,
        recipe=recipe.name,  # the task's own (finetune-KIND) unless --recipe named one
        **entries,
        **prepared.summary,  # the kind's own entries
    )
    write_summary(output, summary)
    return summary

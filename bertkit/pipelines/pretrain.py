"""`bertkit pretrain`: a corpus and a recipe in, a run directory with a trained encoder out."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.config.recipe import PretrainRecipe
from bertkit.corpus.build import TOKENIZER_SUBDIR
from bertkit.corpus.loader import MLMBatches, split_indices
from bertkit.corpus.masking import MaskingSpec
from bertkit.corpus.shards import Corpus
from bertkit.engine.checkpoint import load_state
from bertkit.engine.dist import is_main
from bertkit.engine.loop import train
from bertkit.errors import BertkitError
from bertkit.modeldir import load_model_dir, save_model_dir
from bertkit.models.pretraining import MaskedLMModel
from bertkit.objectives.mlm import MLMObjective
from bertkit.pipelines.rundir import prepare_run_dir, write_summary
from bertkit.tokenizers.base import load_tokenizer


def _mlm_evaluator(
    corpus: Corpus,
    indices: np.ndarray,
    spec: MaskingSpec,
    pad_id: int,
    batch_size: int,
    max_batches: int,
    device: torch.device,
):
    def evaluate(model: nn.Module) -> dict[str, float]:
        # A fresh, unshuffled loader with a fixed seed: every evaluation sees the same masks.
        batches = MLMBatches(corpus, indices, batch_size, spec, pad_id, seed=1234, shuffle=False)
        objective = MLMObjective()
        total_loss = total_correct = total_count = 0.0
        for _ in range(min(max_batches, math.ceil(len(indices) / batch_size))):
            batch = {k: v.to(device) for k, v in batches.next_batch().items()}
            loss, metrics = objective(model, batch)
            count = batch["mlm_labels"].numel()
            total_loss += float(loss) * count
            total_correct += float(metrics["mlm_acc"]) * count
            total_count += count
        mean = total_loss / max(1.0, total_count)
        return {
            "mlm_loss": round(mean, 4),
            "mlm_acc": round(total_correct / max(1.0, total_count), 4),
            "perplexity": round(math.exp(min(mean, 50.0)), 2),
        }

    return evaluate


def pretrain(
    recipe: PretrainRecipe,
    output: Path,
    init_from: Path | None = None,
    overwrite: bool = False,
    resume: bool = False,
    quiet: bool = False,
) -> dict[str, Any]:
    if recipe.data.train is None:
        raise BertkitError("no training corpus: pass --corpus DIR (or --set data.train=DIR)")
    corpus = Corpus(recipe.data.train)
    tokenizer = load_tokenizer(recipe.data.train / TOKENIZER_SUBDIR)
    model_cfg = recipe.model
    init_weights = None
    if init_from is not None:
        _, _, model_cfg, init_weights, init_tokenizer = load_model_dir(init_from)
        if init_tokenizer.fingerprint() != tokenizer.fingerprint():
            raise BertkitError(
                f"--init-from {init_from} was trained with a different tokenizer than the corpus "
                f"{recipe.data.train}; rebuild the corpus with that model's tokenizer"
            )
    else:
        # From scratch, the vocabulary is the corpus tokenizer's: a recipe cannot know its size in advance.
        model_cfg = model_cfg.model_copy(update={"vocab_size": tokenizer.vocab_size, "pad_token_id": tokenizer.pad_id})
    longest = int(corpus.lengths().max())
    if longest + model_cfg.position_offset > model_cfg.max_position_embeddings:
        raise BertkitError(
            f"corpus sequences reach {longest} tokens but the model has "
            f"{model_cfg.max_position_embeddings} positions; raise model.max_position_embeddings "
            "or rebuild the corpus with a smaller --max-seq-len"
        )
    recipe = recipe.model_copy(update={"model": model_cfg})
    prepare_run_dir(output, recipe, overwrite, resume)

    torch.manual_seed(recipe.train.seed)  # reproducible initial weights (and the same on every rank)
    model = MaskedLMModel(model_cfg)
    if init_weights is not None:
        load_state(model, init_weights, str(init_from), strict=False)
    masking = recipe.data.masking
    spec = MaskingSpec(
        masking.prob,
        masking.mask_fraction,
        masking.random_fraction,
        tokenizer.mask_id,
        tokenizer.special_ids,
        tokenizer.vocab_size,
    )
    seed = recipe.train.seed
    if recipe.data.eval is not None:
        eval_corpus = Corpus(recipe.data.eval)
        train_idx, eval_idx = np.arange(len(corpus)), np.arange(len(eval_corpus))
    else:
        eval_corpus = corpus
        train_idx, eval_idx = split_indices(len(corpus), recipe.data.eval_fraction, seed)
    micro = recipe.train.batch_size // recipe.train.grad_accum
    source = MLMBatches(corpus, train_idx, micro, spec, tokenizer.pad_id, seed)
    from bertkit.engine.device import resolve_device

    device = resolve_device(recipe.engine)
    evaluate = (
        _mlm_evaluator(eval_corpus, eval_idx, spec, tokenizer.pad_id, micro, recipe.train.eval_batches, device)
        if len(eval_idx)
        else None
    )
    result = train(
        model,
        MLMObjective(recipe.objective.mlm),
        source,
        output,
        recipe.train,
        recipe.optim,
        recipe.schedule,
        recipe.engine,
        evaluate,
        resume=resume,
        quiet=quiet,
        description="pretrain",
    )
    model_dir = output / "model"
    if is_main():  # under a distributed engine only rank 0 writes
        save_model_dir(
            output / "model",
            model.cpu(),
            model_cfg,
            "masked-lm",
            tokenizer,
            {"recipe": recipe.name, "steps": result.steps},
        )
    first, last = result.first_last("loss")
    summary = {
        "run_dir": str(output),
        "model_dir": str(model_dir),
        "recipe": recipe.name,
        "parameters": sum(p.numel() for p in model.encoder.parameters()),
        "steps": result.steps,
        "tokens": result.tokens,
        "seconds": round(result.seconds, 1),
        "loss_first": first,
        "loss_last": last,
        "eval": result.eval,
        "skipped_steps": result.skipped_steps,
        "resumed_from": result.resumed_from,
        "stopped": result.stopped,
        "train_sequences": len(train_idx),
        "eval_sequences": len(eval_idx),
    }
    write_summary(output, summary)
    return summary

"""`pretrain --decay-from RUN/checkpoints/step-N`: the decay of a warmup-stable-decay run, laid from any checkpoint of
its stable phase. The run starts from that checkpoint's weights and optimizer state (the moments AdamW has gathered,
its step count), and its schedule is the decay alone: from the recipe's peak rate down to `schedule.min_lr_ratio`
over the run's steps or budget, in the recipe's decay shape (1-sqrt for ModernBERT's recipes). On the stable run's
own corpus it also continues its data order and random state, so decaying the stable run at step N over D steps is
the run that would have decayed there. A user decays wherever the stable run kept a checkpoint
(`train.keep_every`) and compares the results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bertkit.config.recipe import PretrainRecipe
from bertkit.engine.checkpoint import TRAINER_JSON, TRAINING_STATE, WEIGHTS
from bertkit.errors import BertkitError
from bertkit.pipelines.rundir import RECIPE_FILE


def decay_recipe(recipe: PretrainRecipe, checkpoint: Path,
                 decay: bool = True) -> tuple[PretrainRecipe, bool, dict[str, Any]]:  # fmt: skip
    """The recipe with its schedule cut to the decay (`decay`; else as it is: a phase that continues the last one's
    state on a schedule of its own), whether the data order continues (the stable run's corpus), and what the
    summary records; one line when `checkpoint` is not a bertkit training checkpoint."""
    if not all((checkpoint / name).is_file() for name in (WEIGHTS, TRAINING_STATE, TRAINER_JSON)):
        raise BertkitError(
            f"--decay-from {checkpoint} is not a bertkit training checkpoint (RUN/checkpoints/step-N, with the "
            f"optimizer state: keep them with --set train.keep_every=N); a model directory holds weights only"
        )
    source = checkpoint.parent.parent
    try:
        stable = yaml.safe_load((source / RECIPE_FILE).read_text("utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        stable = {}
    stable_corpus = ((stable.get("data") or {}).get("train")) if isinstance(stable, dict) else None
    ours = str(recipe.data.train)
    same_corpus = stable_corpus is not None and (
        str(stable_corpus) == ours or ("://" not in ours and Path(str(stable_corpus)).resolve() == Path(ours).resolve())
    )
    schedule = recipe.schedule
    data = "continued from the checkpoint" if same_corpus else "this corpus, from its start"
    if not decay:
        return recipe, same_corpus, {"from": str(checkpoint), "data": data}
    shape = schedule.decay_shape if schedule.decay == "wsd" else "linear"
    decayed = schedule.model_copy(update={"warmup_steps": 0, "warmup_fraction": 0.0, "decay": "wsd",
                                          "decay_fraction": 1.0, "decay_shape": shape})  # fmt: skip
    entry = {"from": str(checkpoint), "shape": shape, "min_lr_ratio": schedule.min_lr_ratio, "data": data}
    return recipe.model_copy(update={"schedule": decayed}), same_corpus, entry

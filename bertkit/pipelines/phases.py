"""Pretraining in phases (a recipe's `phases:`): one `bertkit pretrain` runs them in order in one run directory, as
ModernBERT is trained (a stable phase at 1,024 tokens, a context extension at 8,192 with the global rotary base
raised, a decay).

Each phase is the phase before it (the first: the recipe) with its own overrides, so a setting holds until a phase
changes it; each runs as a pretraining run of its own under RUN/phases/NN-NAME/.
The first starts as the recipe says (or from --init-from). A later phase starts from the state the one before
ended in: a phase that keeps the model continues its weights and optimizer state (and, on the same corpus, its data
order and random state) on a schedule of its own, or the decay alone (`decay: true`); a phase that changes the model
(more positions, other rotary bases) starts from its weights, the tables grown as `--init-from` grows them, with a
fresh optimizer state. Every phase ends on a checkpoint, which the next one starts from, so `--resume` continues a
phased run across a phase boundary as it continues one run: finished phases are kept, the phase under way resumes
from its newest checkpoint. RUN/model is the last phase's model; RUN/summary.json lists every phase's summary.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

from bertkit.config.recipe import PhaseConfig, PretrainRecipe, apply_overrides, override_keys, validate_recipe
from bertkit.engine.checkpoint import list_checkpoints
from bertkit.errors import BertkitError
from bertkit.fsutil import check_output_dir, read_json
from bertkit.pipelines.init_from import CONTEXT_KEYS, EXTENDABLE, FREE_KEYS
from bertkit.pipelines.rundir import resume_mode
from bertkit.pipelines.summary import (
    SUMMARY_FILE,
    PhasedPretrainSummary,
    PretrainPhase,
    PretrainSummary,
    read_summary,
    write_summary,
)

PHASES = "phases"


def phase_recipes(recipe: PretrainRecipe, corpora: dict[str, str]) -> list[tuple[PhaseConfig, PretrainRecipe]]:
    """Each phase's recipe, validated before anything runs; one line for a phase naming a corpus no --corpus gives,
    an override its recipe refuses, or a model change a phase cannot make."""
    base = recipe.model_dump(mode="json")
    base.pop("phases")
    out: list[tuple[PhaseConfig, PretrainRecipe]] = []
    for phase in recipe.phases:  # each phase's overrides apply to the phase before it
        if out:
            base = out[-1][1].model_dump(mode="json")
        overrides = list(phase.set)
        if phase.corpus is not None:
            if phase.corpus not in corpora:
                given = ", ".join(corpora) or "none"
                raise BertkitError(f"phase '{phase.name}' trains on corpus '{phase.corpus}', which no --corpus "
                                   f"{phase.corpus}=DIR gives (named corpora given: {given})")  # fmt: skip
            overrides.append(f"data.train={corpora[phase.corpus]}")
        raw = apply_overrides(copy.deepcopy(base), overrides)
        phase_recipe = validate_recipe(raw, f"recipe '{recipe.name}', phase '{phase.name}'", "pretrain")
        if out:
            _check_model_change(out[-1][1], phase_recipe, phase.name)
        _check_positions(phase_recipe, phase)
        if phase.decay and _model_changes(out[-1][1], phase_recipe):
            raise BertkitError(f"phase '{phase.name}' decays the phase before it, so it cannot change the model; "
                               "change it in a phase of its own")  # fmt: skip
        out.append((phase, phase_recipe))  # type: ignore[arg-type]
    return out


def _check_positions(recipe: PretrainRecipe, phase: PhaseConfig) -> None:
    """A phase's corpus (a local one: its manifest) must fit the phase's positions, checked before any phase runs."""
    from bertkit.corpus.shards import MANIFEST

    train = recipe.data.train
    manifest = Path(str(train)) / MANIFEST if train is not None and "://" not in str(train) else None
    if manifest is None or not manifest.is_file():
        return  # a remote corpus, or one that is not there: checked when the phase starts
    length = int((read_json(manifest, "corpus manifest").get("options") or {}).get("max_seq_len") or 0)
    if length > recipe.model.max_position_embeddings:
        named = f"corpus '{phase.corpus}'" if phase.corpus else "the corpus"
        raise BertkitError(f"phase '{phase.name}' reads {length}-token sequences of {named} but its model has "
                           f"{recipe.model.max_position_embeddings} positions; add model.max_position_embeddings="
                           f"{length} (or more) to its set:")  # fmt: skip


def _model_changes(before: PretrainRecipe, after: PretrainRecipe) -> dict[str, tuple[Any, Any]]:
    a, b = before.model.model_dump(), after.model.model_dump()
    return {key: (a.get(key), b[key]) for key in b if a.get(key) != b[key]}


def _check_model_change(before: PretrainRecipe, after: PretrainRecipe, name: str) -> None:
    for key, (old, new) in _model_changes(before, after).items():
        if key in EXTENDABLE and new < old:
            raise BertkitError(f"phase '{name}' shrinks model.{key} from {old} to {new}; a phase may only grow it")
        if key not in EXTENDABLE and key not in CONTEXT_KEYS and key not in FREE_KEYS:
            raise BertkitError(
                f"phase '{name}' changes model.{key} ({old} -> {new}); a phase may grow the positions, change "
                "ModernBERT's rotary bases and local window, and dropout, not the model's shapes"
            )


def _finished(run: Path) -> PretrainSummary | None:
    return read_summary(run, PretrainSummary) if (run / SUMMARY_FILE).is_file() else None


def pretrain_phases(
    recipe: PretrainRecipe,
    output: Path,
    corpora: dict[str, str],
    init_from: str | Path | None = None,
    overwrite: bool = False,
    resume: bool | str | None = False,
    quiet: bool = False,
    model_keys: set[str] | frozenset[str] = frozenset(),
) -> PhasedPretrainSummary:
    """Run the recipe's phases in order in `output` (see the module's docstring)."""
    from bertkit.pipelines.pretrain import pretrain

    plans = phase_recipes(recipe, corpora)
    mode = resume_mode(resume, overwrite)
    if mode == "last" and not (output / PHASES).is_dir():
        raise BertkitError(f"--resume: {output} holds no phased run to resume (use --resume auto to start one)")
    if mode is None:
        check_output_dir(output, overwrite)
        if output.exists() and overwrite:
            shutil.rmtree(output)
    summaries: list[PretrainPhase] = []
    previous: tuple[Path, PretrainRecipe] | None = None
    for index, (phase, phase_recipe) in enumerate(plans):
        run = output / PHASES / f"{index:02d}-{phase.name}"
        done = _finished(run)
        if done is None:
            kwargs: dict[str, Any] = {"final_checkpoint": True, "quiet": quiet,
                                      "resume": "auto" if run.exists() else False}  # fmt: skip
            if previous is None:
                kwargs.update(init_from=init_from, model_keys=model_keys)
            elif _model_changes(previous[1], phase_recipe):
                # other positions or rotary bases: its weights, the tables grown, a fresh optimizer state
                kwargs.update(init_from=previous[0] / "model", model_keys=override_keys(phase.set, "model"))
            else:
                last = list_checkpoints(previous[0] / "checkpoints")
                if not last:
                    raise BertkitError(f"phase {previous[0].name} kept no checkpoint to continue from; run it again "
                                       "with --overwrite")  # fmt: skip
                key = "decay_from" if phase.decay else "continue_from"
                kwargs[key] = last[-1][1]
            if not quiet:
                from bertkit.engine.state import warn

                warn(f"phase {index + 1}/{len(plans)}: {phase.name}")
            done = pretrain(phase_recipe, run, **kwargs)
        summaries.append(PretrainPhase(phase=phase.name, **done.model_dump()))
        previous = (run, phase_recipe)
    assert previous is not None
    model_dir = output / "model"
    tmp = output / ".model.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(previous[0] / "model", tmp)
    shutil.rmtree(model_dir, ignore_errors=True)
    tmp.rename(model_dir)
    first, last = summaries[0], summaries[-1]
    summary = PhasedPretrainSummary(
        run_dir=str(output), model_dir=str(model_dir), recipe=recipe.name, phases=summaries,
        steps=sum(s.steps for s in summaries), seconds=round(sum(s.seconds for s in summaries), 1),
        tokens=sum(s.tokens or 0 for s in summaries), flops=float(f"{sum(s.flops or 0.0 for s in summaries):.4g}"),
        precision=last.precision, loss_first=first.loss_first, loss_last=last.loss_last, eval=last.eval,
        skipped_steps=sum(s.skipped_steps for s in summaries), stopped=last.stopped,
    )  # fmt: skip
    write_summary(output, summary)
    return summary

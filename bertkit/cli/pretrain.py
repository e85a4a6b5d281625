"""`bertkit pretrain`."""

from __future__ import annotations

import re
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
from bertkit.errors import BertkitError

SET_HELP = "Override a recipe field with a dotted key, e.g. --set optim.lr=3e-4 (repeatable)."


def split_corpora(given: list[str]) -> tuple[str | None, dict[str, str]]:
    """--corpus values: the one without a name (the recipe's data.train) and those given as NAME=DIR."""
    named, plain = {}, []
    for value in given:
        match = re.match(r"^([A-Za-z0-9_-]+)=(.+)$", value)
        if match and "://" not in match.group(1):
            named[match.group(1)] = match.group(2)
        else:
            plain.append(value)
    if len(plain) > 1:
        raise BertkitError(f"--corpus is given {len(plain)} times without a name; give one, or name each NAME=DIR")
    return (plain[0] if plain else None), named


@guarded
def pretrain_command(
    recipe: str = typer.Option(..., "--recipe", "-r", help="Recipe name (see `bertkit recipes list`) or a .yaml path."),
    output: Path = typer.Option(..., "--output", "-o", help="Run directory to write."),
    corpus: list[str] = typer.Option(
        [],
        "--corpus",
        "-c",
        metavar="DIR|NAME=DIR",
        help="Corpus directory from build-corpus, or its s3:// (fsspec) URL; NAME=DIR names a corpus a phase of a "
        "phased recipe trains on (repeatable).",
    ),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    init_from: str | None = typer.Option(
        None,
        "--init-from",
        help="Continue from a checkpoint: a bertkit run or model dir, a Hugging Face checkpoint dir or a hub name "
        "(e.g. sentence-transformers/all-MiniLM-L6-v2, through the hub cache); it gives the model's family, shapes "
        "and tokenizer (see the continue-mlm recipe).",
    ),
    decay_from: Path | None = typer.Option(
        None,
        "--decay-from",
        metavar="RUN/checkpoints/step-N",
        help="Decay a warmup-stable-decay run from one of its checkpoints (RUN/checkpoints/step-N): its weights and "
        "optimizer state, the recipe's decay alone over this run's steps or budget, its data order continued on "
        "its own corpus.",
    ),
    report_to: list[str] = typer.Option([], "--report-to", metavar=TRACKERS, help=REPORT_TO_HELP),
    engine: str | None = typer.Option(None, "--engine", metavar=ENGINES, help=ENGINE_HELP),
    budget: str | None = typer.Option(None, "--budget", help=BUDGET_HELP),
    target_acc: float | None = typer.Option(
        None,
        "--target-acc",
        help="Stop at the first evaluation whose held-out masked-token accuracy (XLNet: predicted-token) reaches this, "
        "in (0, 1); the summary says when (train.target_acc).",
    ),
    resume: str | None = typer.Option(None, "--resume", metavar="last|auto", help=RESUME_HELP),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Pretrain an encoder on a built corpus with the recipe's objectives (MLM, NSP, SOP, RTD, SBO, PLM)."""
    from bertkit.config.recipe import load_recipe, override_keys
    from bertkit.pipelines.pretrain import pretrain
    from bertkit.pipelines.rundir import resume_mode

    resume_mode(resume, overwrite)  # a bad --resume fails before the corpus is read
    plain, named = split_corpora(corpus)
    set_ = [*set_, *report_overrides(report_to)]
    overrides = list(set_) + ([f"data.train={plain}"] if plain else []) + engine_overrides(engine, budget)
    overrides += [f"train.target_acc={target_acc}"] if target_acc is not None else []
    loaded = load_recipe(recipe, overrides, kind="pretrain")
    if loaded.phases:
        from bertkit.pipelines.phases import pretrain_phases

        if decay_from is not None:
            raise BertkitError("--decay-from decays one run; a phased recipe decays in a phase of its own")
        summary = pretrain_phases(loaded, output, named, init_from, overwrite, resume, quiet,  # type: ignore[arg-type]
                                  model_keys=override_keys(set_, "model"))  # fmt: skip
    else:
        if named:
            raise BertkitError(f"--corpus {next(iter(named))}=DIR names a corpus for a phase, and recipe "
                               f"'{loaded.name}' has no phases; give the corpus directory alone")  # fmt: skip
        summary = pretrain(loaded, output, init_from, overwrite, resume, quiet,  # type: ignore[arg-type]
                           model_keys=override_keys(set_, "model"), decay_from=decay_from)  # fmt: skip
    emit_main(summary.as_json(), json_out, "pretraining done")

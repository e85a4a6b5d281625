"""`bertkit evaluate` and `bertkit suites list|show|prepare|sources|fetch`."""

from __future__ import annotations

from pathlib import Path

import typer

from bertkit.cli.common import JSON_HELP, OVERWRITE_HELP, QUIET_HELP, TRACKERS, guarded, tracker_names

app = typer.Typer(
    help="The downstream suites `bertkit evaluate` runs (list, show, prepare) and the data archives behind them "
    "(sources, fetch).",
    no_args_is_help=True,
)
ARCHIVES_HELP = (
    "Where the downloaded data archives are (default: $BERTKIT_DATA_DIR, else the Python environment's data/ folder, "
    ".venv/data after `make install-test`)."
)


@guarded
def evaluate_command(
    model: list[str] = typer.Option(
        [],
        "--model",
        "-m",
        help="A model to evaluate (repeatable): a bertkit run or model directory (a pretraining run's "
        "snapshots/step-N too), an exported or local Hugging Face checkpoint, or a hub name read through the HF "
        "cache. More paths after the options are models too, so a shell glob works: --model RUN/snapshots/*.",
    ),
    models: list[str] = typer.Argument(None, help="More models, as --model takes them (what a shell glob expands to)."),
    suite: str = typer.Option(
        ..., "--suite", "-s", help="A shipped suite (glue, local; see `bertkit suites list`) or a suite .yaml file."
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Directory for the cells, report.md, report.json, plots/."),
    data: Path | None = typer.Option(
        None,
        "--data",
        help="Where the suite's task files are (required for shipped suites; default: the suite file's folder).",
    ),
    probe: bool = typer.Option(
        False,
        "--probe",
        help="Freeze the encoder and train a linear head (the suite's probe: rates and epochs): fast, low-variance, "
        "for comparing checkpoints along a pretraining run. Question answering is skipped.",
    ),
    lrs: str | None = typer.Option(
        None,
        "--lrs",
        metavar="5e-5,1e-4,...",
        help="Every task's learning-rate grid in this mode (the probe's with --probe), in place of the suite's: the "
        "rate with the best mean over seeds on dev is still reported per task. For small encoders, say, whose best "
        "rate a grid tuned for BERT-base may miss.",
    ),
    seeds: str | None = typer.Option(
        None,
        "--seeds",
        metavar="0,1,2,...",
        help="Every task's fine-tuning seeds, in place of the suite's: five seeds, say, where three leave two models "
        "within each other's spread, or one seed for a quick look.",
    ),
    tasks: str | None = typer.Option(
        None,
        "--tasks",
        metavar="NAME,...",
        help="Run only these tasks of the suite (in the suite's order); the average is then over them. A task that "
        "warm-starts from another needs that one too.",
    ),
    jobs: int = typer.Option(
        1, "--jobs", "-j", help="Cells run at once, each in its own process (CPU threads shared)."
    ),
    devices: str | None = typer.Option(
        None,
        "--devices",
        metavar="0,1,...",
        help="GPUs to spread cells over, one cell per GPU at a time (sets --jobs).",
    ),
    resume: str | None = typer.Option(
        None,
        "--resume",
        metavar="last|auto",
        help="Continue the evaluation in --output, running only the cells without a result: 'last' (the default of a "
        "bare --resume) needs one there; 'auto' resumes one if there is one, else starts (for job scripts).",
    ),
    report_to: list[str] = typer.Option(
        [],
        "--report-to",
        metavar=TRACKERS,
        help="Log the evaluation to experiment trackers (repeatable or comma-separated): with mlflow or wandb one run "
        "with the table (each model's task scores and average) and report.json, under which cells run in this process "
        "(without --jobs) are nested; every tracker, tensorboard included, logs each cell's curves.",
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """What checkpoints are worth downstream: fine-tune each model on every task of a suite, for every learning
    rate and seed of its grid, pick the rate on dev by the mean over seeds, and report mean, standard deviation and
    median per task and for the suite's average, as GLUE is reported."""
    import json
    import sys

    from bertkit.config.suite import parse_names, parse_rates, parse_seeds
    from bertkit.errors import BertkitError
    from bertkit.pipelines.evaluate.run import EvaluateOptions, evaluate

    if resume not in (None, "last", "auto"):
        raise BertkitError(f"--resume takes last or auto, not '{resume}'")
    gpus = tuple(d.strip() for d in devices.split(",") if d.strip()) if devices else ()
    if devices is not None and not gpus:
        raise BertkitError("--devices takes GPU numbers separated by commas, e.g. 0,1")
    trackers = tuple(tracker_names(report_to))
    options = EvaluateOptions(
        probe, len(gpus) or jobs, gpus, resume, overwrite, quiet, trackers,
        lrs=tuple(parse_rates(lrs)) if lrs is not None else (),
        seeds=tuple(parse_seeds(seeds)) if seeds is not None else (),
        tasks=tuple(parse_names(tasks)) if tasks is not None else (),
    )  # fmt: skip
    report = evaluate([*model, *(models or [])], suite, output, data, options)
    if json_out:
        slim = {key: report[key] for key in ("models", "protocol", "cells", "suite", "mode", "seconds", "files")}
        sys.stdout.write(json.dumps(slim, default=str) + "\n")
        return
    if not quiet:
        from bertkit.pipelines.evaluate.report import print_table

        print_table(report, list(report["protocol"]["tasks"]))


@app.command("list")
@guarded
def list_command(
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """The suites shipped with bertkit."""
    import json

    from bertkit.config.suite import load_suite, suite_names

    rows = []
    for name in suite_names():
        suite, _ = load_suite(name)
        rows.append({"name": name, "tasks": [t.name for t in suite.tasks], "description": suite.description})
    if json_out:
        print(json.dumps({"suites": rows}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("suite", "tasks", "description")
    for row in rows:
        table.add_row(row["name"], ", ".join(row["tasks"]), row["description"])
    Console().print(table)


@app.command("show")
@guarded
def show_command(
    name: str = typer.Argument(..., help="Suite name or .yaml path."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """A suite validated, with every default filled in (YAML, or JSON with --json)."""
    import json

    import yaml

    from bertkit.config.suite import load_suite

    suite, _ = load_suite(name)
    body = suite.model_dump(mode="json")
    print(json.dumps(body) if json_out else yaml.safe_dump(body, sort_keys=False).rstrip())


@app.command("prepare")
@guarded
def prepare_command(
    name: str = typer.Argument(..., help="The suite whose files to write: local."),
    output: Path = typer.Option(..., "--output", "-o", help="Directory to write the task files into (--data DIR)."),
    archives: Path | None = typer.Option(None, "--archives", help=ARCHIVES_HELP),
    offline: bool = typer.Option(
        False, "--offline", help="Use only the archives already in the folder: a missing one is an error."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Write the task files of the `local` suite (reviews, STS-B, QNLI, WNUT-16 NER, SQuAD) from the real data
    sets of the data manifest, downloading any archive that is missing (`bertkit suites sources` lists them)."""
    from bertkit.cli.common import emit
    from bertkit.errors import BertkitError

    if name != "local":
        raise BertkitError(
            f"only the local suite's files can be prepared here, not '{name}'; GLUE's come from its own distribution"
        )
    from bertkit.data.local_suite import write_local_suite

    result = write_local_suite(output, archives, overwrite=overwrite, download=not offline, quiet=quiet or json_out)
    if json_out:
        emit(result, True, "")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("task", "kind", "train", "dev", "source", title=f"local suite written to {output} (--data)",
                  title_justify="left")  # fmt: skip
    for name, entry in result.items():
        rows = entry["rows"]
        table.add_row(name, entry["kind"], f"{rows['train']:,} {entry['unit']}", f"{rows['dev']:,}", entry["source"])
    Console().print(table)


@app.command("sources")
@guarded
def sources_command(
    archives: Path | None = typer.Option(None, "--archives", help=ARCHIVES_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """The data manifest: each archive the sample data, the `local` suite and the tests read (package, version,
    size, licence, sha256), and whether the data folder holds it as the manifest says (ok, missing or bad)."""
    import dataclasses
    import json

    from bertkit.data.sources import check, data_dir, load_sources
    from bertkit.errors import BertkitError

    folder = data_dir(archives)
    rows = []
    for source in load_sources().values():
        try:
            check(source, folder)
            state = "ok"
        except BertkitError:
            state = "bad" if (folder / source.archive).exists() else "missing"
        rows.append({**dataclasses.asdict(source), "state": state})
    if json_out:
        print(json.dumps({"folder": str(folder), "sources": rows}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("source", "package", "MB", "used by", "state", title=f"data folder: {folder} (--json: licences, "
                  "members, sha256)", title_justify="left")  # fmt: skip
    for row in rows:
        table.add_row(row["name"], f"{row['package']}=={row['version']}", f"{row['bytes'] / 1e6:.1f}",
                      ", ".join(row["used_by"]), row["state"])  # fmt: skip
    Console().print(table)


@app.command("fetch")
@guarded
def fetch_command(
    source: list[str] = typer.Option(
        [], "--source", help="A source of the manifest to fetch (repeatable; default: those the local suite reads)."
    ),
    all_sources: bool = typer.Option(False, "--all", help="Every source of the manifest, as `make install-test` does."),
    archives: Path | None = typer.Option(None, "--archives", help=ARCHIVES_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Download the data archives of the manifest into the data folder, each checked against its size and sha256
    (one already there is checked, not downloaded again). A source the package index no longer serves, or an
    archive that does not match, is one error line naming it."""
    from bertkit.cli.common import emit
    from bertkit.data.local_suite import USES
    from bertkit.data.sources import data_dir, fetch, load_sources
    from bertkit.errors import BertkitError

    manifest = load_sources()
    if all_sources and source:
        raise BertkitError("give --source NAME or --all, not both")
    if unknown := [name for name in source if name not in manifest]:
        raise BertkitError(f"unknown data source '{unknown[0]}'; the manifest has {', '.join(manifest)}")
    names = list(manifest) if all_sources else source or sorted(set(USES.values()))
    folder = data_dir(archives)
    paths = {name: str(fetch(manifest[name], folder, quiet=quiet or json_out)) for name in names}
    if json_out:
        emit({"folder": str(folder), "archives": paths}, True, "")
    elif not quiet:
        emit(paths, False, f"archives checked in {folder}")

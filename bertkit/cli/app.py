"""The `bertkit` command. Subcommands import their heavy dependencies (torch...) only when they run,
so `bertkit --help` answers instantly."""

from __future__ import annotations

import io
import sys

import typer

from bertkit import __version__
from bertkit.cli import (
    augment,
    compress,
    corpus,
    distill,
    embed,
    evaluate,
    export,
    finetune,
    mine,
    plot,
    predict,
    pretrain,
    quickstart,
    recipes,
    tokenize,
)

app = typer.Typer(
    name="bertkit",
    help="Raw text to a pretrained, distilled and fine-tuned BERT-family encoder.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.add_typer(tokenize.app, name="tokenize")
app.command("build-corpus")(corpus.build_corpus_command)
app.add_typer(corpus.app, name="corpus")
app.command("pretrain")(pretrain.pretrain_command)
app.command("distill")(distill.distill_command)
app.command("finetune")(finetune.finetune_command)
app.command("augment")(augment.augment_command)
app.command("compress")(compress.compress_command)
app.command("embed")(embed.embed_command)
app.command("mine-negatives")(mine.mine_negatives_command)
app.command("predict")(predict.predict_command)
app.command("evaluate")(evaluate.evaluate_command)
app.add_typer(evaluate.app, name="suites")
app.add_typer(recipes.app, name="recipes")
app.command("quickstart")(quickstart.quickstart_command)
app.command("export")(export.export_command)
app.command("plot")(plot.plot_command)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"bertkit {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """Raw text to a pretrained, distilled and fine-tuned BERT-family encoder."""


def default_resume_value(argv: list[str]) -> list[str]:
    """`--resume` takes a mode (last|auto), but a bare `--resume` (last on the line, or followed by another
    option) must keep meaning `last`. Click cannot give an option an optional value, so the argument list is
    completed here, before Typer parses it."""
    args = list(argv)
    for i in reversed(range(len(args))):  # backwards, so an insertion never shifts what is still to visit
        if args[i] == "--resume" and (i + 1 == len(args) or args[i + 1].startswith("-")):
            args.insert(i + 1, "last")
    return args


def stdout_that_reports_short_writes() -> None:
    """Under PYTHONUNBUFFERED (or `python -u`) stdout's text layer writes straight to the file and ignores a short
    write, so output cut off by a filling disk would end with exit 0. A buffered stdout that flushes each line
    writes the rest again, and so meets the disk's error."""
    if isinstance(getattr(sys.stdout, "buffer", None), io.FileIO):
        stdout = sys.stdout
        sys.stdout = open(  # noqa: SIM115 (the process's stdout: closed at exit)
            stdout.fileno(), "w", buffering=1, encoding=stdout.encoding, errors=stdout.errors, closefd=False
        )


def main() -> None:
    stdout_that_reports_short_writes()
    app(args=default_resume_value(sys.argv[1:]))

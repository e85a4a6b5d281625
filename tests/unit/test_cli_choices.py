"""Every fixed-choice option lists its values in --help, and those are exactly the values the code takes: the
metavar of each is compared with the constant or schema Literal that the command checks its value against."""

from __future__ import annotations

from typing import Any, get_args

import pytest
import typer

from bertkit.cli.app import app


def _choices() -> dict[tuple[str, str], tuple[str, ...]]:
    from bertkit.cli.distill import STAGES
    from bertkit.cli.export import TARGETS
    from bertkit.config.recipe import DEFAULT_FOR, TASK_KINDS
    from bertkit.config.schema import DistillConfig, DistillMethod, EngineConfig
    from bertkit.config.task_config import SequenceTask
    from bertkit.config.track import TRACKERS
    from bertkit.corpus.build import LONG_SENTENCES, MASKINGS
    from bertkit.corpus.masking import STRATEGIES
    from bertkit.corpus.pack import FORMATS, LAYOUTS
    from bertkit.corpus.sentences import SPLITTERS
    from bertkit.export.hf import HEADS
    from bertkit.export.onnx import QUANTIZE
    from bertkit.inputs.delimited import QUOTINGS
    from bertkit.inputs.sources import INVALID_UTF8
    from bertkit.pipelines.augment import CANDIDATE_SOURCES
    from bertkit.pipelines.rundir import RESUME_MODES
    from bertkit.tokenizers.specials import KINDS

    engines = get_args(EngineConfig.model_fields["backend"].annotation)
    devices = get_args(EngineConfig.model_fields["device"].annotation)
    choices: dict[tuple[str, str], tuple[str, ...]] = {
        ("build-corpus", "--format"): FORMATS,
        ("build-corpus", "--layout"): LAYOUTS,
        ("build-corpus", "--splitter"): tuple(SPLITTERS),
        ("build-corpus", "--masking"): MASKINGS,
        ("build-corpus", "--mask-strategy"): STRATEGIES,
        ("build-corpus", "--invalid-utf8"): INVALID_UTF8,
        ("tokenize extend", "--invalid-utf8"): INVALID_UTF8,
        ("build-corpus", "--long-sentences"): LONG_SENTENCES,
        ("distill", "--method"): get_args(DistillMethod),
        ("distill", "--init"): _literal(DistillConfig.model_fields["init"].annotation),
        ("distill", "--stage"): STAGES,
        ("finetune", "--task"): TASK_KINDS,
        ("finetune", "--pool"): get_args(SequenceTask.model_fields["pool"].annotation),
        ("export", "--to"): TARGETS,
        ("export", "--head"): HEADS,
        ("export", "--quantize"): QUANTIZE,
        ("tokenize train", "--kind"): KINDS,
        ("recipes show", "--for"): DEFAULT_FOR,
        ("recipes show", "--task"): TASK_KINDS,
        ("augment", "--candidates-from"): CANDIDATE_SOURCES,
        ("compress", "--candidates-from"): CANDIDATE_SOURCES,
        ("predict", "--quoting"): QUOTINGS,
        ("embed", "--quoting"): QUOTINGS,
    }
    for command in ("pretrain", "distill", "finetune"):
        choices[(command, "--engine")] = engines
    for command in ("pretrain", "distill", "finetune", "compress", "evaluate"):
        choices[(command, "--report-to")] = TRACKERS
    for command in ("pretrain", "distill", "finetune", "evaluate"):
        choices[(command, "--resume")] = RESUME_MODES
    for command in ("augment", "embed", "predict"):
        choices[(command, "--device")] = devices
    return choices


def _literal(annotation: Any) -> tuple[str, ...]:
    """The values of a Literal, also inside `Literal[...] | None`."""
    values = get_args(annotation)
    return tuple(v for arg in values for v in (_literal(arg) if get_args(arg) else (arg,)) if v is not type(None))


def _option(path: str, name: str) -> Any:
    command: Any = typer.main.get_command(app)
    for part in path.split():
        command = command.commands[part]
    return next(param for param in command.params if name in param.opts)


CHOICES = _choices()


@pytest.mark.parametrize(("path", "name"), list(CHOICES), ids=[f"{p} {n}" for p, n in CHOICES])
def test_a_fixed_choice_option_lists_exactly_its_values(path: str, name: str) -> None:
    shown = _option(path, name).metavar
    assert shown is not None and set(shown.split("|")) == set(CHOICES[(path, name)]), (shown, CHOICES[(path, name)])


def test_no_option_hides_its_values_behind_a_type_name() -> None:
    """An option whose help names values (`a, b or c`) but whose metavar is a bare type is what this guards
    against: every str option with a fixed set above is covered, and none of them shows <str>."""
    for path, name in CHOICES:
        assert "str" not in (_option(path, name).metavar or "str")


def test_help_lines_say_what_the_commands_accept() -> None:
    """finetune and export take a Hugging Face checkpoint directory too; pretrain's objectives include XLNet's PLM;
    build-corpus reads Parquet and datasets directories; plot writes a PNG."""
    assert "Hugging Face checkpoint" in _option("finetune", "--model").help
    assert "PLM" in (typer.main.get_command(app).commands["pretrain"].help or "")
    corpus_input = _option("build-corpus", "--input").help
    assert "Parquet" in corpus_input and "datasets" in corpus_input
    assert "PNG" in _option("plot", "--overwrite").help

"""One description per task kind (bertkit/config/task_kinds.py) and one runtime object per kind (bertkit/tasks/kinds):
they name the same kinds and architectures, and the commands ask them instead of comparing kind names.

The source scan counts the places that compare a kind's or an architecture's name as a string outside the two
registries. Configuration, `evaluate` and `finetune` have none; the model-building layers (the distillation teacher,
the ONNX export, transformers interop, the task architectures) still dispatch on architecture names, and their
counts may only fall."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bertkit.config.schema import TASK_FIELDS, TASK_METRICS
from bertkit.config.task_config import TASK_CONFIG_CLASSES
from bertkit.config.task_kinds import HEADED_ARCHITECTURES, SPECS, kind_spec, kinds_that
from bertkit.errors import BertkitError

PACKAGE = Path(__file__).resolve().parents[2] / "bertkit"
REGISTRIES = ("config/task_kinds.py", "config/task_config.py", "tasks/kinds/")
# Where a kind's name still appears beside a comparison outside the registries: the local suite's own task names
# (its task called "retrieval" and the random stream of that name), which are names of tasks, not of kinds.
STILL_COMPARED = {"data/local_suite.py": 2}


def _comparisons() -> dict[str, int]:
    names = set(SPECS) | {spec.architecture for spec in SPECS.values()}
    alternatives = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
    quoted = re.compile(rf"""["']({alternatives})["']""")
    compared = re.compile(r"==|!=|\bin\b|\.get\(")
    counts: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(REGISTRIES):
            continue
        for line in path.read_text("utf-8").splitlines():
            code = line.split("#")[0]
            found = quoted.findall(code)
            if found and (compared.search(code) or len(found) > 1):  # a comparison, or a list of kinds
                counts[rel] = counts.get(rel, 0) + 1
    return counts


def test_the_description_and_the_runtime_kind_agree() -> None:
    from bertkit.tasks.kinds import BY_ARCHITECTURE, KINDS

    assert list(SPECS) == list(KINDS) == list(TASK_CONFIG_CLASSES)
    for name, spec in SPECS.items():
        assert KINDS[name].architecture == spec.architecture and BY_ARCHITECTURE[spec.architecture] is KINDS[name]
        assert TASK_METRICS[name] == spec.metrics and TASK_FIELDS[name] == spec.fields
        assert callable(KINDS[name].check_data) and callable(KINDS[name].prepare)
    assert kinds_that("probe") == ["classification", "multi-label", "regression", "token-classification"]
    assert kinds_that("scores_as_is") == ["retrieval", "similarity"]
    # The kinds with a task head are what predict, the ONNX export and `--head classifier` serve as task models.
    assert HEADED_ARCHITECTURES == ("sequence-classification", "sequence-multi-label", "sequence-regression",
                                    "token-classification", "question-answering")  # fmt: skip
    with pytest.raises(BertkitError, match="'ner' is not a task kind; use one of classification"):
        kind_spec("ner")


def test_no_kind_name_is_compared_outside_the_registries_but_where_listed() -> None:
    counts = _comparisons()
    unlisted = {rel: n for rel, n in counts.items() if rel not in STILL_COMPARED}
    assert not unlisted, f"compare kinds through config/task_kinds.py or the kind object, not by name: {unlisted}"
    grown = {rel: (counts.get(rel, 0), n) for rel, n in STILL_COMPARED.items() if counts.get(rel, 0) > n}
    assert not grown, f"(found, allowed): {grown}"
    assert not {rel for rel in counts if rel.startswith(("config/", "pipelines/evaluate/", "pipelines/finetune/"))}


def test_the_capabilities_drive_the_commands() -> None:
    from bertkit.config.recipe import default_recipe
    from bertkit.config.suite import validate_suite

    assert default_recipe("distill", "question-answering") == "distill-task-question-answering"
    assert default_recipe("distill", None) == default_recipe("distill", "classification") == "distill-task"
    with pytest.raises(BertkitError, match="distils classification, token-classification, question-answering, not"):
        default_recipe("distill", "retrieval")
    raw = {"name": "s", "tasks": [{"name": "t", "kind": "token-classification", "train": "a", "eval": "b",
                                   "extra_eval": {"x": "c"}}]}  # fmt: skip
    with pytest.raises(BertkitError, match="extra_eval applies to classification, multi-label, regression tasks"):
        validate_suite(raw, "s")


def test_each_headed_kind_builds_the_model_its_transformers_class_reads() -> None:
    """A kind's task model has the outputs its description names, and its head's shape: one row per input (sequence),
    per token (token), or a start and an end logit per token (span)."""
    import torch

    from bertkit.config.schema import ModelConfig
    from bertkit.interop.hf import TASK_CLASSES
    from bertkit.models.pretraining import build_encoder
    from bertkit.tasks.kinds import BY_ARCHITECTURE

    cfg = ModelConfig(vocab_size=50, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                      max_position_embeddings=16)  # fmt: skip
    ids = torch.randint(5, 50, (2, 7))
    widths = {"sequence-classification": 3, "sequence-multi-label": 3, "sequence-regression": 1}
    for architecture in HEADED_ARCHITECTURES:
        spec = SPECS[BY_ARCHITECTURE[architecture].name]
        model = BY_ARCHITECTURE[architecture].task_model(build_encoder(cfg), ["a", "b", "c"], {}).eval()
        out = model(ids, torch.ones_like(ids))
        assert tuple(out) == spec.outputs and TASK_CLASSES[architecture] == spec.hf_class
        shapes = {name: tuple(out[name].shape) for name in spec.outputs}
        if spec.head == "sequence":
            assert shapes == {"logits": (2, widths[architecture])}
        elif spec.head == "token":
            assert shapes == {"logits": (2, 7, 3)}
        else:
            assert spec.head == "span" and shapes == {"start_logits": (2, 7), "end_logits": (2, 7)}

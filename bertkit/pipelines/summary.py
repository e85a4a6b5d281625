"""One training run's results, typed: what `pretrain`, `finetune` and `distill` write to RUN/summary.json, print as
their `--json` line and hand to experiment trackers, and what the pipelines that run them (`compress`, `evaluate`,
`quickstart`, a pretraining in phases, the distillation of a bi-encoder) read back.

- `RunSummary`: the fields every training run has, what the loop did. `loop_figures` fills them from the loop's
  `TrainResult`, the one place they are computed, with one rounding.
- A subclass per command adds its own fields: `PretrainSummary`, `PhasedPretrainSummary`, `FinetuneSummary`,
  `GeneralDistillSummary`, `TaskDistillSummary`. The last three also carry entries that vary with the run: a task
  kind's own counts (`rows_read`, `train_pairs`, `teacher_projection`...), each distillation term's first and last
  loss. Those follow the typed fields.
- `write_summary` is the one writer: rank 0 only, atomic, then the trackers. `read_summary` reads a run's summary
  back as its class, and a file that is not one is one error line.
- `compress` runs a distillation and a baseline, then writes a table of its own: `CompressSummary`
  (`ClassifierCompressSummary`, `BiEncoderCompressSummary`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from bertkit.errors import BertkitError
from bertkit.fsutil import read_json, write_json_atomic

if TYPE_CHECKING:
    from bertkit.engine.trainer import TrainResult

SUMMARY_FILE = "summary.json"


class RunSummary(BaseModel):
    """What every training run reports."""

    model_config = ConfigDict(extra="forbid")

    run_dir: str
    # The trained model's directory; None when a distillation's budget ended before its last phase.
    model_dir: str | None
    recipe: str | None = None
    steps: int
    seconds: float  # this call's wall clock
    tokens: int | None = None
    flops: float | None = None  # training FLOPs, as bertkit counts them (what --budget NNflop spends)
    precision: str | None = None  # engine.precision=auto resolved on this device
    loss_first: float | None = None
    loss_last: float | None = None
    # The held-out metrics of the model in model_dir.
    eval: dict[str, Any] | None = None
    skipped_steps: int = 0  # steps skipped for a non-finite loss
    resumed_from: int | None = None  # the checkpoint's step the run continued from
    # What ended the run before its steps: budget, early_stopping, target, fitted (a probe's closed form).
    stopped: str | None = None

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def loop_figures(result: TrainResult) -> dict[str, Any]:
    """The fields of `RunSummary` that the training loop's result gives."""
    first, last = result.first_last("loss")
    return {"steps": result.steps, "seconds": round(result.seconds, 1), "tokens": result.tokens,
            "flops": float(f"{result.flops:.4g}"), "precision": result.precision, "loss_first": first,
            "loss_last": last, "eval": result.eval, "skipped_steps": result.skipped_steps,
            "resumed_from": result.resumed_from, "stopped": result.stopped}  # fmt: skip


class PretrainSummary(RunSummary):
    """`bertkit pretrain`: what was trained, on what, for how long, and how it ended."""

    family: str
    objectives: list[str]
    parameters: int
    init_from: str | None = None  # --init-from
    init: dict[str, Any] | None = None  # what --init-from loaded, grew and left fresh
    target: dict[str, Any] | None = None  # train.target_acc: the target, whether and when it was reached
    train_sequences: int
    eval_sequences: int
    eval_set: str  # a corpus of its own, or "held out: FRACTION"
    decay: dict[str, Any] | None = None  # --decay-from: the checkpoint the decay started from
    continued: dict[str, Any] | None = None  # a phase continued from the previous phase's checkpoint


class PretrainPhase(PretrainSummary):
    phase: str  # the phase's name in the recipe's `phases:`


class PhasedPretrainSummary(RunSummary):
    """A recipe's `phases:` run in one directory: the loop's figures over every phase, and each phase's summary."""

    phases: list[PretrainPhase]


class FinetuneSummary(RunSummary):
    """`bertkit finetune` (and the task stage of a bi-encoder's distillation, which is one): the task kind, the
    schedule, the best evaluation; then the kind's own entries (its counts, its teacher...)."""

    model_config = ConfigDict(extra="allow")

    task: str
    epochs: int | None  # None: a probe fitted in closed form
    steps_per_epoch: int | None = None
    eval_last: dict[str, Any] | None = None  # the last evaluation, when model_dir holds an earlier, better one
    best: dict[str, Any] | None = None  # the evaluation model_dir holds: its step and metric
    # A probe fitted in closed form: its L2, how it was chosen, the seconds computing the frozen features.
    probe: dict[str, Any] | None = None

    def kind_entry(self, name: str) -> Any:
        """One of the task kind's own entries (`train_pairs`, `label_counts`...); a KeyError if the kind has none."""
        return (self.model_extra or {})[name]


class GeneralDistillSummary(RunSummary):
    """`bertkit distill` (general stage): who taught whom, how, on how many sequences; then each distillation
    term's first and last loss (`TERM_loss_first`, `TERM_loss_last`)."""

    model_config = ConfigDict(extra="allow")

    stage: str
    method: str
    init: str
    teacher: str
    teacher_parameters: int
    student_parameters: int
    layer_map: list[int] | None = None
    copied_layers: list[int] | None = None
    terms: list[str]
    train_sequences: int
    eval_sequences: int


class TaskDistillSummary(RunSummary):
    """`bertkit distill --stage task` of a classifier, tagger or reader: the plan, each phase's figures, the
    data's counts; then each term's first and last loss over the phases, and the task data's own entries."""

    model_config = ConfigDict(extra="allow")

    stage: str
    method: str
    teacher: str
    student: str
    task: str
    labels: list[Any] | None = None
    layer_map: list[int] | None = None
    phases: list[dict[str, Any]]
    intermediate_skipped: str | None = None  # why the intermediate phase did not run, when a rule skipped it
    teacher_cache: dict[str, Any]
    train_examples: int
    eval_examples: int


class CompressSummary(BaseModel):
    """`bertkit compress`: the teacher, the student trained on the labels alone and the distilled student, side by
    side (`rows`); the distilled student's model. Its distillation and its baseline are runs of their own, under
    OUT/distill and OUT/baseline, each with its summary."""

    model_config = ConfigDict(extra="forbid")

    run_dir: str
    model_dir: str
    teacher: str
    student: str
    layers: int | None  # the teacher's layers copied into the student; None: a student of the user's
    inference: dict[str, Any]  # how the table timed each model: batch size, maximum length, threads, device
    rows: list[dict[str, Any]]  # teacher, baseline (unless --no-baseline), distilled student
    stage_seconds: dict[str, float]
    seconds: float
    beats_baseline: bool | None  # None: no baseline

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class ClassifierCompressSummary(CompressSummary):
    """`compress` of a classifier: augmentation and the distillation's phases."""

    train_examples: int
    eval_examples: int
    copies: int  # augmented copies of each training example; 0: none
    augmented_examples: int
    phases: list[str]
    distill_stopped: str | None  # "budget" when --budget ended the distillation early
    candidate_source: str | None


class BiEncoderCompressSummary(CompressSummary):
    """`compress` of a bi-encoder: the training pairs and the evaluation set."""

    kind: str = "bi-encoder"
    train_pairs: int
    eval_set: dict[str, Any] | None


Summary = TypeVar("Summary", bound=RunSummary | CompressSummary)


def write_summary(output: Path, summary: RunSummary) -> None:
    """RUN/summary.json (atomically, rank 0 only), then the trackers' end of the run."""
    from bertkit.engine.dist import is_main

    if not is_main():  # only rank 0 writes run files
        return
    figures = summary.as_json()
    write_json_atomic(output / SUMMARY_FILE, figures)
    from bertkit.engine import tracking

    tracking.finish(output, figures)


def write_compress_summary(output: Path, summary: CompressSummary) -> None:
    """OUT/summary.json of `compress`, written last: a directory with one holds a finished job (its parent tracker
    run is finished by `compress` itself)."""
    write_json_atomic(output / SUMMARY_FILE, summary.as_json())


def read_summary(run_dir: Path, kind: type[Summary]) -> Summary:
    """A run's summary.json as `kind`; a missing, corrupt or foreign file is one error line."""
    path = Path(run_dir) / SUMMARY_FILE
    try:
        return kind.model_validate(read_json(path, f"{kind.__name__} file"))
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        raise BertkitError(f"{path} is not a {kind.__name__} ({where}: {first['msg']}); was it written by another "
                           "command or another bertkit?") from None  # fmt: skip

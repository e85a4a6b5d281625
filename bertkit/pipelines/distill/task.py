"""`bertkit distill --stage task`: TinyBERT's second stage, as the paper runs it: two jobs.

A fine-tuned teacher (a run of `bertkit finetune`: a classifier, a tagger or an extractive QA model; or a
Hugging Face BERT/ALBERT/RoBERTa *ForSequenceClassification checkpoint, classes from its id2label) is
distilled into a student on the task's labelled data (for classifiers augmented first with `bertkit
augment`, as TinyBERT does). The teacher decides the kind, and its kind in bertkit/tasks/kinds reads the data
(`distill_data`) and says what a target is: a sequence, a word, a QA window:

1. intermediate (tinybert only): embeddings, hidden states and attention scores through W_e / W_h along
   the layer map, at a constant rate (`distill.intermediate.*`). W_e / W_h learned by the general stage
   are carried over from its run directory, and a student copied from teacher layers learns from the
   layers it was copied from (the default map follows the copy). The classifier recipe skips this phase
   for such a copy (`distill.intermediate_for_copies`): it already computes the teacher's hidden states.
2. prediction: the head (classifier, tagger or span head), fresh, with a fresh optimizer, warm-up and
   decay (`distill.prediction.*`), on the teacher's soft targets (`alpha_prediction`, at
   `distill.temperature`) and optionally the gold labels (`alpha_gold`). The teacher's logits of every
   example are computed once and cached (bertkit/distill/cache.py), so this phase runs no teacher at all.

Each phase is the one training loop in a directory of its own (`intermediate/`, `prediction/`: metrics,
checkpoints), so each has its own optimizer state and schedule and resumes exactly; `metrics.jsonl` at the
top joins their rows, each tagged with its phase, on one step axis.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import torch
from torch import nn

from bertkit.config.model import ModelConfig
from bertkit.config.recipe import DistillRecipe
from bertkit.config.schema import DistillMethod, PhaseConfig, parse_budget
from bertkit.config.task_kinds import SPEC_BY_ARCHITECTURE, head_of
from bertkit.corpus.loader import SampledBatches
from bertkit.distill.cache import TeacherLogitsCache, compute_teacher_logits, teacher_fingerprint
from bertkit.distill.layer_map import check_windowed_attention, resolve_layer_map
from bertkit.distill.objective import INTERMEDIATE, DistillationObjective, term_weights
from bertkit.distill.prediction import PredictionObjective
from bertkit.distill.student import DistillStudent, check_compatible, load_projections
from bertkit.distill.teacher import Teacher
from bertkit.engine.checkpoint import list_checkpoints, load_state
from bertkit.engine.device import resolve_device
from bertkit.engine.dist import is_main
from bertkit.engine.loop import TrainResult, train
from bertkit.errors import BertkitError
from bertkit.fsutil import save_safetensors_atomic, write_json_atomic
from bertkit.modelio.modeldir import encoder_weights, load_model_dir, save_model_dir
from bertkit.pipelines.distill.task_data import TaskSetup, prepare_task
from bertkit.pipelines.rundir import join_job, prepare_run_dir
from bertkit.pipelines.summary import TaskDistillSummary, write_summary
from bertkit.progress import stderr_console

PHASES = ("intermediate", "prediction")
PHASE_DONE = "phase.json"  # a finished phase: its summary; the intermediate phase also leaves its student
INTERMEDIATE_STUDENT = "student.safetensors"


class WithTeacherLogits(SampledBatches):
    """Training batches that also carry the teacher's cached logits of their examples (`teacher_logits`)."""

    def __init__(self, batches: Any, logits: torch.Tensor) -> None:
        self.batches, self.logits = batches, logits
        self.sampler = batches.sampler  # the trainer shards and resumes the examples' order

    def batch_of(self, indices: list[int]) -> dict[str, torch.Tensor]:
        return {**self.batches.batch_of(indices), "teacher_logits": self.logits[indices]}

    def next_batch(self) -> dict[str, torch.Tensor]:
        return self.batch_of([index for _, index in self.sampler.take(self.batches.batch_size)])


def default_layer_map(meta: dict[str, Any], teacher_layers: int) -> list[int] | None:
    """A student copied from teacher layers (0-based `copied_layers`) learns from the layers it was copied
    from (1-based numbers): TinyBERT's uniform map would ask the copy of teacher layer 0 to do the work of
    several layers. None when the student was not copied from a teacher of this depth."""
    copied = meta.get("copied_layers")
    if isinstance(copied, list) and copied and all(isinstance(i, int) and 0 <= i < teacher_layers for i in copied):
        return [i + 1 for i in copied]
    return None


def _resumable(output: Path) -> bool:
    return any(
        list_checkpoints(output / phase / "checkpoints") or (output / phase / PHASE_DONE).exists() for phase in PHASES
    )


def _remaining_budget(budget: str | None, spent: dict[str, float]) -> tuple[str | None, bool]:
    """(what is left of a time or token budget after the phases before, whether it is used up)."""
    if budget is None:
        return None, False
    kind, value = parse_budget(budget)
    left = value - spent[kind]
    if left <= 0:
        return None, True
    return {"seconds": f"{left:.3f}s", "tokens": f"{int(left)}tok", "flops": f"{left:.6e}flop"}[kind], False


@dataclass
class TaskPlan:
    """What the task stage runs, decided and checked before anything is written."""

    method: DistillMethod
    temperature: float  # of the soft targets
    student_path: Path
    student_cfg: ModelConfig
    student_weights: dict[str, torch.Tensor]
    setup: TaskSetup
    steps: dict[str, int]  # each phase's optimizer steps; 0: the phase does not run
    intermediate_weights: dict[str, float]
    layer_map: list[int]
    skipped: str | None  # why the intermediate phase does not run, when a rule (not the user) skips it


def plan_task(
    recipe: DistillRecipe, teacher: Teacher, student_dir: Path, train_file: Path, eval_file: Path | None
) -> TaskPlan:
    """The teacher, the student and the phases' lengths checked against each other, one error line each."""
    # The fine-tuned models the task stage distils are the kinds with a distillation recipe (bertkit/tasks/kinds
    # gives each one's logits and targets); a sequence classifier must name its classes.
    spec = SPEC_BY_ARCHITECTURE.get(str(teacher.architecture))
    unlabelled = spec is not None and spec.head == "sequence" and not teacher.labels
    if spec is None or spec.distill_recipe is None or unlabelled:
        what = f" (a {teacher.huggingface} checkpoint)" if teacher.huggingface else ""
        raise BertkitError(
            f"--stage task distils a fine-tuned classifier, tagger or QA model, but the teacher {teacher.source}{what} "
            "is none; pass the run directory of `bertkit finetune`, or a Hugging Face BERT, ALBERT or RoBERTa "
            "*ForSequenceClassification checkpoint, as --teacher"
        )
    given = {"steps", "epochs"} & recipe.train.model_fields_set
    if given:
        raise BertkitError(
            f"the task stage runs two phases of their own length: set distill.intermediate.epochs (or .steps) and "
            f"distill.prediction.epochs (or .steps) instead of train.{sorted(given)[0]}"
        )
    student_path, meta, student_cfg, student_weights, student_tokenizer = load_model_dir(student_dir)
    if student_tokenizer.fingerprint() != teacher.tokenizer.fingerprint():
        raise BertkitError(
            f"the student {student_path} and the teacher {teacher.source} use different tokenizers; the task stage "
            "continues a student distilled from this teacher's tokenizer"
        )
    method = recipe.distill.method or meta.get("method") or "tinybert"
    if method not in get_args(DistillMethod):
        raise BertkitError(f"{student_path} names an unknown distillation method '{method}'; pass --method")
    cfg = recipe.distill
    setup = prepare_task(teacher, recipe, student_cfg, train_file, eval_file)
    batch_size = recipe.train.batch_size
    steps = {
        "intermediate": cfg.intermediate.planned_steps(setup.sequences, batch_size) if method == "tinybert" else 0,
        "prediction": cfg.prediction.planned_steps(setup.sequences, batch_size),
    }
    intermediate_weights = term_weights(cfg, INTERMEDIATE)
    if not any(w > 0 for w in intermediate_weights.values()):
        steps["intermediate"] = 0
    copied_map = default_layer_map(meta, teacher.config.num_layers)
    skipped = None
    if steps["intermediate"] and copied_map is not None and not cfg.intermediate_for_copies:
        steps["intermediate"] = 0
        skipped = "the student is a copy of the teacher's layers (distill.intermediate_for_copies=false)"
    if steps["prediction"] == 0 or cfg.alpha_prediction + cfg.alpha_gold == 0:
        raise BertkitError(
            "the prediction phase trains the student's classifier: give it steps (distill.prediction.epochs > 0) "
            "and a loss (distill.alpha_prediction or distill.alpha_gold > 0)"
        )
    if steps["intermediate"]:
        check_compatible(student_cfg, teacher.config, same_heads=cfg.alpha_attention > 0)
        if student_cfg.hidden_size > teacher.config.hidden_size:
            raise BertkitError(
                f"the student's hidden_size {student_cfg.hidden_size} is wider than the teacher's "
                f"{teacher.config.hidden_size}: W_h projects a student onto a wider teacher; distil a narrower "
                "student, or skip the intermediate phase with --set distill.intermediate.epochs=0"
            )
    layer_map = resolve_layer_map(
        cfg.layer_map if cfg.layer_map is not None else copied_map,
        student_cfg.num_layers,
        teacher.config.num_layers,
    )
    if steps["intermediate"]:
        check_windowed_attention(student_cfg, teacher.config, {"attention": cfg.alpha_attention}, layer_map)
    temperature = cfg.resolved_temperature(method)
    return TaskPlan(method, temperature, student_path, student_cfg, student_weights, setup, steps,
                    intermediate_weights, layer_map, skipped)  # fmt: skip


@dataclass
class PhaseRunner:
    """Runs the phases one after the other in output/PHASE, each the one training loop, on one shared budget."""

    recipe: DistillRecipe
    output: Path
    plan: TaskPlan
    device: torch.device
    resumed: bool
    quiet: bool
    phases: list[dict[str, Any]] = field(default_factory=list)  # each finished phase's summary
    spent: dict[str, float] = field(default_factory=lambda: {"seconds": 0.0, "tokens": 0.0, "flops": 0.0})
    stopped: str | None = None  # "budget" once a phase used up what was left of it

    def run(self, name: str, model: nn.Module, objective: Any, source: Any, phase: PhaseConfig,
            evaluate: Any) -> TrainResult | None:  # fmt: skip
        """One phase; None when the budget was used up before it."""
        budget, used_up = _remaining_budget(self.recipe.train.budget, self.spent)
        if used_up:
            self.stopped = "budget"
            return None
        n = self.plan.steps[name]
        eval_every = self.recipe.train.eval_every if evaluate else 0
        # The budget is shared by the phases, each on its own step schedule: here it only stops a phase (laid over
        # what is left of it, the first phase's schedule would stretch over the whole budget).
        train_cfg = self.recipe.train.model_copy(
            update={"steps": n, "epochs": None, "budget": budget, "eval_every": eval_every, "budget_schedule": False}
        )
        optim = self.recipe.optim.model_copy(update={"lr": phase.lr})
        result = train(
            model, objective, source, self.output / name, train_cfg, optim, phase.schedule(n), self.recipe.engine,
            evaluate, resume=self.resumed, quiet=self.quiet, description=f"distill task: {name} ({self.plan.method})",
        )  # fmt: skip
        # seconds: the loop's training clock, as its budget counts
        self.add_spent({"seconds": result.train_seconds, "tokens": result.tokens, "flops": result.flops})
        if result.stopped == "budget":
            self.stopped = "budget"
        return result

    @property
    def micro(self) -> int:
        """Sequences per micro-step."""
        return self.recipe.train.batch_size // self.recipe.train.grad_accum

    def add_spent(self, spent: dict[str, float]) -> None:
        """Add a phase's seconds, tokens and FLOPs to what the shared budget has spent."""
        for kind, value in spent.items():
            self.spent[kind] += value


def distill_task(
    recipe: DistillRecipe,
    teacher_spec: str,
    student_dir: Path,
    train_file: Path,
    eval_file: Path | None,
    output: Path,
    overwrite: bool = False,
    resume: bool | str | None = False,
    quiet: bool = False,
) -> TaskDistillSummary:
    started = time.perf_counter()
    join_job(
        recipe,
        {"output": output, "teacher": teacher_spec, "student": student_dir, "train": train_file, "eval": eval_file,
         "overwrite": overwrite, "resume": resume},
        {"teacher": Path(teacher_spec), "student": student_dir, "training file": train_file,
         "evaluation file": eval_file},
    )  # fmt: skip
    teacher = Teacher.load(teacher_spec)
    plan = plan_task(recipe, teacher, student_dir, train_file, eval_file)
    if plan.skipped and not quiet and is_main():
        stderr_console.print(f"[bold]distill task[/bold] no intermediate phase: {plan.skipped}")
    recipe = recipe.model_copy(update={"model": plan.student_cfg})  # recipe.yaml records the student's shape
    resumed = prepare_run_dir(output, recipe, overwrite, resume, resumable=_resumable)
    runner = PhaseRunner(recipe, output, plan, resolve_device(recipe.engine), resumed, quiet)
    encoder_state = encoder_weights(plan.student_weights)
    projections = load_projections(plan.student_path)
    if plan.steps["intermediate"]:
        encoder_state, projections = _intermediate_phase(runner, teacher, encoder_state, projections)
    cache_info: dict[str, Any] = {"enabled": recipe.distill.cache_teacher}  # what a run stopped before it reports
    if runner.stopped is None:
        cache_info = _prediction_phase(runner, teacher, encoder_state)
    if is_main():
        _join_metrics(output, [p["phase"] for p in runner.phases])
    summary = _summary(runner, teacher, cache_info, time.perf_counter() - started)
    write_summary(output, summary)
    return summary


def _intermediate_phase(
    runner: PhaseRunner, teacher: Teacher, encoder_state: dict[str, torch.Tensor],
    projections: dict[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:  # fmt: skip
    """Phase 1, the intermediate layers (or its saved result when a resumed run had finished it): the student's
    encoder and W_e/W_h for the prediction phase."""
    recipe, plan = runner.recipe, runner.plan
    phase_dir = runner.output / "intermediate"
    done = _read_done(phase_dir) if runner.resumed else None
    if done is not None:
        state = _load_intermediate(phase_dir)
        runner.phases.append({**done, "done_before": True})
        runner.add_spent({"seconds": done.get("train_seconds", done["seconds"]), "tokens": done["tokens"],
                          "flops": done.get("flops", 0.0)})  # fmt: skip
        encoder = {k.removeprefix("encoder."): v for k, v in state.items() if k.startswith("encoder.")}
        return encoder, {k: v for k, v in state.items() if not k.startswith("encoder.")}
    torch.manual_seed(recipe.train.seed)
    student = DistillStudent(plan.student_cfg, teacher_hidden_size=teacher.config.hidden_size)
    load_state(student.encoder, encoder_state, str(plan.student_path))
    carried = student.carry_projections(projections)
    objective = DistillationObjective("tinybert", teacher, plan.intermediate_weights, plan.temperature,
                                      plan.layer_map)  # fmt: skip
    source = plan.setup.data.batches(runner.micro, recipe.train.seed)
    result = runner.run("intermediate", student, objective, source, recipe.distill.intermediate, None)
    if result is None:
        return encoder_state, projections
    done = _phase_summary("intermediate", result, recipe.distill.intermediate, objective.terms)
    done["projections_carried"] = carried
    done["layer_map"] = plan.layer_map
    runner.phases.append(done)
    if runner.stopped is None and is_main():
        state = {f"encoder.{k}": v for k, v in student.encoder.state_dict().items()}
        state.update(student.projection_state())
        _save_intermediate(phase_dir, state, done)
    return student.encoder.state_dict(), student.projection_state()


def _prediction_phase(runner: PhaseRunner, teacher: Teacher, encoder_state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Phase 2, the prediction layer, on the teacher's soft targets (cached); saves the student. Returns what
    the teacher-logits cache did."""
    recipe, plan, setup, cfg = runner.recipe, runner.plan, runner.plan.setup, runner.recipe.distill
    micro, device = runner.micro, runner.device
    torch.manual_seed(recipe.train.seed)
    student = setup.data.student()
    load_state(student.encoder, encoder_state, str(plan.student_path))
    # The fine-tuned model whose outputs are the targets: the teacher itself for a sequence classifier,
    # its tagger's or QA head on its encoder otherwise.
    target_model = teacher if head_of(setup.architecture) == "sequence" else teacher.task_head()
    source: Any = setup.data.batches(micro, recipe.train.seed)
    prediction_teacher: nn.Module | None = target_model
    cache_info: dict[str, Any] = {"enabled": False}
    if cfg.cache_teacher:
        logits, cache_info = _teacher_logits(target_model, setup, source, cfg.cache_dir or runner.output, micro,
                                             device, runner.quiet)  # fmt: skip
        source, prediction_teacher = WithTeacherLogits(source, logits), None
    objective = PredictionObjective(prediction_teacher, cfg.alpha_prediction, cfg.alpha_gold, plan.temperature,
                                    t_squared=plan.method == "distilbert", kind=setup.kind)  # fmt: skip
    evaluate = None
    if setup.data.evaluate is not None:
        evaluate = lambda m: setup.data.evaluate(m, device)  # noqa: E731
    result = runner.run("prediction", student, objective, source, cfg.prediction, evaluate)
    if result is not None:
        runner.phases.append(_phase_summary("prediction", result, cfg.prediction, objective.terms))
        runner.phases[-1]["eval"] = result.eval
        if is_main():  # a run stopped by its budget also leaves the model it has so far, as pretrain does
            save_model_dir(runner.output / "model", student.cpu(), plan.student_cfg, setup.architecture,
                           teacher.tokenizer, {**setup.meta, "distilled_from": teacher.source,
                                               "method": plan.method})  # fmt: skip
    return cache_info


def _summary(runner: PhaseRunner, teacher: Teacher, cache_info: dict[str, Any], seconds: float) -> TaskDistillSummary:
    """summary.json: the plan, each phase's figures, what the phases spent together, the data's counts."""
    plan, phases, output = runner.plan, runner.phases, runner.output
    last = phases[-1] if phases else {}
    return TaskDistillSummary(
        run_dir=str(output),
        model_dir=str(output / "model") if (output / "model").exists() else None,
        stage="task",
        method=plan.method,
        teacher=teacher.source,
        student=str(plan.student_path),
        task=plan.setup.kind.name,
        labels=plan.setup.data.labels,
        layer_map=plan.layer_map if plan.steps["intermediate"] else None,
        phases=phases,
        intermediate_skipped=plan.skipped,
        teacher_cache=cache_info,
        train_examples=plan.setup.data.train_count,
        eval_examples=plan.setup.data.eval_count,
        steps=sum(p["steps"] for p in phases),
        flops=float(f"{runner.spent['flops']:.4g}"),
        # what a token budget (--budget 5Mtok) counts, as the general stage reports
        tokens=int(runner.spent["tokens"]),
        seconds=round(seconds, 1),
        loss_first=phases[0]["loss_first"] if phases else None,
        loss_last=last.get("loss_last"),
        eval=last.get("eval", {}),
        resumed_from=_resumed_from(phases),
        stopped=runner.stopped,
        **{f"{term}_loss_{end}": p[f"{term}_loss_{end}"] for p in phases for term in p["terms"]
           for end in ("first", "last")},  # fmt: skip
        **plan.setup.data.summary,
    )


def _teacher_logits(model: nn.Module, setup: TaskSetup, batches: Any, cache_dir: Path, batch: int,
                    device: torch.device, quiet: bool) -> tuple[torch.Tensor, dict[str, Any]]:  # fmt: skip
    """The teacher's logits of every training example, from the cache or computed once and cached."""
    started = time.perf_counter()
    cache = TeacherLogitsCache(cache_dir, teacher_fingerprint(model), setup.fingerprint)
    count = len(setup.lengths)  # one row per training sequence: an example, a sentence or a QA window
    logits = cache.load(count)
    hit = logits is not None
    if logits is None:
        model = model.to(device)
        logits = compute_teacher_logits(lambda b: setup.kind.logits(model, b), batches, setup.lengths,
                                        max(batch, 64), device, quiet)  # fmt: skip
        if is_main():
            cache.save(logits)
    return logits, {"enabled": True, "path": str(cache.path), "hit": hit, "examples": count,
                    "seconds": round(time.perf_counter() - started, 2)}  # fmt: skip


def _resumed_from(phases: list[dict[str, Any]]) -> int | None:
    """The checkpoint the run continued from, as a step of the joined metrics (phases one after the other)."""
    offset = 0
    for phase in phases:
        if phase.get("resumed_from") is not None and not phase.get("done_before"):
            return offset + int(phase["resumed_from"])
        offset += int(phase["steps"])
    return None


def _phase_summary(name: str, result: TrainResult, phase: PhaseConfig, terms: tuple[str, ...]) -> dict[str, Any]:
    first, last = result.first_last("loss")
    out: dict[str, Any] = {"phase": name, "steps": result.steps, "lr": phase.lr, "decay": phase.decay,
                           "warmup_fraction": phase.warmup_fraction, "terms": list(terms), "loss_first": first,
                           "loss_last": last, "tokens": result.tokens, "flops": result.flops,
                           "seconds": round(result.seconds, 1), "train_seconds": round(result.train_seconds, 3),
                           "resumed_from": result.resumed_from, "stopped": result.stopped}  # fmt: skip
    for term in terms:
        out[f"{term}_loss_first"], out[f"{term}_loss_last"] = result.first_last(f"{term}_loss")
    return out


def _read_done(phase_dir: Path) -> dict[str, Any] | None:
    path = phase_dir / PHASE_DONE
    if not path.exists() or not (phase_dir / INTERMEDIATE_STUDENT).exists():
        return None
    return json.loads(path.read_text("utf-8"))


def _save_intermediate(phase_dir: Path, state: dict[str, torch.Tensor], done: dict[str, Any]) -> None:
    """The finished intermediate phase: its student (encoder + W_e/W_h), then its summary, which marks it done."""
    save_safetensors_atomic(phase_dir / INTERMEDIATE_STUDENT, state)
    write_json_atomic(phase_dir / PHASE_DONE, done)


def _load_intermediate(phase_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(phase_dir / INTERMEDIATE_STUDENT))


def _join_metrics(output: Path, phases: list[str]) -> None:
    """output/metrics.jsonl: every phase's rows tagged with the phase, the steps continuing across phases."""
    rows: list[str] = []
    offset = 0
    for name in phases:
        path = output / name / "metrics.jsonl"
        last = 0
        for line in path.read_text("utf-8").splitlines() if path.exists() else []:
            if not line.strip():
                continue
            row = json.loads(line)
            last = max(last, row["step"])
            rows.append(json.dumps({"phase": name, **row, "step": row["step"] + offset}))
        offset += last
    (output / "metrics.jsonl").write_text("".join(r + "\n" for r in rows), encoding="utf-8")

"""`bertkit distill`: a teacher and a student recipe in, a smaller encoder that imitates the teacher out.

The general stage distils on a pretraining corpus built with the teacher's tokenizer; the task stage (see
task.py's `distill_task`) distils a fine-tuned teacher's classifier into a generally distilled student on labelled
data. Both are the one training loop with `DistillationObjective` (bertkit/distill/objective.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.config.recipe import DistillRecipe
from bertkit.config.schema import DistillMethod, ModelConfig
from bertkit.corpus.build import TOKENIZER_SUBDIR
from bertkit.corpus.loader import MLMBatches, check_no_copies_held_out, split_indices
from bertkit.corpus.remote import with_local_corpora
from bertkit.corpus.shards import Corpus
from bertkit.distill.layer_map import check_windowed_attention, distilbert_init_layers, resolve_layer_map
from bertkit.distill.objective import GENERAL_TERMS, DistillationObjective, term_weights
from bertkit.distill.student import DistillStudent, check_compatible, init_from_teacher, save_projections
from bertkit.distill.teacher import Teacher
from bertkit.engine.device import resolve_device
from bertkit.engine.dist import is_main
from bertkit.engine.loop import TrainResult, train
from bertkit.errors import BertkitError
from bertkit.modelio.modeldir import save_model_dir
from bertkit.pipelines.pretrain import CheckedBatches, mlm_masking_spec
from bertkit.pipelines.rundir import join_job, prepare_run_dir
from bertkit.pipelines.summary import GeneralDistillSummary, loop_figures, write_summary
from bertkit.tokenizers.base import load_tokenizer

# `--student tinybert` is TinyBERT-4, the shape the paper's headline numbers are for.
STUDENT_ALIASES = {"tinybert": "tinybert-4"}


def student_config(recipe_model: ModelConfig, teacher: ModelConfig, vocab_set: bool) -> ModelConfig:
    """The recipe's student shape with the teacher's vocabulary: the student reads the teacher's tokenizer.
    A vocabulary the user set (--set model.vocab_size) that differs is an error, never silently replaced."""
    if vocab_set and recipe_model.vocab_size != teacher.vocab_size:
        raise BertkitError(
            f"the student's vocabulary is {recipe_model.vocab_size} tokens but the teacher's {teacher.vocab_size}; "
            f"the student reads the teacher's tokenizer: drop --set model.vocab_size or set it to {teacher.vocab_size}"
        )
    update: dict[str, Any] = {"vocab_size": teacher.vocab_size, "pad_token_id": teacher.pad_token_id}
    if recipe_model.family != "modernbert":  # rotary positions have no table to offset
        update["position_offset"] = teacher.position_offset
    if teacher.family == "roberta" and recipe_model.family in ("bert", "distilbert"):
        update["family"] = "roberta"  # DistilRoBERTa: RoBERTa's positions and LM head, the student's depth
        update["type_vocab_size"] = teacher.type_vocab_size
    return ModelConfig(**{**recipe_model.model_dump(), **update})  # validated as its (possibly new) family


def check_method(method: DistillMethod, recipe: DistillRecipe, student: ModelConfig, teacher: Teacher) -> None:
    """What each method needs of the teacher and the student; one line that names the fix."""
    cfg = recipe.distill
    tcfg = teacher.config
    if student.family == "xlnet":
        raise BertkitError(
            "distillation trains BERT-family students; an XLNet student is not supported: "
            "pick a student recipe such as tinybert-4 or distilbert"
        )
    if method == "distilbert":
        if cfg.alpha_ce > 0 and not teacher.has_mlm_head:
            raise BertkitError(
                f"the teacher {teacher.source} has no MLM head, so there are no logits to distil: "
                "set --set distill.alpha_ce=0, or use --method tinybert or --method minilm"
            )
        check_compatible(student, tcfg, same_width=cfg.alpha_cos > 0)
    elif method == "tinybert":
        if student.hidden_size > tcfg.hidden_size:
            raise BertkitError(
                f"the student's hidden_size {student.hidden_size} is wider than the teacher's {tcfg.hidden_size}: "
                f"W_h projects a student onto a wider teacher; set model.hidden_size <= {tcfg.hidden_size}"
            )
        check_compatible(student, tcfg, same_heads=cfg.alpha_attention > 0)
    else:
        check_compatible(student, tcfg, same_heads=True)
    if student.num_layers > tcfg.num_layers:
        raise BertkitError(
            f"the student has {student.num_layers} layers but the teacher only {tcfg.num_layers}; "
            f"set model.num_layers <= {tcfg.num_layers}"
        )


def freeze_unreached(student: DistillStudent, method: DistillMethod) -> None:
    """MiniLM reads the last layer's queries, keys and values, never what comes after them: its attention
    output, feed-forward and norms after the attention get no gradient. They stay at their initialisation,
    frozen, so that an engine that updates every parameter it owns (ZeRO's weight decay) leaves them where one
    process does. What the loss does reach stays trainable: a pre-LN layer's attention norm (it comes before
    the attention) and, in ALBERT's all-shared stack, the one layer every earlier application runs whole."""
    if method != "minilm":
        return
    encoder = student.encoder
    if student.config.layer_sharing == "all-shared" and len(encoder.layers) == 1 and student.config.num_layers > 1:
        return
    last = encoder.layers[-1]
    after = [last.attention.out if last.attention else None, last.ffn, last.ffn_norm, encoder.final_norm]
    if not last.pre_norm:
        after.append(last.attn_norm)  # post-LN: the norm is applied to the attention's output
    for module in after:
        if module is not None:
            module.requires_grad_(False)


def _evaluator(objective: DistillationObjective, corpus: Corpus, indices: np.ndarray, spec: Any, pad_id: int,
               batch_size: int, device: torch.device):  # fmt: skip
    """Each distillation term's mean over the held-out sequences: sums and target counts accumulated over
    batches, so the figure does not depend on how the sequences are batched."""

    def evaluate(model: nn.Module) -> dict[str, float]:
        loader = MLMBatches(corpus, indices, batch_size, spec, pad_id, seed=1234, shuffle=False)
        sums: dict[str, float] = {}
        counts: dict[str, float] = {}
        for start in range(0, len(indices), batch_size):
            loader.batch_size = min(batch_size, len(indices) - start)
            batch = {k: v.to(device) for k, v in loader.next_batch().items()}
            ones = dict.fromkeys(objective.terms, 1.0)  # a total of 1: the call returns plain sums
            _, metrics = objective(model, batch, ones)
            for term, count in objective.counts(batch).items():
                sums[term] = sums.get(term, 0.0) + float(metrics[f"{term}_loss"])
                counts[term] = counts.get(term, 0.0) + count
        return {f"{term}_loss": round(sums[term] / max(counts[term], 1.0), 5) for term in sums}

    return evaluate


def term_losses(result: TrainResult, terms: tuple[str, ...]) -> dict[str, float | None]:
    """Each distillation term's first and last logged value: `TERM_loss_first`, `TERM_loss_last`."""
    out: dict[str, float | None] = {}
    for term in terms:
        out[f"{term}_loss_first"], out[f"{term}_loss_last"] = result.first_last(f"{term}_loss")
    return out


@dataclass
class GeneralPlan:
    """What the general stage distils, checked against the teacher before anything is written."""

    recipe: DistillRecipe  # its model section the student's shape, with the teacher's vocabulary and positions
    corpus: Corpus
    method: DistillMethod
    init: str  # "random" or "teacher-layers"
    copied_layers: list[int] | None  # 0-based indices of the teacher layers a "teacher-layers" student starts from
    layer_map: list[int] | None  # TinyBERT's: each student layer's teacher layer (1-based; 0: the embeddings)
    weights: dict[str, float]  # each distillation term's weight


def plan_general(recipe: DistillRecipe, teacher: Teacher, student_name: str, vocab_set: bool) -> GeneralPlan:
    """The corpus, the method and the student's shape checked against the teacher: one error line each."""
    corpus = Corpus(recipe.data.train)
    if load_tokenizer(recipe.data.train / TOKENIZER_SUBDIR).fingerprint() != teacher.tokenizer.fingerprint():
        raise BertkitError(
            f"the corpus {recipe.data.train} was built with another tokenizer than the teacher's; rebuild it with "
            f"`bertkit build-corpus --tokenizer {teacher.source} ...`"
        )
    check_no_copies_held_out(
        corpus,
        recipe.data.train,
        recipe.data.eval_fraction,
        "hold nothing out with --set data.eval_fraction=0, or distil on a corpus built with --masking dynamic",
    )
    method = recipe.distill.resolved_method(student_name)
    student_cfg = student_config(recipe.model, teacher.config, vocab_set)
    check_method(method, recipe, student_cfg, teacher)
    longest = int(corpus.lengths().max())
    for who, cfg in (("student", student_cfg), ("teacher", teacher.config)):
        if longest + cfg.position_offset > cfg.max_position_embeddings:
            raise BertkitError(
                f"corpus sequences reach {longest} tokens but the {who} has {cfg.max_position_embeddings} positions; "
                "rebuild the corpus with a smaller --max-seq-len"
                + (" or raise model.max_position_embeddings" if who == "student" else "")
            )
    init = recipe.distill.resolved_init(method)
    copied_layers = (
        distilbert_init_layers(student_cfg.num_layers, teacher.config.num_layers) if init == "teacher-layers" else None
    )
    # A copied student learns from the teacher layers it was copied from: TinyBERT's uniform map would ask the
    # copy of teacher layer 0 to imitate a layer several layers up.
    follow_copy = [i + 1 for i in copied_layers] if copied_layers else None
    layer_map = (
        resolve_layer_map(
            recipe.distill.layer_map if recipe.distill.layer_map is not None else follow_copy,
            student_cfg.num_layers,
            teacher.config.num_layers,
        )
        if method == "tinybert"
        else None
    )
    if init == "teacher-layers" and student_cfg.hidden_size != teacher.config.hidden_size:
        raise BertkitError(
            f"--init teacher-layers copies the teacher's layers, which needs its width: the student's hidden_size "
            f"is {student_cfg.hidden_size}, the teacher's {teacher.config.hidden_size}; use --init random or "
            f"--set model.hidden_size={teacher.config.hidden_size}"
        )
    if init == "teacher-layers":
        # DistilBERT's student is the teacher minus layers: its position table is the teacher's, copied.
        student_cfg = student_cfg.model_copy(update={"max_position_embeddings": teacher.config.max_position_embeddings})
    weights = term_weights(recipe.distill, GENERAL_TERMS[method])
    check_windowed_attention(student_cfg, teacher.config, weights, layer_map)
    return GeneralPlan(
        recipe.model_copy(update={"model": student_cfg}), corpus, method, init, copied_layers, layer_map, weights
    )


def build_student(plan: GeneralPlan, teacher: Teacher) -> DistillStudent:
    """The student at the recipe's seed (the same initial weights on every rank), its heads and projections as the
    method and the term weights need them, copied from the teacher's layers under --init teacher-layers, and what
    the loss cannot reach frozen."""
    student_cfg, method, weights = plan.recipe.model, plan.method, plan.weights
    torch.manual_seed(plan.recipe.train.seed)
    student = DistillStudent(
        student_cfg,
        teacher_hidden_size=teacher.config.hidden_size if method == "tinybert" else None,
        mlm_head=method == "distilbert" and (weights.get("ce", 0) > 0 or weights.get("mlm", 0) > 0),
    )
    if plan.copied_layers is not None:
        init_from_teacher(student, teacher.state_dict(), teacher.config, plan.copied_layers)
    freeze_unreached(student, method)
    return student


def distill_general(
    recipe: DistillRecipe,
    teacher_spec: str,
    output: Path,
    student_name: str,
    vocab_set: bool = False,
    overwrite: bool = False,
    resume: bool | str | None = False,
    quiet: bool = False,
) -> GeneralDistillSummary:
    """The general stage: the student distilled from the teacher on a pretraining corpus, saved to OUTPUT/model;
    returns the summary written to summary.json."""
    if recipe.data.train is None:
        raise BertkitError("no training corpus: pass --corpus DIR (built with the teacher's tokenizer)")
    join_job(
        recipe,
        {"output": output, "teacher": teacher_spec, "student": student_name, "vocab_set": vocab_set,
         "overwrite": overwrite, "resume": resume},
        {"corpus": recipe.data.train, "teacher": Path(teacher_spec)},
    )  # fmt: skip
    recipe = with_local_corpora(recipe)  # an s3:// corpus -> its verified node-local cache (corpus/remote.py)
    teacher = Teacher.load(teacher_spec)
    teacher_parameters = sum(p.numel() for p in teacher.encoder.parameters())  # before an engine shards it
    plan = plan_general(recipe, teacher, student_name, vocab_set)
    recipe, method, corpus = plan.recipe, plan.method, plan.corpus
    student = build_student(plan, teacher)  # before the run directory exists: a misfit leaves nothing
    resumed = prepare_run_dir(output, recipe, overwrite, resume)
    objective = DistillationObjective(
        method, teacher, plan.weights, recipe.distill.resolved_temperature(method), plan.layer_map
    )
    spec = mlm_masking_spec(recipe.data.masking, teacher.tokenizer)
    pad_id = teacher.tokenizer.pad_id
    train_idx, eval_idx = split_indices(len(corpus), recipe.data.eval_fraction, recipe.train.seed)
    micro = recipe.train.batch_size // recipe.train.grad_accum
    source = CheckedBatches(MLMBatches(corpus, train_idx, micro, spec, pad_id, recipe.train.seed), objective)
    held_out = eval_idx[: recipe.train.eval_batches * recipe.train.batch_size]
    device = resolve_device(recipe.engine)
    evaluate = _evaluator(objective, corpus, held_out, spec, pad_id, micro, device) if len(held_out) else None
    result = train(student, objective, source, output, recipe.train, recipe.optim, recipe.schedule, recipe.engine,
                   evaluate, resume=resumed, quiet=quiet, description=f"distill ({method})")  # fmt: skip
    model_dir = output / "model"
    if is_main():
        kept = student.kept_module().cpu()
        heads = {"mlm": 1.0} if student.mlm_head is not None else {}
        meta = {"recipe": recipe.name, "steps": result.steps, "objective": heads, "distilled_from": teacher.source,
                "method": method, "copied_layers": plan.copied_layers}  # fmt: skip
        save_model_dir(model_dir, kept, recipe.model, "pretraining", teacher.tokenizer, meta)
        save_projections(output, student)  # W_e / W_h stay in the run, for the task stage, never in model/
    summary = _summary(plan, output, teacher, teacher_parameters, student, objective, result, len(train_idx),
                       len(held_out))  # fmt: skip
    write_summary(output, summary)
    return summary


def _summary(
    plan: GeneralPlan,
    output: Path,
    teacher: Teacher,
    teacher_parameters: int,
    student: DistillStudent,
    objective: DistillationObjective,
    result: TrainResult,
    train_sequences: int,
    eval_sequences: int,
) -> GeneralDistillSummary:
    """summary.json: who taught whom, how, on how many sequences, and how it ended."""
    return GeneralDistillSummary(
        run_dir=str(output),
        model_dir=str(output / "model"),
        recipe=plan.recipe.name,
        stage="general",
        method=plan.method,
        init=plan.init,
        teacher=teacher.source,
        teacher_parameters=teacher_parameters,
        student_parameters=sum(p.numel() for p in student.encoder.parameters()),
        layer_map=plan.layer_map,
        copied_layers=plan.copied_layers,
        terms=list(objective.terms),
        **loop_figures(result),
        **term_losses(result, objective.terms),
        train_sequences=train_sequences,
        eval_sequences=eval_sequences,
    )

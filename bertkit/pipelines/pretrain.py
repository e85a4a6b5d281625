"""`bertkit pretrain`: a corpus and a recipe in, a run directory with a trained encoder out.

The recipe's model section picks the family (bertkit/models) and its objective section the losses
(bertkit/objectives); both go through the one training loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.config.recipe import PretrainRecipe
from bertkit.config.schema import (
    MaskingConfig,
    ModelConfig,
    ObjectiveConfig,
    check_engine_model,
    check_model_objective,
    unpad_unsupported,
)
from bertkit.corpus.build import TOKENIZER_SUBDIR
from bertkit.corpus.loader import MLMBatches, PLMBatches, SampledBatches, check_no_copies_held_out, split_indices
from bertkit.corpus.masking import MaskingSpec
from bertkit.corpus.permutation import PermutationSpec
from bertkit.corpus.remote import with_local_corpora
from bertkit.corpus.shards import Corpus
from bertkit.engine.dist import is_main
from bertkit.engine.freezing import check_freeze
from bertkit.engine.loop import TrainResult, train
from bertkit.errors import BertkitError
from bertkit.modelio.modeldir import save_model_dir
from bertkit.models.pretraining import build_pretraining_model
from bertkit.objectives import build_objective
from bertkit.objectives.base import Objective
from bertkit.pipelines.decay import decay_recipe
from bertkit.pipelines.init_from import InitCheckpoint, load_init_checkpoint
from bertkit.pipelines.rundir import join_job, prepare_run_dir
from bertkit.pipelines.summary import PretrainSummary, loop_figures, write_summary
from bertkit.tokenizers.base import Tokenizer, load_tokenizer

# What a corpus must be built with for an objective's batch fields to exist: (manifest option, values, flag).
CORPUS_NEEDS = {
    "nsp": ("format", ("segment-pair", "sentence-pair"), "--format segment-pair (or sentence-pair)"),
    "sop": ("format", ("sop",), "--format sop"),
    "sbo": ("mask_strategy", ("span",), "--mask-strategy span"),
    "plm": ("layout", ("xlnet",), "--layout xlnet"),
}
_OPTION_DEFAULTS = {"format": "full-sentences", "mask_strategy": "token", "layout": "bert"}
# Held-out evaluation compares runs, so it depends on neither the run's seed nor its masking rate: the held-out
# sequences are drawn with a fixed seed, and they are masked once, at 15% with BERT's 80/10/10 (as MLPerf, MosaicBERT
# and ModernBERT evaluate, whatever rate they train at), with a fixed seed (the same masks at every evaluation).
EVAL_SPLIT_SEED = 0
EVAL_MASK_SEED = 1234
EVAL_MASKING = MaskingConfig()

# The share of the steps a new head trains alone when --init-from adds one and train.head_warmup_steps is unset.
HEAD_WARMUP_SHARE = 0.1


def _say_init(init_from: str | Path, report: dict[str, Any]) -> None:
    """One line at start: where the weights come from and which ones start fresh."""
    from bertkit.engine.state import warn

    fresh = report["new_weights"]
    new = f"; new (initialised as BERT does): {', '.join(fresh)}" if fresh else "; every weight from it"
    warn(f"init: {report['source']} (--init-from {init_from}), model from the {report['model_from']}{new}")


def check_corpus_fits(objective: ObjectiveConfig, manifest: dict[str, Any], corpus_dir: Path) -> None:
    options = manifest.get("options", {})
    for name in objective.active:
        if name not in CORPUS_NEEDS:
            continue
        option, accepted, flag = CORPUS_NEEDS[name]
        have = options.get(option, _OPTION_DEFAULTS[option])
        if have not in accepted:
            raise BertkitError(
                f"objective.{name} needs a corpus built with {flag}, but {corpus_dir} has {option} '{have}'; "
                f"rebuild it with `bertkit build-corpus ... {flag.split(' (')[0]}` or set objective.{name}=0"
            )


class CheckedBatches(SampledBatches):
    """Passes batches through, checking once that they carry every field the objective reads, so a loader
    that cannot serve an objective fails with one line instead of a KeyError deep in a loss."""

    def __init__(self, source: Any, objective: Objective) -> None:
        self.source, self.objective, self.checked = source, objective, False
        self.sampler = source.sampler  # the trainer shards and resumes the wrapped loader's order

    def next_batch(self) -> dict[str, torch.Tensor]:
        batch = self.source.next_batch()
        if not self.checked:
            missing = [field for field in self.objective.requires if field not in batch]
            if missing:
                raise BertkitError(
                    f"the corpus loader serves no '{missing[0]}' field, which this recipe's objectives need; "
                    "build the corpus with the matching --format / --mask-strategy (see `bertkit build-corpus --help`)"
                )
            self.checked = True
        return batch


def _check_block_sparse(cfg: ModelConfig, corpus: Corpus, corpus_dir: Path, longest: int) -> None:
    """Block-sparse attention on a corpus it cannot help: sequences that are not whole blocks (each
    would be padded at every layer) or that are all short enough for full attention."""
    if not cfg.block_sparse:
        return
    length = int(corpus.manifest.get("options", {}).get("max_seq_len", longest))
    if length % cfg.block_size:
        fit = length - length % cfg.block_size
        raise BertkitError(
            f"model.attention=block_sparse works on whole blocks of {cfg.block_size} tokens, but {corpus_dir} "
            f"was built with --max-seq-len {length}; rebuild it with --max-seq-len {fit or cfg.block_size} "
            f"(a multiple of model.block_size) or change model.block_size"
        )
    if longest <= cfg.full_attention_limit:
        raise BertkitError(
            f"model.attention=block_sparse falls back to full attention on sequences of up to "
            f"{cfg.full_attention_limit} tokens ((5 + 2 * num_random_blocks) * block_size), and the sequences of "
            f"{corpus_dir} reach only {longest}; rebuild it with a longer --max-seq-len or set model.attention=full"
        )


def make_batches(
    corpus: Corpus,
    indices: np.ndarray,
    batch_size: int,
    spec: MaskingSpec | PermutationSpec,
    pad_id: int,
    seed: int,
    shuffle: bool = True,
    pad_to: int = 0,
    stored_masks: bool = True,
) -> MLMBatches | PLMBatches:
    """The loader of the recipe's objective: permutation LM draws for XLNet, masks for the others
    (padded to at least `pad_to` tokens: see `pad_width`; a corpus's stored static masks unless told not to)."""
    if isinstance(spec, PermutationSpec):
        return PLMBatches(corpus, indices, batch_size, spec, pad_id, seed, shuffle)
    return MLMBatches(
        corpus, indices, batch_size, spec, pad_id, seed, shuffle, pad_to=pad_to, stored_masks=stored_masks
    )


def pad_width(cfg: ModelConfig, longest: int) -> int:
    """The width every batch is padded to (0: its own longest sequence). Block-sparse attention's pattern
    depends on the padded length (full attention up to a limit, random blocks drawn per length), so a
    batch padded to its own longest would make a sequence's loss depend on the sequences beside it, and
    N processes or accumulation micro-steps would not take the step of one process: pad to the corpus's."""
    return longest if cfg.block_sparse else 0


def _evaluator(
    corpus: Corpus,
    indices: np.ndarray,
    spec: MaskingSpec | PermutationSpec,
    pad_id: int,
    batch_size: int,
    max_sequences: int,
    device: torch.device,
    objective: Objective,
    pad_to: int = 0,
):
    """Metrics over the first `max_sequences` held-out sequences, walked in batches of `batch_size`.
    Masks depend only on the sequence, and each metric is weighted by its own targets (masked tokens for MLM,
    sequences for NSP/SOP, tokens for RTD), so the result depends on which sequences are evaluated, never on
    how the batch is split (accumulation, process count)."""
    chosen = indices[:max_sequences]
    if isinstance(spec, MaskingSpec):
        spec = evaluation_masking(spec)

    def evaluate(model: nn.Module) -> dict[str, float]:
        # A fresh, unshuffled loader with a fixed seed: every evaluation sees the same masks. ELECTRA's
        # generator samples during evaluation too; forking the RNG keeps training's random stream intact.
        loader = make_batches(
            corpus, chosen, batch_size, spec, pad_id, EVAL_MASK_SEED, shuffle=False, pad_to=pad_to, stored_masks=False
        )
        batches = CheckedBatches(loader, objective)
        sums: dict[str, float] = {}  # metric -> sum over its targets
        targets: dict[str, float] = {}  # objective part -> its targets scored
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1234)
            for start in range(0, len(chosen), batch_size):
                loader.batch_size = min(batch_size, len(chosen) - start)  # the last batch takes what is left
                batch = {k: v.to(device) for k, v in batches.next_batch().items()}
                _, metrics = objective(model, batch)
                counts = objective.counts(batch)
                for part, count in counts.items():
                    targets[part] = targets.get(part, 0.0) + count
                # A metric is the batch's mean over its own part's targets (mlm_acc over masked tokens, nsp_acc
                # over sequences): weighted back by that count, the sums do not depend on the batching.
                for key, value in metrics.items():
                    sums[key] = sums.get(key, 0.0) + float(value) * counts[metric_part(key, counts)]
        result = {key: round(value / max(1.0, targets[metric_part(key, targets)]), 4) for key, value in sums.items()}
        primary = "mlm" if "mlm" in targets else next(iter(targets), "mlm")
        for name in ("mlm_loss", "plm_loss"):
            if name in result:
                result["perplexity"] = round(math.exp(min(result[name], 50.0)), 2)
                break
        result["targets"] = int(targets.get(primary, 0))  # masked (or predicted) tokens scored: the evaluation's size
        return result

    return evaluate


def metric_part(metric: str, counts: dict[str, float]) -> str:
    """The objective part a metric belongs to, by its name's prefix (`nsp_acc` -> `nsp`, `rtd_baseline_acc` ->
    `rtd`); a metric of no known part is a mean over the first part's targets."""
    part = metric.split("_", 1)[0]
    return part if part in counts else next(iter(counts))


def evaluation_masking(spec: MaskingSpec) -> MaskingSpec:
    """The training masks' strategy (token, whole-word, n-gram, span: what the objectives' fields need) at the
    evaluation's fixed rate and corruption."""
    return replace(
        spec,
        prob=EVAL_MASKING.prob,
        mask_fraction=EVAL_MASKING.mask_fraction,
        random_fraction=EVAL_MASKING.random_fraction,
    )


def _target_metric(objective: ObjectiveConfig) -> str:
    """What `train.target_acc` is compared with: held-out masked-token accuracy (XLNet: predicted-token)."""
    return "plm_acc" if objective.plm else "mlm_acc"


def _snapshot_writer(output: Path, model: nn.Module, cfg: ModelConfig, tokenizer: Tokenizer, recipe: str):
    """Weights at fixed shares of the run (`train.snapshot_every_share`) as model directories under
    RUN_DIR/snapshots/, so a curve can be scored (or exported) after the run."""

    def write(step: int, when: dict[str, float], snapshot: Any) -> None:
        weights = snapshot()  # collective: every rank takes part
        if is_main():
            extra = {"recipe": recipe, "steps": step, **when}
            save_model_dir(output / "snapshots" / f"step-{step}", weights, cfg, "pretraining", tokenizer, extra)

    return write


def _masking_spec(recipe: PretrainRecipe, tokenizer: Tokenizer) -> MaskingSpec | PermutationSpec:
    if recipe.objective.plm:
        return PermutationSpec(recipe.objective.plm_k, recipe.objective.plm_max_span, tokenizer.special_ids)
    return mlm_masking_spec(recipe.data.masking, tokenizer)


def mlm_masking_spec(masking: MaskingConfig, tokenizer: Tokenizer) -> MaskingSpec:
    """The loader's dynamic masking for a recipe's `data.masking` (BERT's 80/10/10 unless set) and a tokenizer."""
    return MaskingSpec(
        masking.prob,
        masking.mask_fraction,
        masking.random_fraction,
        tokenizer.mask_id,
        tokenizer.special_ids,
        tokenizer.vocab_size,
    )


@dataclass
class PretrainPlan:
    """What a pretraining run reads and builds, checked against each other before anything is written."""

    # Its corpora made local (an s3:// corpus -> its verified node-local cache); its model section the recipe's sized
    # to the tokenizer, or the --init-from checkpoint's: what recipe.yaml records.
    recipe: PretrainRecipe
    corpus: Corpus
    tokenizer: Tokenizer
    init: InitCheckpoint | None
    longest: int  # the corpus's longest sequence
    eval_corpus: Corpus  # the training corpus itself when the held-out sequences come out of it
    train_idx: np.ndarray
    eval_idx: np.ndarray


def plan_pretraining(
    recipe: PretrainRecipe, init_from: str | Path | None, model_keys: set[str] | frozenset[str]
) -> PretrainPlan:
    """The corpus, its tokenizer, the model's shape and the held-out split, checked: one error line each."""
    recipe = with_local_corpora(recipe)  # an s3:// corpus -> its verified node-local cache (corpus/remote.py)
    corpus = Corpus(recipe.data.train)
    check_corpus_fits(recipe.objective, corpus.manifest, recipe.data.train)
    tokenizer = load_tokenizer(recipe.data.train / TOKENIZER_SUBDIR)
    model_cfg = recipe.model
    init = None
    if init_from is not None:
        init = load_init_checkpoint(init_from, model_cfg, recipe.name, tokenizer, recipe.data.train, model_keys)
        model_cfg = init.cfg
        try:
            check_model_objective(model_cfg, recipe.objective)
            check_engine_model(recipe.engine, model_cfg)
        except ValueError as err:
            raise BertkitError(f"--init-from {init_from}: {err}") from None
    else:
        # From scratch, the vocabulary is the corpus tokenizer's: a recipe cannot know its size in advance.
        update: dict[str, Any] = {"vocab_size": tokenizer.vocab_size, "pad_token_id": tokenizer.pad_id}
        if model_cfg.family == "roberta":
            update["position_offset"] = tokenizer.pad_id + 1  # RoBERTa numbers positions from padding_idx + 1
        model_cfg = model_cfg.model_copy(update=update)
    # A checkpoint's table may have spare rows past its tokenizer (ModernBERT's); never fewer.
    if tokenizer.vocab_size > model_cfg.vocab_size:
        raise BertkitError(
            f"the corpus tokenizer has {tokenizer.vocab_size} tokens but the model's vocabulary is "
            f"{model_cfg.vocab_size}; build the corpus with the model's tokenizer"
        )
    longest = int(corpus.lengths().max())
    if longest + model_cfg.position_offset > model_cfg.max_position_embeddings:
        raise BertkitError(
            f"corpus sequences reach {longest} tokens but the model has "
            f"{model_cfg.max_position_embeddings} positions; raise model.max_position_embeddings "
            "or rebuild the corpus with a smaller --max-seq-len"
        )
    if corpus.has_documents and (reason := unpad_unsupported(model_cfg)):
        raise BertkitError(
            f"{recipe.data.train} packs several documents per sequence (--format packed-documents), which needs "
            f"attention kept within each document, and {reason} cannot; build the corpus with another --format"
        )
    _check_block_sparse(model_cfg, corpus, recipe.data.train, longest)
    if recipe.data.eval is not None:
        eval_corpus = Corpus(recipe.data.eval)
        eval_tokenizer = load_tokenizer(recipe.data.eval / TOKENIZER_SUBDIR)
        if eval_tokenizer.fingerprint() != tokenizer.fingerprint():
            raise BertkitError(
                f"the evaluation corpus {recipe.data.eval} was built with another tokenizer than {recipe.data.train}; "
                "build both with the same tokenizer (bertkit build-corpus --tokenizer DIR)"
            )
        train_idx, eval_idx = np.arange(len(corpus)), np.arange(len(eval_corpus))
    else:
        check_no_copies_held_out(
            corpus,
            recipe.data.train,
            recipe.data.eval_fraction,
            "build a corpus of other documents and pass it "
            "with --set data.eval=DIR, or hold nothing out with --set data.eval_fraction=0",
        )
        eval_corpus = corpus
        train_idx, eval_idx = split_indices(len(corpus), recipe.data.eval_fraction, EVAL_SPLIT_SEED)
    if recipe.train.target_acc is not None and not len(eval_idx):
        raise BertkitError(
            "train.target_acc is checked on held-out sequences, and this run has none; set data.eval_fraction above 0 "
            "or pass an evaluation corpus with --set data.eval=DIR"
        )
    recipe = recipe.model_copy(update={"model": model_cfg})
    return PretrainPlan(recipe, corpus, tokenizer, init, longest, eval_corpus, train_idx, eval_idx)


def pretrain(
    recipe: PretrainRecipe,
    output: Path,
    init_from: str | Path | None = None,
    overwrite: bool = False,
    resume: bool | str | None = False,
    quiet: bool = False,
    model_keys: set[str] | frozenset[str] = frozenset(),
    decay_from: Path | None = None,
    continue_from: Path | None = None,
    final_checkpoint: bool = False,
) -> PretrainSummary:
    """Pretrain as `recipe` says into `output`. With `init_from`, the checkpoint gives the model; of the recipe's
    model section only its family and the keys named in `model_keys` (the command line's `--set model.KEY`) count,
    and those must agree with the checkpoint (bertkit/pipelines/init_from.py). With `decay_from` (a training
    checkpoint of a stable run), the run is that run's decay from there (bertkit/pipelines/decay.py); with
    `continue_from`, it starts from such a checkpoint's state on its own schedule (a phase after the last one).
    `final_checkpoint` saves a checkpoint at the last step (a phase's end, which the next phase starts from)."""
    if recipe.data.train is None:
        raise BertkitError("no training corpus: pass --corpus DIR (or --set data.train=DIR)")
    start, started = decay_from or continue_from, None
    carry_data = False
    if start is not None:
        if init_from is not None:
            raise BertkitError("--decay-from continues a bertkit run's own checkpoint; leave out --init-from")
        recipe, carry_data, started = decay_recipe(recipe, Path(start), decay=decay_from is not None)
    if recipe.init_from_required and init_from is None:
        raise BertkitError(
            f"recipe '{recipe.name}' continues the pretraining of a checkpoint; pass --init-from MODEL (a bertkit run "
            "or model directory, a Hugging Face checkpoint directory or a hub name)"
        )
    join_job(
        recipe,
        {"output": output, "init_from": init_from, "overwrite": overwrite, "resume": resume},
        {"corpus": recipe.data.train, "eval corpus": recipe.data.eval, "--init-from model": init_from},
    )
    plan = plan_pretraining(recipe, init_from, model_keys)
    recipe, tokenizer, init, model_cfg = plan.recipe, plan.tokenizer, plan.init, plan.recipe.model
    if recipe.train.freeze:  # the names a model of this shape has, without its weights: before the run directory
        with torch.device("meta"):
            names = [name for name, _ in build_pretraining_model(model_cfg, recipe.objective).named_parameters()]
        check_freeze(names, recipe.train.freeze)
    resumed = prepare_run_dir(output, recipe, overwrite, resume)

    torch.manual_seed(recipe.train.seed)  # reproducible initial weights (and the same on every rank)
    model = build_pretraining_model(model_cfg, recipe.objective)
    init_report = None
    warm_only: tuple[str, ...] = ()
    if init is not None:
        new_weights = init.load_into(model, str(init_from))
        # the new head's parameters (a pooler no head reads stays frozen anyway)
        warm_only = tuple(name for name in new_weights if ".pooler." not in f".{name}")
        recipe = _with_head_warmup(recipe, warm_only)
        init_report = {
            "source": str(init.source),
            "model_from": "checkpoint" if init.from_checkpoint else f"recipe '{recipe.name}' (warm start)",
            "new_weights": new_weights,  # initialised as BERT initialises them (an MLM head's decoder is tied)
            "head_warmup_steps": recipe.train.head_warmup_steps or 0,
            "extended": init.extended,
        }
        if not quiet and is_main():
            _say_init(init_from, init_report)
    objective = build_objective(recipe.objective)
    spec = _masking_spec(recipe, tokenizer)
    seed = recipe.train.seed
    micro = recipe.train.batch_size // recipe.train.grad_accum
    pad_to = pad_width(model_cfg, plan.longest)
    loader = make_batches(plan.corpus, plan.train_idx, micro, spec, tokenizer.pad_id, seed, pad_to=pad_to)
    source = CheckedBatches(loader, objective)
    from bertkit.engine.device import resolve_device

    device = resolve_device(recipe.engine)
    evaluate = (
        # eval_batches counts training batches (train.batch_size sequences), walked in micro-batches for memory.
        _evaluator(
            plan.eval_corpus,
            plan.eval_idx,
            spec,
            tokenizer.pad_id,
            micro,
            recipe.train.eval_batches * recipe.train.batch_size,
            device,
            objective,
            pad_to,
        )
        if len(plan.eval_idx)
        else None
    )
    result = train(
        model,
        objective,
        source,
        output,
        recipe.train,
        recipe.optim,
        recipe.schedule,
        recipe.engine,
        evaluate,
        resume=resumed,
        quiet=quiet,
        description="pretrain",
        target_metric=_target_metric(recipe.objective),
        on_snapshot=_snapshot_writer(output, model, model_cfg, tokenizer, recipe.name),
        warm_only=warm_only,
        start_from=Path(start) if start is not None else None,
        carry_data=carry_data,
        final_checkpoint=final_checkpoint,
    )
    model_dir = output / "model"
    if is_main():  # under a distributed engine only rank 0 writes
        save_model_dir(
            model_dir,
            model.cpu(),
            model_cfg,
            "pretraining",
            tokenizer,
            {"recipe": recipe.name, "steps": result.steps, "objective": recipe.objective.model_dump(mode="json")},
        )
    summary = _summary(plan, output, model, result, init_from, init_report)
    if started is not None:
        summary = summary.model_copy(update={"decay" if decay_from is not None else "continued": started})
    write_summary(output, summary)
    return summary


def _with_head_warmup(recipe: PretrainRecipe, new: tuple[str, ...]) -> PretrainRecipe:
    """train.head_warmup_steps resolved: unset, a tenth of the steps when the checkpoint lacked a head, else 0."""
    if recipe.train.head_warmup_steps is not None:
        return recipe
    steps = recipe.train.steps or 0
    warmup = math.ceil(HEAD_WARMUP_SHARE * steps) if new and steps > 1 and not recipe.train.budget else 0
    return recipe.model_copy(update={"train": recipe.train.model_copy(update={"head_warmup_steps": warmup})})


def _summary(plan: PretrainPlan, output: Path, model: nn.Module, result: TrainResult, init_from: str | Path | None,
             init_report: dict[str, Any] | None) -> PretrainSummary:  # fmt: skip
    """summary.json: what was trained, on what, for how long, and how it ended."""
    recipe, train_idx, eval_idx = plan.recipe, plan.train_idx, plan.eval_idx
    return PretrainSummary(
        run_dir=str(output),
        model_dir=str(output / "model"),
        recipe=recipe.name,
        family=recipe.model.family,
        objectives=recipe.objective.active,
        parameters=sum(p.numel() for p in model.encoder.parameters()),
        **loop_figures(result),
        init_from=str(init_from) if init_from is not None else None,
        init=init_report,
        target=result.target,
        train_sequences=len(train_idx),
        eval_sequences=min(len(eval_idx), recipe.train.eval_batches * recipe.train.batch_size),
        # Where the held-out sequences come from: a corpus of their own, or held out of the training corpus.
        eval_set=str(recipe.data.eval) if recipe.data.eval is not None else f"held out: {recipe.data.eval_fraction}",
    )

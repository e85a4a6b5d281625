"""One pydantic model per component. Unknown keys are errors, so a typo never passes silently."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from bertkit.config.model import (  # noqa: F401  (the model section's names, importable from here too)
    Attention,
    Family,
    FamilyModelConfig,
    GeneratorConfig,
    ModelConfig,
    Sharing,
)
from bertkit.config.strict import StrictModel
from bertkit.config.task_config import (  # noqa: F401  (the task section's names, importable from here too)
    COMMON_TASK_FIELDS,
    QA_SPECIAL_TOKENS,
    TaskConfig,
    TaskSection,
    qa_context_room,
    qa_doc_stride,
    qa_question_tokens,
)
from bertkit.config.task_kinds import SPECS


class MaskingConfig(StrictModel):
    """Select `prob` of the maskable tokens and corrupt them: BERT's 80% [MASK], 10% random, 10% kept by default;
    the ELECTRA recipes set ELECTRA's 85% [MASK] and 15% kept, none random."""

    # Share of the maskable tokens selected for prediction.
    prob: float = Field(0.15, gt=0.0, lt=1.0)
    # Share of the selected tokens replaced by [MASK].
    mask_fraction: float = Field(0.8, ge=0.0, le=1.0)
    # Share of the selected tokens replaced by a random token (the rest stay unchanged).
    random_fraction: float = Field(0.1, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _fractions_fit(self) -> MaskingConfig:
        if self.mask_fraction + self.random_fraction > 1.0:
            raise ValueError("mask_fraction + random_fraction must be at most 1 (the rest stays unchanged)")
        return self


# A corpus in object storage (s3://bucket/corpus, any fsspec URL) stays a URL: a Path would fold its "//".
# Training reads it through a verified node-local cache (bertkit/corpus/remote.py).
CorpusURL = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9+.-]*://")]


class DataConfig(StrictModel):
    """Where the corpus is and how batches are served."""

    # Training corpus directory (from build-corpus), or its s3:// (fsspec) URL; --corpus sets it.
    train: CorpusURL | Path | None = None
    # Held-out corpus, a directory or URL as for train.
    eval: CorpusURL | Path | None = None
    # Held out from `train` when no `eval` corpus is given (deterministic, by sequence index).
    eval_fraction: float = Field(0.02, ge=0.0, lt=0.5)
    masking: MaskingConfig = MaskingConfig()


class ObjectiveConfig(StrictModel):
    """Which losses to train, with their weights (0 turns a loss off)."""

    # Masked language modelling (for ELECTRA: the generator's MLM).
    mlm: float = Field(1.0, ge=0.0)
    # Next-sentence prediction (BERT) and sentence-order prediction (ALBERT), on the pooled output.
    nsp: float = Field(0.0, ge=0.0)
    # Sentence-order prediction (ALBERT); needs a --format sop corpus.
    sop: float = Field(0.0, ge=0.0)
    # Replaced-token detection (ELECTRA): loss = mlm (generator) + rtd * disc, rtd = 50 in the paper.
    rtd: float = Field(0.0, ge=0.0)
    # Span boundary objective (SpanBERT), and the longest span it has a relative-position embedding for.
    sbo: float = Field(0.0, ge=0.0)
    # SpanBERT: the longest span the span boundary objective has a position embedding for.
    sbo_max_span: int = Field(10, gt=0)
    # Permutation language modelling (XLNet): predict the last 1/plm_k of a sampled factorization order,
    # chosen as spans of 1..plm_max_span tokens (K = 6 for base, 7 for large; spans up to 5).
    plm: float = Field(0.0, ge=0.0)
    # XLNet: K, predict the last 1/K of each factorization order (6 base, 7 large).
    plm_k: int = 6
    # XLNet: the longest span (in tokens) a prediction target is chosen as.
    plm_max_span: int = 5

    @model_validator(mode="after")
    def _compatible(self) -> ObjectiveConfig:
        if self.nsp and self.sop:
            raise ValueError(
                "nsp and sop both predict from the pooled output of a segment pair; keep one (set the other to 0)"
            )
        if self.plm_k < 2:
            raise ValueError(
                f"objective.plm_k={self.plm_k}: PLM predicts the last 1/K of each factorization order, so K must be "
                "at least 2 (K=1 would predict every token with no context); use 6 (XLNet-base) or 7 (XLNet-large)"
            )
        if self.plm_max_span < 1:
            raise ValueError(
                f"objective.plm_max_span={self.plm_max_span}: a span holds at least one token; use 5 (XLNet's)"
            )
        if not any((self.mlm, self.nsp, self.sop, self.rtd, self.sbo, self.plm)):
            raise ValueError("every objective weight is 0; set at least objective.mlm > 0 (or objective.plm for XLNet)")
        if self.sbo and not self.mlm:
            raise ValueError("sbo is trained with span-masked MLM; set objective.mlm > 0")
        return self

    @property
    def active(self) -> list[str]:
        return [name for name in ("mlm", "nsp", "sop", "rtd", "sbo", "plm") if getattr(self, name) > 0]


def check_model_objective(model: ModelConfig, objective: ObjectiveConfig) -> None:
    """Combinations of model and objective that cannot train; one message that names the fix."""
    if (objective.nsp or objective.sop) and not model.pooler:
        name = "nsp" if objective.nsp else "sop"
        raise ValueError(f"objective.{name} reads the pooled output, but model.pooler is false; set model.pooler=true")
    if objective.nsp and model.type_vocab_size < 2:
        raise ValueError("objective.nsp needs two segment types; set model.type_vocab_size=2 (or objective.nsp=0)")
    if model.family == "electra" and not objective.rtd:
        raise ValueError("an ELECTRA model trains with replaced-token detection; set objective.rtd (50 in the paper)")
    if objective.rtd and model.family != "electra":
        raise ValueError("objective.rtd needs a generator; use model.family=electra (see the electra-* recipes)")
    if objective.rtd and (objective.nsp or objective.sop or objective.sbo):
        raise ValueError("ELECTRA trains mlm (generator) + rtd only; set objective.nsp/sop/sbo to 0")
    if model.family == "xlnet":
        others = [name for name in objective.active if name != "plm"]
        if others or not objective.plm:
            what = f"objective.{others[0]} is not an XLNet objective" if others else "objective.plm is 0"
            raise ValueError(
                f"an XLNet model trains with permutation language modelling only, and {what}; "
                "set objective.plm=1 and objective.mlm/nsp/sop/rtd/sbo=0 (see the xlnet-* recipes)"
            )
    elif objective.plm:
        raise ValueError(
            "objective.plm needs XLNet's two-stream attention; use model.family=xlnet (see the xlnet-* recipes)"
        )


class OptimConfig(StrictModel):
    """The optimizer and its hyper-parameters."""

    # adamw: BERT/RoBERTa. lamb: layer-wise trust ratio (You et al. 2019, used by ALBERT) for large batches.
    # stableadamw: AdamW whose step is clipped per tensor (Wortsman et al. 2023), as ModernBERT trains; from
    # torch-optimi (the `stableadamw` extra). weight_decay means the same for all three: decoupled and multiplied
    # by the scheduled rate (PyTorch's AdamW), so a run switches optimizer without rescaling it.
    name: Literal["adamw", "lamb", "stableadamw"] = "adamw"
    # Peak learning rate, reached at the end of warm-up.
    lr: float = Field(1e-4, gt=0)
    # Adam's beta1 and beta2 (moment decay rates), each in [0, 1).
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = (0.9, 0.999)
    # Adam's epsilon (added to the denominator).
    eps: float = Field(1e-6, gt=0)
    # Decoupled weight decay; biases and LayerNorm weights are never decayed.
    weight_decay: float = Field(0.01, ge=0)
    grad_clip: float = Field(1.0, ge=0, description="max global grad norm; 0 disables clipping")


# Seeds run from 0 (numpy's generators take no negative seed) to below 2^63 (torch's, with each process's rank added).
SEED_LIMIT = 2**63

WARMUP_STEPS_OR_FRACTION = (
    "schedule.warmup_steps and schedule.warmup_fraction are mutually exclusive (both say how long to warm up); "
    "keep one, e.g. --set schedule.warmup_steps=0 --set schedule.warmup_fraction=0.1"
)


class ScheduleConfig(StrictModel):
    """The learning-rate schedule: warm-up to optim.lr, then decay."""

    # Warm-up as a count of steps, or as a share of the run's steps (BERT's warmup_proportion, transformers'
    # warmup_ratio): a share scales with the data, so a small fine-tuning set is never all warm-up. One of the two.
    warmup_steps: int = Field(0, ge=0)
    warmup_fraction: float = Field(0.0, ge=0.0, lt=1.0, description="share of the steps spent warming up")
    # wsd = warmup-stable-decay: constant peak after warmup, then a decay over the last `decay_fraction` of the
    # steps (so a run can be extended from a stable-phase checkpoint), shaped by `decay_shape`: linear, or
    # 1-sqrt (ModernBERT's, after Hägele et al. 2024), which stays higher longer and drops at the very end.
    decay: Literal["linear", "cosine", "constant", "wsd"] = "linear"
    # Where the decay ends (linear, cosine or wsd), as a share of the peak rate (0: decays to 0).
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0)
    decay_fraction: float = Field(0.2, gt=0.0, le=1.0, description="wsd only: share of steps spent decaying")
    decay_shape: Literal["linear", "1-sqrt"] = Field("linear", description="wsd only: shape of the final decay")

    @model_validator(mode="after")
    def _steps_or_fraction(self) -> ScheduleConfig:
        if self.warmup_steps and self.warmup_fraction:
            raise ValueError(WARMUP_STEPS_OR_FRACTION)
        if self.decay_shape != "linear" and self.decay != "wsd":
            # Silently ignoring it would train with another schedule than the one asked for.
            raise ValueError(
                f"schedule.decay_shape={self.decay_shape} shapes the final decay of schedule.decay=wsd only "
                f"(this recipe has decay={self.decay}); add --set schedule.decay=wsd or drop decay_shape"
            )
        return self

    def warmup_for(self, total_steps: int) -> int:
        """Warm-up steps of a run of `total_steps`: the fraction rounded up (as transformers' warmup_ratio), so a
        fraction above 0 always warms up for at least one step."""
        if self.warmup_fraction:
            return math.ceil(self.warmup_fraction * total_steps)
        return self.warmup_steps


_BUDGET = re.compile(
    r"^\s*(\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*"
    r"(s|sec|m|min|h|d|tok|tokens|[kmb] ?tok(?:ens)?|[kmgtpe]? ?flops?)\s*$",
    re.I,
)
_TIME_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
_TOKEN_UNITS = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9}
_FLOP_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15, "e": 1e18}


def parse_budget(text: str) -> tuple[str, float]:
    """'30m' -> ('seconds', 1800); '5Mtok' -> ('tokens', 5e6); '2e13flop' or '20Tflop' -> ('flops', 2e13): training
    FLOPs as bertkit counts them (bertkit/engine/flops.py). Raises ValueError with the accepted forms."""
    match = _BUDGET.match(text)
    if not match:
        raise ValueError(
            f"cannot read budget {text!r}; use a duration like 90s, 30m, 2h, 1d, a token count like 500ktok, 5Mtok "
            "or a FLOP count like 2e13flop, 20Tflop"
        )
    value, unit = float(match.group(1)), match.group(2).lower().replace(" ", "")
    if value <= 0:
        raise ValueError(f"budget {text!r} is not positive; give a duration, token or FLOP count above 0")
    if unit in _TIME_UNITS:
        return "seconds", value * _TIME_UNITS[unit]
    if unit.endswith(("flop", "flops")):
        return "flops", value * _FLOP_UNITS[unit.removesuffix("s").removesuffix("flop")]
    return "tokens", value * _TOKEN_UNITS[unit.removesuffix("tokens").removesuffix("tok")]


STEPS_OR_EPOCHS = (
    "train.steps and train.epochs are mutually exclusive (one says how long to train); "
    "keep one, e.g. --set train.epochs=null --set train.steps=N"
)


class TrainConfig(StrictModel):
    """How long to train, on what batches, and when to log, evaluate and checkpoint."""

    # Continued pretraining (--init-from) of a checkpoint without the head the objective needs (a sentence encoder
    # without its MLM head): the first N optimizer steps train the new head alone, everything else frozen, so its
    # first, nearly random gradients do not move the encoder. None: a tenth of train.steps when --init-from adds a
    # head, else 0. One process only (engine.backend=single).
    head_warmup_steps: int | None = Field(None, ge=0)
    # Parameter-name prefixes frozen for the whole run (e.g. [encoder.embeddings.] or [encoder.layers.0.]); each
    # must name some parameter of the model.
    freeze: list[str] = Field(default_factory=list)
    # Activation checkpointing: every k-th encoder layer keeps only its input and runs again in the backward pass
    # (1: every layer; 0: none), trading about a third more compute for the activations of long sequences.
    activation_checkpointing: int = Field(0, ge=0)
    # Optimizer steps. Left out (null) with `epochs` unset, it is 1000; with `epochs` set, the fine-tuning
    # pipeline derives it: epochs x ceil(training examples / batch_size).
    steps: int | None = Field(None, gt=0)
    # Passes over the training set (finetune only; the BERT paper fine-tunes for 2-4). Evaluates after each.
    epochs: int | None = Field(None, gt=0)
    batch_size: int = Field(32, gt=0, description="sequences per optimizer step, over all processes")
    # Micro-batches accumulated per optimizer step; must divide batch_size.
    grad_accum: int = Field(1, gt=0)
    # Cramming's batch ramp: over this share of the run (of the budget when there is one, else of `steps`) the
    # batch grows from one micro-batch (batch_size / grad_accum sequences) to batch_size, one micro-batch at a
    # time, so the first updates come sooner. Needs grad_accum > 1; 0 keeps batch_size from the first step.
    batch_ramp: float = Field(0.0, ge=0.0, le=1.0, description="share of the run the batch ramps up over")
    # Random seed of the run (each process adds its rank).
    seed: int = Field(0, ge=0, lt=SEED_LIMIT)
    # Optimizer steps between two rows of metrics.jsonl (and progress lines).
    log_every: int = Field(10, gt=0)
    eval_every: int = Field(0, ge=0, description="0 evaluates only at the end")
    eval_batches: int = Field(20, gt=0, description="held-out batches of train.batch_size sequences per evaluation")
    checkpoint_every: int = Field(0, ge=0, description="0 saves only the final model")
    # Checkpoints kept in the run directory; older ones are deleted.
    keep_last: int = Field(2, gt=0)
    # Checkpoints at multiples of this step count are kept besides the last ones (0: none): the points a stable
    # phase can later be decayed from (`pretrain --decay-from RUN/checkpoints/step-N`).
    keep_every: int = Field(0, ge=0)
    # A time, token or FLOP budget: 30m, 2h, 5Mtok, 2e13flop or 20Tflop (training FLOPs as bertkit/engine/flops.py
    # counts them: 6 x non-embedding parameters + attention, per token; load cannot skew it, so runs on different
    # machines spend the same compute). None trains for `steps`. With `budget_schedule` (the default)
    # the learning-rate schedule is laid over the budget's spent share, as cramming does (the rate at share p is
    # the step schedule's rate at step p x steps), so warm-up and decay end exactly on the deadline and `steps`
    # is only an upper bound. Time is training time: start-up, evaluations and checkpoint writes do not count.
    budget: str | None = None
    budget_schedule: bool = Field(
        True, description="with a budget, lay warm-up and decay over its spent share (false: the budget only stops)"
    )
    # Evaluate (and snapshot the weights) at fixed shares of the run: of the budget when there is one, else of
    # `steps`. 0.1 evaluates at 10%, 20%, ... 100%; curves of runs with different speeds then line up.
    eval_every_share: float = Field(0.0, ge=0.0, le=1.0, description="evaluate at every multiple of this share")
    snapshot_every_share: float = Field(
        0.0, ge=0.0, le=1.0, description="keep the weights at every multiple of this share (pretrain: snapshots/)"
    )
    # Stop at the first evaluation whose held-out masked-token accuracy (pretraining: eval mlm_acc) reaches this:
    # MLPerf's time-to-quality. The summary's `target` says when (step, training seconds, tokens).
    target_acc: float | None = Field(None, gt=0.0, lt=1.0, description="stop once held-out accuracy reaches it")

    @model_validator(mode="before")
    @classmethod
    def _steps_or_epochs(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("steps") is not None and data.get("epochs") is not None:
            raise ValueError(STEPS_OR_EPOCHS)
        return data

    @model_validator(mode="after")
    def _accum_divides_batch(self) -> TrainConfig:
        if self.steps is None and self.epochs is None:
            # Set through __dict__: validate_assignment would re-run this validator from inside itself.
            self.__dict__["steps"] = 1000
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch_size {self.batch_size} is not divisible by grad_accum {self.grad_accum}")
        if self.head_warmup_steps and self.steps is not None and self.head_warmup_steps >= self.steps:
            raise ValueError(
                f"head_warmup_steps {self.head_warmup_steps} leaves none of the {self.steps} steps to the whole "
                "model; give it fewer steps than train.steps"
            )
        if self.batch_ramp > 0 and self.grad_accum == 1:
            raise ValueError(
                f"batch_ramp {self.batch_ramp} grows the batch one micro-batch at a time, and grad_accum 1 makes "
                "the whole batch one micro-batch; set train.grad_accum (4 starts the ramp at batch_size / 4) "
                "or train.batch_ramp=0"
            )
        if self.batch_ramp > 0 and self.epochs is not None:
            raise ValueError(
                "batch_ramp changes how many sequences a step takes, so steps no longer count epochs; "
                "train for train.steps (or a budget) instead of train.epochs, or drop train.batch_ramp"
            )
        if self.budget is not None:
            parse_budget(self.budget)
        return self


# DeepSpeed config keys that the recipe decides, and the recipe field to set instead.
DEEPSPEED_RECIPE_KEYS = {
    "train_batch_size": "train.batch_size",
    "train_micro_batch_size_per_gpu": "train.batch_size and train.grad_accum",
    "gradient_accumulation_steps": "train.grad_accum",
    "gradient_clipping": "optim.grad_clip",
    "optimizer": "optim.*",
    "scheduler": "schedule.*",
    "fp16": "engine.precision",
    "bf16": "engine.precision",
    "amp": "engine.precision",
    "torch_autocast": "engine.precision",
    "managed_gradient_accumulation": "nothing: bertkit's loop owns gradient accumulation",
}


def _left_to_the_recipe(value: object) -> bool:
    """Hugging Face Trainer configs say "auto" (or {"enabled": "auto"}) for what the trainer fills in;
    such entries, and disabled sections, defer to the recipe and are dropped."""
    if value == "auto":
        return True
    return isinstance(value, dict) and value.get("enabled", True) in ("auto", False)


class DeepSpeedConfig(StrictModel):
    """DeepSpeed ZeRO (engine.backend=deepspeed). The DeepSpeed config is generated from the recipe
    (batch sizes, accumulation, clipping, stage); `config` adds the rest (bucket sizes, offload...)."""

    # 1 shards optimizer state, 2 also gradients, 3 also parameters (stage 0 is plain data parallel: use ddp).
    zero_stage: int = Field(2, ge=1, le=3)
    # A DeepSpeed JSON config merged over the generated one. Keys the recipe owns (batch sizes,
    # accumulation, clipping, optimizer, scheduler, precision) must not appear in it.
    config: Path | None = None

    def user_config(self) -> dict:
        """The JSON object in `config` ({} without one), checked against what the recipe owns."""
        if self.config is None:
            return {}
        try:
            user = json.loads(self.config.read_text("utf-8"))
        except FileNotFoundError:
            raise ValueError(f"engine.deepspeed.config: {self.config} does not exist") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"engine.deepspeed.config: {self.config} is not a JSON file ({err})") from None
        if not isinstance(user, dict):
            raise ValueError(f"engine.deepspeed.config: {self.config} must hold a JSON object")
        owned = sorted(key for key in user if key in DEEPSPEED_RECIPE_KEYS and not _left_to_the_recipe(user[key]))
        if owned:
            fields = "; ".join(f"{key}: set {DEEPSPEED_RECIPE_KEYS[key]}" for key in owned)
            raise ValueError(
                f"engine.deepspeed.config sets {', '.join(owned)}, which the recipe decides ({fields}); "
                'remove them from the file or write "auto"'
            )
        user = {key: value for key, value in user.items() if key not in DEEPSPEED_RECIPE_KEYS}
        zero = user.get("zero_optimization", {})
        if not isinstance(zero, dict):
            raise ValueError(f"engine.deepspeed.config: zero_optimization in {self.config} must be a JSON object")
        stage = zero.get("stage", self.zero_stage)
        if stage != self.zero_stage:
            raise ValueError(
                f"engine.deepspeed.config says ZeRO stage {stage}, the recipe {self.zero_stage}; "
                "set engine.deepspeed.zero_stage and leave the stage out of the file"
            )
        return user

    @model_validator(mode="after")
    def _config_file_fits(self) -> DeepSpeedConfig:
        self.user_config()  # fail at recipe load, before any run directory is made
        return self


class EngineConfig(StrictModel):
    """Where and how the training loop runs: processes, device, precision, compilation."""

    # single: one process. ddp/fsdp: launched with torchrun (FSDP2 fully_shard); without a launcher, a group of one.
    # deepspeed: ZeRO stage engine.deepspeed.zero_stage, launched with torchrun or the deepspeed launcher.
    backend: Literal["single", "ddp", "fsdp", "deepspeed"] = "single"
    # auto: CUDA when available, else CPU.
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # auto: bf16 autocast on a CUDA GPU with bf16; on a CPU with AVX512-BF16 or AMX the faster of bf16 and fp32 at
    # the model's width, timed at start; fp32 elsewhere. The run says which and why (engine/device.py).
    # fp16 uses dynamic loss scaling and needs a GPU; bf16 autocast runs on CPU and GPU.
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto", description="auto (bf16 where the device runs it natively and faster, else fp32), fp32, bf16 or fp16"
    )
    threads: int = Field(0, ge=0, description="torch CPU threads; 0 keeps torch's default")
    max_bad_steps: int = Field(5, gt=0, description="stop after this many NaN/inf steps in a row")
    # Several processes: how long a rank waits for the others in any collective (joining included) before
    # it stops with an error. A rank that died or hangs stops its peers after this instead of torch's 30 min;
    # keep it above the slowest checkpoint write (rank 0 writes while the others wait).
    timeout: float = Field(600.0, gt=0, description="seconds a rank waits for the others before stopping")
    # Peak device throughput for MFU, in TFLOP/s; None uses the built-in table (see bertkit/engine/flops.py).
    peak_tflops: float | None = Field(None, gt=0)
    # Off by default: TensorBoard's writer costs seconds per run, which tiny CPU runs notice.
    tensorboard: bool = Field(False, description="also write TensorBoard event files (needs tensorboard installed)")
    # On CPU it measured slower than eager, after a minute of compiling (docs/benchmarks.md, make bench): for GPUs.
    compile: bool = Field(False, description="torch.compile the model (for GPUs; slower than eager on CPU)")
    # Unpadding (bertkit/models/unpad.py): only the real tokens of a batch go through the encoder, attention by
    # sequence boundaries. auto: where the family allows it (not XLNet, not block-sparse attention) and the batch
    # has padding; true: always, an error on a family that cannot; false: the padded path.
    unpad: Literal["auto"] | bool = Field(
        "auto", description="run only the real tokens (auto: where the family allows and the batch has padding)"
    )
    deepspeed: DeepSpeedConfig = Field(default_factory=DeepSpeedConfig)

    @model_validator(mode="after")
    def _deepspeed_precision(self) -> EngineConfig:
        if self.backend == "deepspeed" and self.precision == "fp16":
            # ZeRO owns the (partitioned) gradients, so torch's GradScaler cannot unscale them.
            raise ValueError("engine.precision=fp16 is not supported with engine.backend=deepspeed; use bf16")
        return self


def unpad_unsupported(model: ModelConfig) -> str | None:
    """Why `model` cannot run unpadded, or None: XLNet's relative attention and two streams, and BigBird's
    block-sparse attention, need the padded (batch, length) layout."""
    if model.family == "xlnet":
        return "model.family=xlnet (relative two-stream attention over the padded layout)"
    if model.block_sparse:
        return "model.attention=block_sparse (BigBird's blocks tile the padded sequence)"
    return None


def check_engine_model(engine: EngineConfig, model: ModelConfig) -> None:
    """engine.unpad=true on a model that cannot run unpadded, refused when the recipe is read."""
    if engine.unpad is True and (reason := unpad_unsupported(model)):
        raise ValueError(f"engine.unpad=true is not supported with {reason}; set engine.unpad=auto or false")


def check_engine_optimizer(engine: EngineConfig, optim: OptimConfig) -> None:
    """Combinations of engine and optimizer that cannot work, refused when the recipe is read."""
    if engine.backend == "deepspeed" and optim.name == "lamb":
        # LAMB's trust ratio is per parameter tensor; ZeRO flattens parameters into partitions.
        raise ValueError(
            "optim.name=lamb is not supported with engine.backend=deepspeed (ZeRO flattens the tensors whose "
            "norms LAMB needs); use optim.name=adamw, or engine.backend=ddp/fsdp for LAMB"
        )
    if engine.backend == "deepspeed" and optim.name == "stableadamw":
        # The same for StableAdamW's clipping, by the RMS of g^2/v over each tensor: ZeRO would hand it one flat
        # partition per parameter group and rank, so the clip would mix tensors and differ between world sizes.
        raise ValueError(
            "optim.name=stableadamw is not supported with engine.backend=deepspeed (ZeRO flattens the tensors it "
            "clips one by one); use optim.name=adamw, or engine.backend=ddp/fsdp for StableAdamW"
        )


DistillMethod = Literal["distilbert", "tinybert", "minilm"]


class PhaseConfig(StrictModel):
    """One phase of the task stage: its length (epochs over the training data, or steps, which win when both
    are set, so `--set distill.prediction.steps=N` overrides a recipe's epochs), its peak rate, and its
    schedule (warm-up as a share of the phase's steps, then linear decay to 0 or a constant rate)."""

    epochs: float | None = Field(None, ge=0, description="passes over the training data; 0 skips the phase")
    steps: int | None = Field(None, ge=0, description="optimizer steps; 0 skips the phase")
    # Peak learning rate of the phase.
    lr: float = Field(1e-4, gt=0)
    warmup_fraction: float = Field(0.0, ge=0.0, lt=1.0, description="share of the phase's steps spent warming up")
    # After warm-up: linear decay to 0, or a constant rate.
    decay: Literal["linear", "constant"] = "linear"

    def planned_steps(self, examples: int, batch_size: int) -> int:
        """The phase's optimizer steps over `examples` training examples."""
        if self.steps is not None:
            return self.steps
        return math.ceil((self.epochs if self.epochs is not None else 1.0) * math.ceil(examples / batch_size))

    def schedule(self, steps: int) -> ScheduleConfig:
        return ScheduleConfig(warmup_steps=round(self.warmup_fraction * steps), decay=self.decay)


class DistillConfig(StrictModel):
    """Knowledge distillation: which method, how the student starts, and each loss's weight (0 turns it off).

    Defaults are the papers': DistilBERT 5.0 soft cross-entropy (T = 2) + 2.0 MLM + 1.0 cosine; TinyBERT
    1.0 each for embeddings, hidden states and attention scores (and the prediction layer in the task
    stage, t = 1); MiniLM 1.0 each for last-layer attention and value relations.
    """

    # None: follows the student (tinybert* recipes -> tinybert, distilbert* -> distilbert, else distilbert).
    method: DistillMethod | None = None
    # "teacher-layers" copies the embeddings and every other layer (DistilBERT's initialisation, its default);
    # "random" starts fresh (TinyBERT's general stage, MiniLM). None: the method's default.
    init: Literal["teacher-layers", "random"] | None = None
    # Softmax temperature of the logit losses; None: the method's (DistilBERT 2, TinyBERT 1).
    temperature: float | None = Field(None, gt=0, description="must be > 0")
    # DistilBERT: soft cross-entropy on the teacher's MLM logits, at the temperature.
    alpha_ce: float = Field(5.0, ge=0)
    # DistilBERT: the student's own masked LM loss.
    alpha_mlm: float = Field(2.0, ge=0)
    # DistilBERT: cosine between student and teacher last hidden states.
    alpha_cos: float = Field(1.0, ge=0)
    # TinyBERT: MSE between the embedding outputs.
    alpha_embedding: float = Field(1.0, ge=0)
    # TinyBERT: MSE between mapped hidden states.
    alpha_hidden: float = Field(1.0, ge=0)
    # TinyBERT: MSE between mapped attention scores.
    alpha_attention: float = Field(1.0, ge=0)
    # TinyBERT task stage: soft cross-entropy on the teacher's task logits.
    alpha_prediction: float = Field(1.0, ge=0)
    # MiniLM: KL between last-layer attention distributions.
    alpha_attention_kl: float = Field(1.0, ge=0)
    # MiniLM: KL between last-layer value relations.
    alpha_value_relation: float = Field(1.0, ge=0)
    # TinyBERT: teacher layer (1-based) per student layer; None: the uniform map g(m) = m * L_T / L_S.
    layer_map: list[int] | None = None
    # Task stage (TinyBERT's two jobs): the intermediate layers (tinybert only; 0 epochs skips them), then the
    # prediction layer, each with its own optimizer state, rate, schedule and length.
    intermediate: PhaseConfig = Field(default_factory=lambda: PhaseConfig(epochs=1, lr=1e-4, decay="constant"))
    # Task stage: whether a student copied from the teacher's layers (`copied_layers` in its model, as `compress`
    # and `--init teacher-layers` make) runs the intermediate phase. A copy already computes the teacher's
    # hidden states at its layers; TinyBERT's phase is for students that do not (general or random).
    intermediate_for_copies: bool = True
    prediction: PhaseConfig = Field(default_factory=lambda: PhaseConfig(epochs=3, lr=1e-4, warmup_fraction=0.1))
    # Task stage, prediction phase: the weight of the gold labels' cross-entropy beside the soft targets
    # (alpha_prediction); 0, TinyBERT's choice, learns from the teacher alone.
    alpha_gold: float = Field(0.0, ge=0)
    # Task stage: the teacher's logits of every training example are computed once and read from
    # `cache_dir` (default: the run directory), keyed by teacher and data, instead of a teacher forward per step.
    cache_teacher: bool = True
    # Where the teacher's logits are cached (None: the run directory).
    cache_dir: Path | None = None

    def resolved_method(self, student_recipe: str) -> DistillMethod:
        if self.method is not None:
            return self.method
        return "tinybert" if student_recipe.startswith("tinybert") else "distilbert"

    def resolved_init(self, method: DistillMethod) -> str:
        return self.init or ("teacher-layers" if method == "distilbert" else "random")

    def resolved_temperature(self, method: DistillMethod) -> float:
        return self.temperature if self.temperature is not None else (2.0 if method == "distilbert" else 1.0)


# Metrics a task can select the best model by, and the task keys each kind reads beyond those every kind reads: from
# each kind's configuration class (config/task_config.py), which refuses the keys of other kinds. Every metric but
# LOWER_IS_BETTER is "higher is better".
TASK_METRICS: dict[str, tuple[str, ...]] = {name: spec.metrics for name, spec in SPECS.items()}
TASK_FIELDS: dict[str, frozenset[str]] = {name: spec.fields for name, spec in SPECS.items()}
LOWER_IS_BETTER = {"mse"}
# The kinds `task.kind` takes: those config/task_kinds.py describes, in its order.
TaskKindName = Literal[tuple(SPECS)]  # type: ignore[valid-type]


def task_field_applies(field: str, kind: str) -> bool:
    return field in COMMON_TASK_FIELDS or field in TASK_FIELDS[kind]



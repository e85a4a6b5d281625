"""The BERT variants on one budget: BERT, RoBERTa, ALBERT, ELECTRA, SpanBERT, XLNet and crammed-bert pretrained on the
same text with the same tokenizer for the same training FLOPs, then compared downstream. `make bench` runs it
through test_variants_bench.py; on your own text:

    python tests/bench/variants.py --text my_corpus.txt --budget 4e14flop --work runs/variants

The default budget, 4e14 FLOPs, is about two hours a variant on 2 CPU cores. On a GPU, `--parallel 10 --threads 1
--jobs 14` pretrains the variants side by side and runs the suite's cells 14 at a time (with --generator 0.25,0.5,1.0
on one H100 with 16 CPU cores: at 2e14 FLOPs the whole bench took 8.4 minutes; at 4e14 the pretraining took 5.8,
crammed-bert's being the longest, and the suite about 4 more at its own fine-tuning rates).

Text: by default the time-to-quality bench's text, the unique context paragraphs of SQuAD v1.1 train (Wikipedia;
the data manifest's `squad` source, which `make install-test` downloads), whose articles are apart from SQuAD v1.1
dev's, from which the local suite builds its QA and QNLI tasks; one paragraph a document, every 20th held out.
Or --text FILE (a blank line between documents; every 20th document held out).

What is the same for every variant:
- the tokenizer: one uncased WordPiece of 16,000 pieces trained on the training text. The papers' own (BERT's
  WordPiece, RoBERTa's byte-level BPE, ALBERT's and XLNet's SentencePiece) would each change the tokens per
  document and so the tokens a budget buys; one tokenizer keeps the objectives apart from that;
- the encoder's shape: 4 layers, hidden 256, 4 heads, a 1,024-wide feed-forward (680 for crammed-bert's gated one,
  the same parameters and FLOPs), 128 tokens a sequence; ALBERT keeps its factorised embeddings and all-shared layer,
  ELECTRA its 128-wide embeddings and a generator at --generator of the discriminator's width;
- the compute: --budget training FLOPs as bertkit counts them (6 x the non-embedding parameters applied per token,
  ALBERT's shared layer once per layer that applies it, ELECTRA's generator included, plus attention), which load
  cannot skew; the schedule is laid over it. The count is the usual estimate, not an exact one: XLNet's second
  (query) stream, the generator's own attention term and sparse heads that run on a few positions only are
  counted as the formula counts them;
- the optimiser: at batch 64 a recipe's paper-scale rate (tuned for batches of 256 to 8,000) is no longer its
  recipe, so every variant trains with one setting, the time-to-quality bench's Trainer's: AdamW at a peak of 1e-3,
  betas (0.9, 0.98), 6% warm-up, linear decay, weight decay 0.01; crammed-bert keeps its own recipe (peak 2e-3,
  40% masking, no dropout, clipping, batch ramp), since its recipe is what it claims, and ELECTRA keeps
  ELECTRA-Small's peak rate, 5e-4 (at 1e-3 its discriminator did not leave the guess "nothing was replaced" in runs
  up to 2e14 FLOPs).

What is each variant's own: the recipe's model family and objectives, and the corpus format they need (BERT:
segment pairs for NSP with static masks, 10 copies of each sequence with its own masks as BERT's
create_pretraining_data makes them; RoBERTa: full sentences, dynamic masks; ALBERT: SOP pairs with static n-gram
masks, 40 copies each packed afresh as ALBERT's create_pretraining_data makes them, and albert-nsp, ALBERT's own
ablation: NSP in place of SOP, on NSP's segment pairs made the same way;
ELECTRA: single segments; SpanBERT: single segments, span masks; XLNet: XLNet's layout; crammed-bert: full
sentences).

Scored: held-out masked-token accuracy where the objective has an MLM head (every variant but ELECTRA's
discriminator and XLNet), on the held-out documents built in the variant's format with token masking (SpanBERT's
with span masks, which its span boundary objective needs: a harder test of the same head), and again on one
yardstick for all (the same 15% token masks through each model's transformers export), apart on the training
text's 100 most frequent tokens and on the rest, which a model on the frequent-token plateau gets none of; the
held-out NSP or SOP accuracy where the variant has that head; and `bertkit evaluate` on the shipped `local`
suite, with the probe and then with full fine-tuning, beside RoBERTa's encoder at the same shape with its initial
weights. XLNet cannot serve extractive QA (bertkit's QA windows
are BERT's layout), so it is scored on the other tasks, and the table gives each average over the tasks every
model has. `--generator 0.25,0.5,1.0` adds ELECTRA's generator-size ablation at the same compute (the recipe's own
1/4 is the "electra" run). ELECTRA's row also gives its discriminator's accuracy beside the guess "nothing was
replaced", and its loss beside the entropy of that guess: a loss below it shows what the discriminator knows of
its task before its accuracy leaves the guess; and on the held-out yardstick, through the transformers exports of
its generator and discriminator, how well it ranks the replaced tokens above the others (AUC, 0.5 for none).

`--pretrain-seeds 0,1,2` pretrains each variant once a seed (train.seed: initial weights, data order, dynamic masks)
and scores the untrained encoder at each seed's initial weights; the report then adds each variant's average over
its runs with the spread between them, which one run's fine-tuning seeds understate (with `--qa`, its QA F1 too).

`--qa 2000,1000` fine-tunes every model that serves extractive QA (all but XLNet, and the untrained encoder) on a
larger QA split as well: 2,000 training and 1,000 dev questions of SQuAD v1.1 dev, whole articles apart, with the
suite's QA settings and seeds. The suite's own QA (300 questions to train on) leaves most encoders this small at
the untrained encoder's F1; SpanBERT's claim is a QA claim, and this is where it is checked.

`--lrs` is full fine-tuning's rate grid, for every task (`--qa`'s too), given to `bertkit evaluate --lrs`; each task
keeps the rate with the best mean over seeds on dev. The default, 5e-5, 1e-4 and 3e-4, is the top of the grid
BERT's small models are fine-tuned over (google-research/bert's miniatures: 3e-5 to 3e-4, Turc et al., 2019); the
local suite's own rate, 5e-5 (1e-4 for NER and QA), is BERT-base's and in the 75 steps of an 800-example task
leaves some of these 4-layer encoders at the majority class. `--lrs ''` keeps the suite's own rates, a third of the
cells.

`--downstream probe` or `--downstream full` scores the suite in that mode alone (the default, `both`, runs the probe
first), and `none` in neither, leaving `--qa`'s split alone to fine-tune: `full` gives the fine-tuned figures without
the probe's cells before them.

`--prepare-only` builds what the other options need (the text split, the tokenizer, each variant's corpora, the suite's
files and `--qa`'s split) and stops. The work folder then trains on another machine, one without the data or a
network (a GPU node), run there with the same options: every input is reused as it is.

`--set VARIANT:KEY=VALUE` sets a recipe field for one variant over the shared settings (for ELECTRA, its
generator-ablation runs too, each keeping its own width), e.g. `--set electra:optim.lr=1e-3`; a finished run in
--work is reused only for the same budget, settings, recipe (as its file resolves) and corpus options. A run keeps a
checkpoint every 250 steps: a bench that was stopped, run again with the same options, goes on from each unfinished
run's last checkpoint (bertkit's resume is exact: the same steps as a run never stopped)."""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import shutil
import sys
import textwrap
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from suite_bench import suite_data, suite_tasks  # noqa: E402
from ttq import (  # noqa: E402
    HELD_OUT_EVERY,
    SHAPE,
    bertkit,
    evaluate_suite,
    evaluation_set,
    overrides,
    paragraphs,
    split,
    untrained,
)
from ttq import score as score_masked  # noqa: E402

# Rounded up from 3.8e14, where ELECTRA at its own rate beat the untrained encoder with the probe; every other
# variant did at 2e14, where every masked LM had left the frequent-token plateau (docs/benchmarks.md).
DEFAULT_BUDGET = "4e14flop"
# Full fine-tuning's rate grid (--lrs): the local suite's one rate a task (5e-5, BERT-base's) left ALBERT at the
# majority class on its 800-example sets, in 75 steps; the top of the grid that BERT's small models are fine-tuned
# over lets each model find its rate (docs/benchmarks.md).
FULL_LRS = "5e-5,1e-4,3e-4"
# --downstream: which modes score the suite, the probe first (the cheaper: its figures reach report.json first).
DOWNSTREAM_MODES = {"none": (), "probe": ("probe",), "full": ("full",), "both": ("probe", "full")}
SHARED_OPTIMISER = {
    "optim.lr": 1e-3, "optim.betas": "[0.9,0.98]", "optim.eps": 1e-6, "optim.weight_decay": 0.01,
    "schedule.warmup_steps": 0, "schedule.warmup_fraction": 0.06, "schedule.decay": "linear",
}  # fmt: skip
BATCH = {"train.batch_size": 64, "train.grad_accum": 1}
# Steps between a run's checkpoints (the two newest kept): an interrupted bench goes on from the last one, losing at
# most this many steps (some 11 minutes a variant on 2 cores).
CHECKPOINT_EVERY = 250
ALBERT_MASKS = ["--mask-strategy", "ngram", "--masking", "static", "--dupe-factor", "40", "--max-predictions", "20"]
# name: (recipe, corpus options, the feed-forward width, whether it has an MLM head to score)
VARIANTS: dict[str, tuple[str, list[str], int, bool]] = {
    # BERT's static masks as its create_pretraining_data makes them: 10 copies of the text, each packed afresh (its
    # own segment pairs and NSP labels) with its own masks, at most 20 predictions in 128 tokens. With one copy the
    # bench's ten passes over the text train on the same masks ten times: its training masked accuracy climbed to
    # 0.23 against 0.13 held out; with copies sharing their pairs NSP learns them by heart (docs/benchmarks.md).
    "bert": ("bert-base", ["--format", "segment-pair", "--masking", "static", "--dupe-factor", "10",
                           "--max-predictions", "20"], 1024, True),
    "roberta": ("roberta-base", ["--format", "full-sentences"], 1024, True),
    # ALBERT's create_pretraining_data the same way: 40 copies, each packed afresh (its own SOP or NSP pairs) with its
    # own n-gram masks, at most 20 predictions. With one packing the bench's 15 passes showed SOP the same pairs 15
    # times: training SOP accuracy reached 0.97 against 0.56 held out (docs/benchmarks.md).
    "albert": ("albert-base", ["--format", "sop", *ALBERT_MASKS], 1024, True),
    "albert-nsp": ("albert-base", ["--format", "segment-pair", *ALBERT_MASKS], 1024, True),
    "electra": ("electra-small", ["--format", "single-segment"], 1024, False),
    "spanbert": ("spanbert-base", ["--format", "single-segment", "--mask-strategy", "span"], 1024, True),
    "xlnet": ("xlnet-base", ["--layout", "xlnet"], 1024, False),
    "crammed-bert": ("crammed-bert", ["--format", "full-sentences"], 680, True),
}
# Recipe fields a variant sets over the shared ones: ALBERT's paper ablation, NSP in place of SOP (on NSP's pairs);
# ELECTRA's own peak rate, ELECTRA-Small's: at the shared 1e-3 its discriminator stays level with the guess
# "nothing was replaced" (docs/benchmarks.md), and `--set electra:optim.lr=1e-3` puts it back on the shared rate.
VARIANT_SETTINGS: dict[str, dict[str, object]] = {
    "albert-nsp": {"objective.sop": 0, "objective.nsp": 1},
    "electra": {"optim.lr": 5e-4},
}
NO_QA = {"xlnet"}
# The local suite's tasks bertkit does not fine-tune XLNet for: QA, and the bi-encoder tasks ([CLS]-first pooling).
NOT_FOR_XLNET = ("qa", "retrieval", "sts")
PAIR_METRICS = ("nsp_acc", "sop_acc")


def texts(text_file: Path | None) -> tuple[list[str], list[str]]:
    if text_file is None:
        return split(paragraphs())
    documents = [d.strip() for d in text_file.read_text("utf-8").split("\n\n") if d.strip()]
    held = documents[::HELD_OUT_EVERY]
    return [d for i, d in enumerate(documents) if i % HELD_OUT_EVERY], held


def text_identity(text_file: Path | None) -> str:
    """The text a work folder is prepared from: the default one, or --text's file by its contents."""
    if text_file is None:
        return "SQuAD v1.1 train paragraphs"
    from bertkit.fsutil import hash_file_into

    digest = hashlib.sha256()
    hash_file_into(digest, text_file)
    return f"a text with sha256 {digest.hexdigest()[:16]}"


def prepare(work: Path, text_file: Path | None, names: list[str]) -> dict[str, Path]:
    """The training and held-out text, the one tokenizer, and each variant's training and held-out corpora."""
    work.mkdir(parents=True, exist_ok=True)
    # A work folder is reused (its text, tokenizer, corpora and finished runs), but only for the same text: --text
    # is known by its contents, not its path, so a folder prepared on one machine (--prepare-only) runs on another.
    source = text_identity(text_file)
    marker = work / "text-source.txt"
    if marker.exists() and marker.read_text("utf-8") != source:
        raise SystemExit(f"{work} holds runs on {marker.read_text('utf-8')}, not {source}: use another --work")
    if not marker.exists():
        marker.write_text(source, "utf-8")
    paths = {"train": work / "train.txt", "held": work / "held.txt", "tok": work / "tok",
             "held-documents": work / "held.jsonl"}  # fmt: skip
    if not paths["train"].exists():
        train, held = texts(text_file)
        paths["train"].write_text("\n\n".join(train) + "\n", "utf-8")
        paths["held"].write_text("\n\n".join(held) + "\n", "utf-8")
    if not paths["held-documents"].exists():  # the same documents, a JSON string a line, for the token-mask yardstick
        documents = [d.strip() for d in paths["held"].read_text("utf-8").split("\n\n") if d.strip()]
        paths["held-documents"].write_text("".join(json.dumps(d) + "\n" for d in documents), "utf-8")
    if not paths["tok"].exists():
        bertkit("tokenize", "train", "--kind", "wordpiece", "--vocab-size", "16000", "--input", paths["train"],
                "--output", paths["tok"])  # fmt: skip
    for name in {*names, "roberta"}:  # RoBERTa's corpus also trains the untrained floor's one step
        options, scored = VARIANTS[name][1], VARIANTS[name][3]
        builds = [("corpus", paths["train"], options)]
        builds += [("held", paths["held"], held_out_options(name))] if scored else []
        for kind, text, extra in builds:
            folder = work / f"{kind}-{name}"
            # A corpus is reused only as it was built: one from other options (an older bench's) is built again.
            built = work / f"{kind}-{name}.options.txt"
            if not (folder.exists() and built.exists() and built.read_text("utf-8") == corpus_identity(extra)):
                bertkit("build-corpus", "-i", text, "-t", paths["tok"], "-o", folder, "--max-seq-len", "128",
                        "--overwrite", *extra)  # fmt: skip
                built.write_text(corpus_identity(extra), "utf-8")
            paths[f"{kind}-{name}"] = folder
    return paths


def corpus_identity(options: list[str]) -> str:
    """What a corpus in a work folder was built as: its options, and for static copies that build-corpus packs each
    copy apart (its own segment pairs, as BERT's script), which the bench's corpora of shared pairs were not."""
    text = " ".join(options)
    return f"{text} (copies packed apart)" if "--dupe-factor" in options else text


# Corpus options that choose the training masks: the held-out documents are masked by token without them.
TRAINING_MASKS = ("--masking", "--mask-strategy", "--dupe-factor", "--max-predictions")


def held_out_options(name: str) -> list[str]:
    """The build options of a variant's held-out documents: its own format, masked by token whatever its training
    masks are, except SpanBERT's: its span boundary objective needs span masks in every batch it scores."""
    options = VARIANTS[name][1]
    if name == "spanbert":
        return list(options)
    pairs = zip(options[::2], options[1::2], strict=True)
    return [item for flag, value in pairs if flag not in TRAINING_MASKS for item in (flag, value)]


def spelled(value: object) -> str:
    """One spelling of a setting's value, so that 5e-4 and 0.0005 are the same run."""
    try:
        return repr(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)


# The parts of a recipe that shape what a run learns; its description, engine, tracking and logging do not.
TRAINING_SECTIONS = {"model", "data", "objective", "optim", "schedule"}


def recipe_identity(recipe: str | Path) -> str:
    """The recipe as its file resolves, the sections that shape training: a run made before the recipe changed (its
    masking, its rate) is not the recipe's run any more."""
    from bertkit.config.recipe import load_recipe

    resolved = load_recipe(str(recipe)).model_dump(mode="json", include=TRAINING_SECTIONS)
    return hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()[:16]


def shared_settings(name: str, generator: float | None = None, seed: int = 0) -> dict[str, object]:
    """The bench's settings of a variant's run that shape what it learns (its shape, batch, optimizer, seed and
    generator width), before the variant's own; threads, logging, evaluation and checkpoints do not shape it."""
    values: dict[str, object] = {**SHAPE, "model.intermediate_size": VARIANTS[name][2], **BATCH,
                                 "train.steps": 1_000_000, "train.seed": seed}  # fmt: skip
    if name != "crammed-bert":
        values.update(SHARED_OPTIMISER)
    else:  # its batch ramp grows the batch a micro-batch at a time: the recipe's 4 micro-batches of 16
        values["train.grad_accum"] = 4
    if generator is not None:
        values["model.generator.hidden_fraction"] = generator
    return values


def reuse_key(name: str, budget: str, settings: dict[str, object], generator: float | None = None,
              seed: int = 0) -> str:  # fmt: skip
    """What a finished run must have been trained with to be reused: the budget, the variant's own settings, the
    bench's shared ones, its recipe as resolved and its corpus's build options."""
    shared = shared_settings(name, generator, seed)
    lines = [budget, *(f"{key}={spelled(value)}" for key, value in sorted(settings.items())),
             *(f"bench {key}={spelled(value)}" for key, value in sorted(shared.items()))]  # fmt: skip
    recipe = VARIANTS[name][0]
    return "\n".join([*lines, f"recipe: {recipe} {recipe_identity(recipe)}",
                      "corpus: " + corpus_identity(VARIANTS[name][1])])  # fmt: skip


def seeded(tag: str, seed: int) -> str:
    """A run's name: seed 0's is the variant's own, another seed's says which."""
    return tag if seed == 0 else f"{tag}-seed{seed}"


def has_checkpoint(run: Path) -> bool:
    """A complete checkpoint to resume from (a half-written one, under its temporary name, is not)."""
    from bertkit.engine.checkpoint import list_checkpoints

    return bool(list_checkpoints(run / "checkpoints"))


def pretrain(
    paths: dict[str, Path], work: Path, name: str, budget: str, generator: float | None = None, threads: int = 2,
    own: dict[str, str] | None = None, seed: int = 0,
) -> dict:
    """`own`: recipe fields set for this variant alone (--set VARIANT:KEY=VALUE), over the shared ones; `seed`: the
    run's seed (train.seed: initial weights, data order, dynamic masks)."""
    recipe, _, _, scored = VARIANTS[name]
    values = {**shared_settings(name, seed=seed), "engine.threads": threads, "train.log_every": 50,
              "train.eval_every_share": 0.1, "train.eval_batches": 8, "train.checkpoint_every": CHECKPOINT_EVERY}
    if scored:
        values["data.eval"] = paths[f"held-{name}"]
    settings_of_its_own = {**VARIANT_SETTINGS.get(name, {}), **(own or {})}
    values.update(settings_of_its_own)
    if generator is not None:  # an ablation run's width is its own, whatever --set gave the "electra" run
        values["model.generator.hidden_fraction"] = generator
    family = name if generator is None else f"{name}-gen{generator:g}"
    tag = seeded(family, seed)
    run, started = work / "runs" / tag, time.time()
    # A finished run is reused only for the same budget, settings of its own, recipe and corpus options; an
    # interrupted one (its key in NAME.started, beside the folder that --overwrite replaces) goes on from its
    # last checkpoint.
    done, spent, begun = run / "summary.json", run / "bench-budget.txt", run.parent / f"{tag}.started"
    settings = reuse_key(name, budget, settings_of_its_own, generator, seed)
    if done.exists() and spent.exists() and spent.read_text("utf-8") == settings:
        summary = json.loads(done.read_text("utf-8"))
    else:
        command = ["pretrain", "-r", recipe, "-c", paths[f"corpus-{name}"], "-o", run, "--budget", budget]
        interrupted = begun.exists() and begun.read_text("utf-8") == settings and has_checkpoint(run)
        if not interrupted:
            # What the folder holds goes before the key is written: a kill in between must not leave another
            # run's checkpoint under this run's key.
            shutil.rmtree(run, ignore_errors=True)
            run.parent.mkdir(parents=True, exist_ok=True)
            begun.write_text(settings, "utf-8")
        summary = bertkit(*command, *(["--resume", "last"] if interrupted else ["--overwrite"]), *overrides(values))
        run.mkdir(parents=True, exist_ok=True)
        spent.write_text(settings, "utf-8")
        begun.unlink(missing_ok=True)
    # The model folder inside this run's folder, not the summary's path to it: a work folder can have moved.
    model_dir = run / Path(summary["model_dir"]).name
    return {"name": tag, "variant": name, "run_of": family, "seed": seed, "own_settings": own or {},
            "settings": settings_of_its_own,
            "model_dir": str(model_dir),
            "steps": summary["steps"], "tokens": summary["tokens"], "flops": summary["flops"],
            "wall_minutes": round((time.time() - started) / 60, 1),
            "eval_mlm_acc": (summary.get("eval") or {}).get("mlm_acc") if scored else None,
            # The sentence-pair head's held-out accuracy (NSP or SOP), where the variant has one.
            **{f"eval_{key}": value for key, value in (summary.get("eval") or {}).items() if key in PAIR_METRICS},
            **discriminator(run)}  # fmt: skip


# A masked LM on the frequent-token plateau predicts only the most frequent tokens and gets none of the others right;
# one that gets at least this share of the others right has left it.
LEFT_PLATEAU = 0.02


def kept_with_run(row: dict, name: str, score: Callable[[], dict]) -> dict:
    """A run's figures kept beside its model as `name`: a reused run is not exported and scored again (a new run
    replaces its folder)."""
    kept = Path(row["model_dir"]).parent / name
    if kept.exists():
        return json.loads(kept.read_text("utf-8"))
    found = score()
    kept.write_text(json.dumps(found), "utf-8")
    return found


def plateau(work: Path, paths: dict[str, Path], rows: list[dict]) -> None:
    """Each MLM variant's held-out masked accuracy on one yardstick (the time-to-quality bench's: the same 15% token
    masks for every variant, on the held-out documents, scored through its transformers export), overall and apart on
    the training text's most frequent tokens and on the rest (`acc_rest`, 0 on the frequent-token plateau); added to
    its row, with `left_plateau`."""
    # Variants with an MLM head, unless --set took their MLM objective away (objective.mlm=0).
    scored = [row for row in rows if VARIANTS[row["variant"]][3] and row.get("eval_mlm_acc") is not None]
    masks = functools.cache(lambda: evaluation_set(paths["held-documents"], paths["tok"], paths["train"]))
    for row in scored:

        def score(row: dict = row) -> dict:
            evaluation, hf = masks(), work / "hf" / row["name"]
            bertkit("export", row["model_dir"], "--to", "hf", "--head", "mlm", "-o", hf, "--overwrite")
            return score_masked(hf, evaluation)

        split_scores = kept_with_run(row, "token-masks.json", score)
        row.update({f"token_masks_{key}": value for key, value in split_scores.items()})
        row["left_plateau"] = split_scores["acc_rest"] >= LEFT_PLATEAU


def ranking(scores, replaced) -> dict[str, float]:
    """How a discriminator's scores (a logit a token) separate the replaced tokens from the others: `auc`, the
    chance that a replaced token scores above an original one (0.5: no ranking; the Mann-Whitney statistic over
    the number of pairs, ties counted half), beside `acc` at the threshold training uses (logit 0) and `guess`, the
    accuracy of "nothing was replaced". The AUC does not depend on the threshold: a discriminator that ranks well
    but is not yet sure enough to call any token replaced stays at the guess's accuracy."""
    import torch

    scores, replaced = scores.double().flatten(), replaced.bool().flatten()
    positives, negatives = int(replaced.sum()), int((~replaced).sum())
    if not positives or not negatives:
        raise ValueError("the ranking needs replaced and original tokens")
    order = scores.argsort()
    ranks = torch.empty_like(scores)
    ranks[order] = torch.arange(1, scores.numel() + 1, dtype=torch.float64)
    for value in scores[order][1:][scores[order][1:] == scores[order][:-1]].unique():  # tied scores: their mean rank
        tied = scores == value
        ranks[tied] = ranks[tied].mean()
    auc = (float(ranks[replaced].sum()) - positives * (positives + 1) / 2) / (positives * negatives)
    return {"auc": round(auc, 4), "acc": round(float(((scores > 0) == replaced).double().mean()), 4),
            "guess": round(negatives / scores.numel(), 4)}


def held_out_detection(generator_dir: Path, discriminator_dir: Path, evaluation: dict, masking: dict[str, float],
                       seed: int = 0, batch: int = 50) -> dict[str, float]:  # fmt: skip
    """ELECTRA's two networks on held-out text through their transformers exports (ElectraForMaskedLM,
    ElectraForPreTraining), corrupted as in training: the generator sees the positions `evaluation` chose masked
    with the run's own split (`masking`: its recipe's `data.masking`, `mask_fraction` [MASK], `random_fraction` a
    random token, the rest as they are), fills every chosen position with a sample from its distribution (a sample
    equal to the original counts as original), and the discriminator scores every token. The generator's
    masked-token accuracy (its best guess) and its samples' share of originals, then `ranking` over every real
    token."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(generator_dir))
    generator = transformers.AutoModelForMaskedLM.from_pretrained(str(generator_dir)).eval()
    detector = transformers.ElectraForPreTraining.from_pretrained(str(discriminator_dir)).eval()
    draw = torch.Generator().manual_seed(seed)
    chosen = evaluation["labels"] != -100
    original = torch.where(chosen, evaluation["labels"], evaluation["input_ids"])
    action = torch.rand(original.shape, generator=draw)
    to_mask = chosen & (action < masking["mask_fraction"])
    to_random = chosen & ~to_mask & (action < masking["mask_fraction"] + masking["random_fraction"])
    random_ids = torch.randint(len(tokenizer.all_special_ids), tokenizer.vocab_size, original.shape, generator=draw)
    shown = torch.where(to_mask, tokenizer.mask_token_id, torch.where(to_random, random_ids, original))
    scores, replaced, best, kept = [], [], [], []
    with torch.no_grad():
        for start in range(0, original.shape[0], batch):
            rows = slice(start, start + batch)
            masked, attention = chosen[rows], evaluation["attention_mask"][rows]
            logits = generator(input_ids=shown[rows], attention_mask=attention).logits[masked]
            sampled = torch.multinomial(logits.float().softmax(-1), 1, generator=draw).squeeze(-1)
            corrupted = original[rows].clone()
            corrupted[masked] = sampled
            real = attention.bool()
            scores.append(detector(input_ids=corrupted, attention_mask=attention).logits[real])
            replaced.append((corrupted != original[rows])[real])
            best.append(logits.argmax(-1) == original[rows][masked])
            kept.append(sampled == original[rows][masked])
    found = ranking(torch.cat(scores), torch.cat(replaced))
    return {"generator_mlm_acc": round(float(torch.cat(best).float().mean()), 4),
            "generator_sampled_original": round(float(torch.cat(kept).float().mean()), 4),
            **{f"rtd_{key}": value for key, value in found.items()}}


def detection(work: Path, paths: dict[str, Path], rows: list[dict]) -> None:
    """Each ELECTRA run's held-out replaced-token detection (`held_out_detection`, on the plateau yardstick's masks
    and documents), added to its row as `heldout_*`; kept beside the model, as the plateau's scores are."""
    import yaml

    masks = functools.cache(lambda: evaluation_set(paths["held-documents"], paths["tok"], paths["train"]))
    for row in (row for row in rows if row["variant"] == "electra"):

        def score(row: dict = row) -> dict:
            evaluation = masks()
            exported = {head: work / "hf" / f"{row['name']}-{head}" for head in ("generator", "pretraining")}
            for head, folder in exported.items():
                bertkit("export", row["model_dir"], "--to", "hf", "--head", head, "-o", folder, "--overwrite")
            # The generator's input masked as it was in training: the run's own recipe, --set overrides included.
            recipe = yaml.safe_load((Path(row["model_dir"]).parent / "recipe.yaml").read_text("utf-8"))
            masking = recipe["data"]["masking"]
            return held_out_detection(exported["generator"], exported["pretraining"], evaluation, masking)

        found = kept_with_run(row, "held-out-detection.json", score)
        row.update({f"heldout_{key}": value for key, value in found.items()})


def discriminator(run: Path) -> dict[str, float]:
    """ELECTRA's replaced-token detection at the end of training (the mean of the last five logged steps): its
    accuracy beside that of guessing "nothing was replaced", and its loss beside the entropy of the best constant
    guess (the replaced fraction at every token). The loss tells more early on: accuracy stays at the guess until
    the discriminator is sure enough to call some token replaced, while a loss below the guess's entropy already
    shows what it knows. Empty for the other objectives."""
    import math

    from bertkit.engine.metrics_log import read_rows

    last = [row for row in read_rows(run / "metrics.jsonl") if "rtd_acc" in row][-5:]
    if not last:
        return {}

    def mean(values: list[float]) -> float:
        return round(sum(values) / len(values), 4)

    def entropy(p: float) -> float:
        return -(p * math.log(p) + (1 - p) * math.log(1 - p)) if 0 < p < 1 else 0.0

    return {key: mean([row[key] for row in last]) for key in ("rtd_acc", "rtd_baseline_acc", "rtd_loss")} | {
        "rtd_guess_entropy": mean([entropy(row["replaced_fraction"]) for row in last])
    }


def evaluate(work: Path, models: dict[str, str], mode: str, data: Path, smoke: bool, jobs: int,
             lrs: tuple[float, ...] = ()) -> dict:
    """`bertkit evaluate` on the local suite (without QA for the models that cannot serve it), full fine-tuning over
    the rate grid `lrs` (empty: the suite's own rates): each model's task scores ({"seeds", "per_seed", "mean", "std",
    "lr"}, at the rate picked on dev), the tasks without a finished cell left out."""
    groups = {"all": [n for n in models if n not in NO_QA], "no-qa": [n for n in models if n in NO_QA]}
    scores: dict = {}
    for group, names in groups.items():
        if not names:
            continue
        run_tasks = suite_tasks(() if group == "all" else NOT_FOR_XLNET)
        report = evaluate_suite([models[n] for n in names], run_tasks, data, work / f"evaluate-{mode}-{group}",
                                mode == "probe", smoke, jobs, lrs if mode == "full" else ())  # fmt: skip
        for n in names:
            tasks = report["models"][models[n]]["tasks"]
            scores[n] = {
                task: {**row["score"], "seeds": row["seeds"], "lr": row["lr"]}
                for task, row in tasks.items()
                if (row.get("score") or {}).get("mean") is not None
            }
    return scores


def qa_scores(work: Path, models: dict[str, str], data: Path, smoke: bool, jobs: int,
              lrs: tuple[float, ...] = ()) -> dict:
    """Full fine-tuning on the QA task alone of the suite in `data` (over the rate grid `lrs`; empty: the task's
    rate), for the models that serve QA: each model's F1 and exact match over the seeds at the rate picked on dev,
    and their mean (the suite's QA score)."""
    names = [n for n in models if n not in NO_QA]
    report = evaluate_suite([models[n] for n in names], ("qa",), data, work / f"evaluate-{data.name}", False, smoke,
                            jobs, lrs)  # fmt: skip
    scores = {}
    for n in names:
        row = report["models"][models[n]]["tasks"]["qa"]
        if row.get("mean") is None:
            continue
        scores[n] = {"seeds": row["seeds"], "lr": row["lr"],
                     "f1": {"mean": row["mean"], "std": row["std"], "per_seed": row["scores"]},
                     "exact_match": row["metrics"]["exact_match"], "score": row["score"]}  # fmt: skip
    return scores


def common_average(scores: dict[str, dict]) -> dict[str, dict]:
    """Each model's average over the tasks every model has: per seed (the mean of its task scores), then mean and
    standard deviation over seeds, as `bertkit evaluate` averages a suite."""
    import statistics

    shared = sorted(set.intersection(*(set(tasks) for tasks in scores.values())))
    out = {}
    for name, tasks in scores.items():
        # Seeds every shared task finished, each task's score at that seed.
        seeds = sorted(set.intersection(*(set(tasks[t]["seeds"]) for t in shared)))
        at = {t: dict(zip(tasks[t]["seeds"], tasks[t]["per_seed"], strict=True)) for t in shared}
        per_seed = [sum(at[t][seed] for t in shared) / len(shared) for seed in seeds]
        spread = statistics.stdev(per_seed) if len(per_seed) > 1 else 0.0
        out[name] = {"mean": round(statistics.mean(per_seed), 2), "std": round(spread, 2), "tasks": shared}
    return out


def is_floor(name: str) -> bool:
    return name == "untrained" or name.startswith("untrained-seed")


def over_pretraining(runs: list[dict], average: dict[str, dict], seeds: list[int]) -> dict[str, dict]:
    """Each variant's suite average (or one task's score: any `{"mean", "std"}` a model) over its pretraining runs
    (one a seed) and the untrained encoder's over its initial weights: the mean and standard deviation of the runs'
    averages, and the largest fine-tuning seed spread of one run beside them. Only for variants with at least two
    finished runs."""
    import statistics

    groups: dict[str, list[str]] = {}
    for row in runs:
        groups.setdefault(row["run_of"], []).append(row["name"])
    groups["untrained"] = [seeded("untrained", seed) for seed in seeds]
    out = {}
    for family, names in groups.items():
        finished = [average[n] for n in names if n in average]
        if len(finished) > 1:
            means = [row["mean"] for row in finished]
            out[family] = {"mean": round(statistics.mean(means), 2), "std": round(statistics.stdev(means), 2),
                           "runs": len(finished), "seed_std": max(row["std"] for row in finished)}  # fmt: skip
    return out


def pooled_cell(row: dict) -> str:
    """One variant's figure over its pretraining runs, as both pooled tables write it: mean ± spread between runs,
    the largest seed spread of one run in brackets."""
    return f"{row['mean']:.2f} ± {row['std']:.2f} ({row['seed_std']:.2f})"


def markdown(report: dict) -> str:
    rates = ", ".join(f"{lr:g}" for lr in report.get("lrs") or []) or "the suite's own"
    lines = [f"budget {report['budget']}; tokenizer WordPiece 16,000; shape 4 x 256; full fine-tuning's rates: {rates}",
             ""]
    modes = [m for m in ("probe", "full") if m in report["downstream"]]
    head = "| variant | steps | tokens | masked acc | token masks: frequent / rest | NSP or SOP acc | "
    head += "RTD acc (nothing-replaced) | RTD loss (guess's entropy) | held-out RTD AUC (acc, guess) | "
    head += "".join(f"{m} average | " for m in modes)
    lines += [head.rstrip(), "|" + "---|" * (9 + len(modes))]
    # The floors (the untrained encoder at each pretraining seed) are downstream rows.
    floors = [{"name": n} for n in (report["downstream"][modes[0]]["average"] if modes else {}) if is_floor(n)]
    for row in report["runs"] + floors:
        name = row["name"]
        label = name + "".join(f", {key}={value}" for key, value in (row.get("own_settings") or {}).items())
        pair = [f"{key[:3].upper()} {row[f'eval_{key}']:.4f}" for key in PAIR_METRICS if f"eval_{key}" in row]
        cells = [label, str(row.get("steps", "")), f"{row.get('tokens', 0):,}" if "tokens" in row else "",
                 f"{row['eval_mlm_acc']:.4f}" if row.get("eval_mlm_acc") is not None else "",
                 f"{row['token_masks_acc_frequent']:.4f} / {row['token_masks_acc_rest']:.4f}"
                 if "token_masks_acc_rest" in row else "", " ".join(pair),
                 f"{row['rtd_acc']:.4f} ({row['rtd_baseline_acc']:.4f})" if "rtd_acc" in row else "",
                 f"{row['rtd_loss']:.4f} ({row['rtd_guess_entropy']:.4f})" if "rtd_loss" in row else "",
                 f"{row['heldout_rtd_auc']:.4f} ({row['heldout_rtd_acc']:.4f}, {row['heldout_rtd_guess']:.4f})"
                 if "heldout_rtd_auc" in row else ""]  # fmt: skip
        for mode in modes:
            average = report["downstream"][mode]["average"].get(name)
            cells.append(f"{average['mean']:.2f} ± {average['std']:.2f}" if average else "")
        lines.append("| " + " | ".join(cells) + " |")
    pooled = {mode: report["downstream"][mode].get("pretraining") or {} for mode in modes}
    if any(pooled.values()):
        lines += ["", "Over pretraining runs (mean ± standard deviation of the runs' averages; the largest seed spread "
                  "of one run in brackets):", "", "| variant | runs | " + " | ".join(f"{m} average" for m in modes)
                  + " |", "|" + "---|" * (2 + len(modes))]  # fmt: skip
        for family in next(p for p in pooled.values() if p):
            cells = [family, str(next(p[family]["runs"] for p in pooled.values() if family in p))]
            for mode in modes:
                row = pooled[mode].get(family)
                cells.append(pooled_cell(row) if row else "")
            lines.append("| " + " | ".join(cells) + " |")
    if report.get("qa"):
        qa = report["qa"]
        lines += ["", f"Extractive QA fine-tuned on {qa['train']:,} SQuAD questions, scored on {qa['dev']:,} (mean ± "
                  "standard deviation over seeds):", "", "| model | F1 | exact match | score (mean of the two) |",
                  "|---|---|---|---|"]  # fmt: skip
        for name, row in qa["scores"].items():
            f1, score = row["f1"], row["score"]
            lines.append(f"| {name} | {f1['mean']:.2f} ± {f1['std']:.2f} | {row['exact_match']:.2f} | "
                         f"{score['mean']:.2f} ± {score['std']:.2f} |")  # fmt: skip
        if qa.get("pretraining"):
            lines += ["", "QA F1 over pretraining runs (mean ± standard deviation of the runs' F1; the largest seed "
                      "spread of one run in brackets):", "", "| variant | runs | F1 |", "|---|---|---|"]  # fmt: skip
            for family, row in qa["pretraining"].items():
                lines.append(f"| {family} | {row['runs']} | {pooled_cell(row)} |")
    return "\n".join(lines) + "\n"


class _HelpFormatter(argparse.HelpFormatter):
    """Wraps help at spaces only, so names like albert-nsp stay whole."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(text, width, break_on_hyphens=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[:2]), formatter_class=_HelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("runs/variants"),
                        help="folder for the text, tokenizer, corpora, runs and report; its finished runs are reused "
                        "(default: %(default)s)")
    parser.add_argument("--text", type=Path, help="your own text (default: the time-to-quality bench's)")
    parser.add_argument("--budget", default=DEFAULT_BUDGET,
                        help="training FLOPs for each variant, or a time (default: %(default)s)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"which, comma-separated (default: {', '.join(VARIANTS)})")
    parser.add_argument("--generator", default="", help="ELECTRA generator widths to compare, e.g. 0.25,0.5,1.0")
    parser.add_argument("--downstream", choices=list(DOWNSTREAM_MODES), default="both",
                        help="score the suite with the probe, full fine-tuning, both (default) or none")
    parser.add_argument("--qa", default="", metavar="TRAIN,DEV",
                        help="also fine-tune on a larger QA split: TRAIN and DEV SQuAD questions, e.g. 2000,1000")
    parser.add_argument("--smoke", action="store_true", help="a suite of 40/20 examples a task and one seed")
    # A FLOP budget is the same compute however many runs share the machine, so runs can go side by side (on a GPU,
    # several small runs fill it better than one); a time budget wants them one at a time.
    parser.add_argument("--parallel", type=int, default=1, help="pretraining runs at once")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of each pretraining run")
    parser.add_argument("--jobs", type=int, default=2, help="suite cells at once (bertkit evaluate --jobs)")
    parser.add_argument("--pretrain-seeds", default="0", metavar="SEEDS",
                        help="pretraining runs of each variant, one a seed (train.seed), e.g. 0,1,2: the table then "
                             "gives each variant's spread over its runs, the untrained encoder's over its initial "
                             "weights")  # fmt: skip
    parser.add_argument("--lrs", default=FULL_LRS, metavar="RATES",
                        help="full fine-tuning's rate grid for every task, the best on dev kept per task (default: "
                             f"{FULL_LRS}; '' for the suite's own rates)")  # fmt: skip
    parser.add_argument("--set", dest="own", action="append", default=[], metavar="VARIANT:KEY=VALUE",
                        help="a recipe field for one variant over the shared settings, e.g. electra:optim.lr=1e-3")
    parser.add_argument("--prepare-only", action="store_true",
                        help="build the text, tokenizer, corpora and suite files that these options need, then stop: "
                             "prepare on one machine (say, a CPU node that has the data) and train on another with "
                             "the work folder copied over and the same options")  # fmt: skip
    args = parser.parse_args()
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    if args.text is not None and not args.text.is_file():
        parser.error(f"--text {args.text}: no such file")
    from bertkit.config.recipe import load_recipe
    from bertkit.config.schema import parse_budget

    try:
        budget_kind = parse_budget(args.budget)[0]
    except ValueError as err:
        parser.error(str(err))
    if args.parallel > 1 and budget_kind != "flops":
        parser.error("--parallel needs a FLOP budget (e.g. 2e14flop): runs side by side share the machine's time")
    if args.generator and "electra" not in names:
        parser.error("--generator compares ELECTRA's generator widths: keep electra in --variants")
    own: dict[str, dict[str, str]] = {}
    for item in args.own:
        variant, _, setting = item.partition(":")
        key, equals, value = setting.partition("=")
        if variant not in names or not key or not equals:
            parser.error(f"--set {item!r}: write VARIANT:KEY=VALUE with VARIANT one of {names}")
        own.setdefault(variant, {})[key] = value
    try:
        seeds = list(dict.fromkeys(int(x) for x in args.pretrain_seeds.split(",") if x.strip()))
    except ValueError:
        parser.error(f"--pretrain-seeds {args.pretrain_seeds!r}: write whole numbers separated by commas, e.g. 0,1,2")
    if not seeds or min(seeds) < 0:
        parser.error(f"--pretrain-seeds {args.pretrain_seeds!r}: give at least one seed, none negative, e.g. 0,1,2")
    qa_sizes = None
    if args.qa:
        try:
            qa_sizes = tuple(int(x) for x in args.qa.split(","))
        except ValueError:
            qa_sizes = ()
        if len(qa_sizes) != 2 or min(qa_sizes) < 1:
            parser.error(f"--qa {args.qa!r}: write the training and dev questions as two whole numbers, e.g. 2000,1000")
        if all(n in NO_QA for n in names):
            parser.error(f"--qa: none of {names} serves extractive QA")
    from bertkit.config.suite import parse_rates
    from bertkit.errors import BertkitError
    from bertkit.fsutil import write_json_atomic

    try:  # the rates as `bertkit evaluate --lrs` checks them; '' keeps the suite's own
        lrs = tuple(parse_rates(args.lrs)) if args.lrs.strip() else ()
    except BertkitError:
        parser.error(f"--lrs {args.lrs!r}: write positive learning rates, each once, separated by commas, e.g. "
                     f"{FULL_LRS}")

    for variant, settings in own.items():  # an unknown key or a bad value, before hours of other runs
        try:
            load_recipe(VARIANTS[variant][0], [f"{key}={value}" for key, value in settings.items()])
        except BertkitError as err:
            parser.error(f"--set {variant}:...: {err}")

    started = time.time()
    paths = prepare(args.work, args.text, names)
    modes = DOWNSTREAM_MODES[args.downstream]
    if args.prepare_only:
        prepared = {key: str(path) for key, path in paths.items()}
        if modes:
            prepared["suite"] = str(suite_data(args.work, args.smoke))
        if qa_sizes:
            prepared["qa-suite"] = str(suite_data(args.work, args.smoke, qa_sizes))
        print(json.dumps({"prepared": prepared}))
        return
    families = [(name, None) for name in names]
    # The recipe's own generator width is the "electra" run already: the ablation adds the other widths.
    default = load_recipe(VARIANTS["electra"][0]).model.generator.hidden_fraction if "electra" in names else None
    widths = dict.fromkeys(float(x) for x in args.generator.split(",") if x.strip())  # each width once, in order
    families += [("electra", width) for width in widths if width != default]
    plan = [(name, width, seed) for seed in seeds for name, width in families]
    with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
        runs = list(pool.map(
            lambda job: pretrain(paths, args.work, job[0], args.budget, job[1], args.threads, own.get(job[0]), job[2]),
            plan,
        ))
    report: dict = {"budget": args.budget, "lrs": list(lrs), "runs": runs, "downstream": {}}
    # The pretraining figures first, so a failure in the scoring loses nothing of the hours before it.
    write_json_atomic(args.work / "report.json", report)
    plateau(args.work, paths, runs)
    detection(args.work, paths, runs)
    write_json_atomic(args.work / "report.json", report)
    if modes or qa_sizes:
        # RoBERTa's encoder (BERT's layer, no segments) at the same shape and batch with its initial weights.
        models = {run["name"]: run["model_dir"] for run in runs}
        for seed in seeds:  # the floor at each pretraining seed's initial weights
            floor = seeded("untrained", seed)
            models[floor] = str(untrained(paths["corpus-roberta"], args.work / "runs" / floor, "roberta-base",
                                          {**BATCH, "train.seed": seed}))  # fmt: skip
        NO_QA.update(n for n in models if n.startswith("xlnet"))
    if modes:
        data = suite_data(args.work, args.smoke)
        for mode in modes:
            scores = evaluate(args.work, models, mode, data, args.smoke, args.jobs, lrs)
            average = common_average(scores)
            report["downstream"][mode] = {"scores": scores, "average": average,
                                          "pretraining": over_pretraining(runs, average, seeds)}  # fmt: skip
            write_json_atomic(args.work / "report.json", report)  # each mode as it ends
    if qa_sizes:
        qa_suite = suite_data(args.work, args.smoke, qa_sizes)
        scores = qa_scores(args.work, models, qa_suite, args.smoke, args.jobs, lrs)
        f1 = {name: row["f1"] for name, row in scores.items()}
        report["qa"] = {"train": qa_sizes[0], "dev": qa_sizes[1], "scores": scores,
                        "pretraining": over_pretraining(runs, f1, seeds)}  # fmt: skip
    report["wall_minutes"] = round((time.time() - started) / 60, 1)
    write_json_atomic(args.work / "report.json", report)
    (args.work / "report.md").write_text(markdown(report), "utf-8")
    print(markdown(report))
    print(json.dumps(report))


if __name__ == "__main__":
    main()

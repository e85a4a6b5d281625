"""Fine-tuning accuracy parity: `bertkit finetune` on the real all-MiniLM-L6-v2 BERT against a plain PyTorch
fine-tune of `transformers.AutoModel` with the same recipe, on the same real reviews.

Data: Rotten Tomatoes critic snippets (bertkit.data.samples.write_sample_data, seed 0): the first 2,000 of
2,500 shuffled reviews train, the last 500 are held out; sized so both runs fit in about 15 minutes on 2 busy
CPU cores. Recipe for both: mean pooling, a dropout-0.1 linear head (normal(0.02) weights, zero bias), max
length 64, batch 32, 2 epochs (126 steps), AdamW lr 5e-5 (betas 0.9/0.999, eps 1e-6, weight decay 0.01 except
on biases and LayerNorm weights), linear warm-up over the first 10% of the steps then linear decay to 0,
gradient clipping at 1.0, one thread. Both report accuracy after the last epoch (bertkit's `eval_last`; its
`model/` keeps the best epoch's weights, also printed). The two runs differ only in the shuffling and the
dropout masks drawn, so they must agree within 3 points."""

from __future__ import annotations

import csv
import math
import time
from pathlib import Path

import pytest
import torch
from cli_helpers import run_json

TRAIN, EVAL, EPOCHS, BATCH, LR, MAX_LEN, SEED = 2000, 500, 2, 32, 5e-5, 64, 0
STEPS = EPOCHS * math.ceil(TRAIN / BATCH)
WARMUP = STEPS // 10


def _split(folder: Path) -> tuple[Path, Path]:
    from bertkit.data.samples import write_sample_data

    sentiment = write_sample_data(folder / "samples", max_reviews=TRAIN + EVAL, seed=SEED)["sentiment"]
    with open(sentiment, encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == TRAIN + EVAL
    paths = []
    for name, part in (("train.csv", rows[:TRAIN]), ("eval.csv", rows[TRAIN:])):
        with open(folder / name, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text", "label"])
            writer.writerows((r["text"], r["label"]) for r in part)
        paths.append(folder / name)
    return paths[0], paths[1]


def _read(path: Path) -> tuple[list[str], list[str]]:
    with open(path, encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return [r["text"] for r in rows], [r["label"] for r in rows]


def plain_transformers_finetune(model_dir: Path, train: Path, evaluate: Path) -> float:
    """The reference: AutoModel + mean pooling + dropout + linear head, AdamW, linear warm-up/decay."""
    from transformers import AutoModel, AutoTokenizer, get_linear_schedule_with_warmup

    texts, labels = _read(train)
    eval_texts, eval_labels = _read(evaluate)
    names = sorted(set(labels))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    torch.manual_seed(SEED)
    encoder = AutoModel.from_pretrained(model_dir)
    head = torch.nn.Linear(encoder.config.hidden_size, len(names))
    torch.nn.init.normal_(head.weight, std=0.02)
    torch.nn.init.zeros_(head.bias)
    dropout = torch.nn.Dropout(0.1)
    params = [*encoder.named_parameters(), *(("head." + n, p) for n, p in head.named_parameters())]
    groups = [
        {"params": [p for _, p in params if p.ndim >= 2], "weight_decay": 0.01},
        {"params": [p for _, p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.999), eps=1e-6)
    scheduler = get_linear_schedule_with_warmup(optimizer, WARMUP, STEPS)

    def pooled(batch_texts: list[str]) -> torch.Tensor:
        enc = tokenizer(batch_texts, padding=True, truncation=True, max_length=MAX_LEN, return_tensors="pt")
        hidden = encoder(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)

    targets = torch.tensor([names.index(label) for label in labels])
    generator = torch.Generator().manual_seed(SEED)
    encoder.train()
    for _ in range(EPOCHS):
        order = torch.randperm(TRAIN, generator=generator).tolist()
        for start in range(0, TRAIN, BATCH):
            rows = order[start : start + BATCH]
            logits = head(dropout(pooled([texts[i] for i in rows])))
            loss = torch.nn.functional.cross_entropy(logits, targets[rows])
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for _, p in params], 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
    encoder.eval()
    right = 0
    with torch.no_grad():
        for start in range(0, len(eval_texts), 64):
            predicted = head(pooled(eval_texts[start : start + 64])).argmax(-1).tolist()
            right += sum(names[p] == gold for p, gold in zip(predicted, eval_labels[start : start + 64], strict=True))
    return right / len(eval_texts)


@pytest.mark.slow
def test_minilm_sentiment_matches_transformers(tmp_path: Path, minilm_dir: Path, capsys) -> None:
    pytest.importorskip("transformers")
    train, evaluate = _split(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        load_before = _load()
        start = time.perf_counter()
        out = run_json(
            "finetune", "-m", str(minilm_dir), "--train", str(train), "--eval", str(evaluate),
            "-o", str(tmp_path / "run"), "--pool", "mean",
            "--set", f"train.epochs={EPOCHS}", "--set", f"train.batch_size={BATCH}", "--set", f"train.seed={SEED}",
            "--set", f"optim.lr={LR}", "--set", "optim.weight_decay=0.01", "--set", "optim.grad_clip=1.0",
            "--set", f"schedule.warmup_steps={WARMUP}", "--set", "schedule.decay=linear",
            "--set", f"task.max_seq_len={MAX_LEN}", "--set", "task.classifier_dropout=0.1",
            "--set", "engine.threads=1",
        )  # fmt: skip
        ours_seconds = time.perf_counter() - start
        start = time.perf_counter()
        theirs = plain_transformers_finetune(minilm_dir, train, evaluate)
        theirs_seconds = time.perf_counter() - start
        load_after = _load()
    finally:
        torch.set_num_threads(threads)
    assert out["steps"] == STEPS and out["train_examples"] == TRAIN and out["eval_examples"] == EVAL
    ours = out["eval_last"]["accuracy"]
    with capsys.disabled():
        print(
            f"\n[slow] MiniLM-L6 sentiment, {TRAIN} train / {EVAL} held-out Rotten Tomatoes reviews, mean pooling, "
            f"{EPOCHS} epochs, lr {LR}, max length {MAX_LEN}, batch {BATCH}, warm-up {WARMUP}/{STEPS} steps, 1 thread "
            f"(load average {load_before} before, {load_after} after)\n"
            f"[slow]   bertkit finetune     : accuracy {ours:.4f} after the last epoch "
            f"(best epoch {out['eval']['accuracy']:.4f})   {ours_seconds:6.0f} s\n"
            f"[slow]   plain transformers   : accuracy {theirs:.4f}   {theirs_seconds:6.0f} s\n"
            f"[slow]   difference {ours - theirs:+.4f} (allowed 0.03)"
        )
    assert abs(ours - theirs) <= 0.03


def _load() -> str:
    import os

    return "/".join(f"{x:.1f}" for x in os.getloadavg())

"""Inference throughput: bertkit `embed` and `predict` (library calls) next to plain `transformers`, on the real
all-MiniLM-L6-v2 BERT and the same 1,000 real Rotten Tomatoes reviews, same batch size (32), same maximum
length (128), same number of threads (THREADS, set for both).

- embed: bertkit `embed` (mean pooling, last layer) against `AutoModel` + mean pooling over the attention mask
  in a plain batched loop over the texts in input order (tokenizing each batch), and against
  `transformers.pipeline("feature-extraction")` on the local directory, mean-pooled per text.
- predict: MiniLM fine-tuned for a few steps on other reviews (pooled [CLS], so it exports), bertkit `predict`
  on a JSON lines file against `transformers.pipeline("text-classification")` on its HF export
  (`bertkit export --to hf --head classifier`).

bertkit's figures are the whole library call (model loading, reading the input, writing the output) and, in
brackets, its own inference loop (tokenized up front, batches sorted by length so they pad little); the
plain loop and the pipelines are timed around inference only (the model is loaded before the clock starts).
The only assertions are that both sides give the same embeddings (within 1e-4) and the same labels and
probabilities (within 1e-4): no speed assertion."""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import run_json

N, BATCH, MAX_LEN, THREADS = 1000, 32, 128, 1


@pytest.fixture(scope="module")
def reviews(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[dict[str, str]]]:
    """1,000 reviews to run inference on, and 400 others to fine-tune the classifier on."""
    from bertkit.data.samples import write_sample_data

    path = write_sample_data(tmp_path_factory.mktemp("reviews"), max_reviews=N + 400, seed=1)["sentiment"]
    with open(path, encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return [r["text"] for r in rows[:N]], rows[N:]


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield THREADS
    torch.set_num_threads(before)


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


@pytest.mark.bench
def test_embed_throughput_vs_transformers(tmp_path: Path, minilm_dir: Path, reviews, threads, capsys) -> None:
    transformers = pytest.importorskip("transformers")
    from bertkit.pipelines.embed import embed

    texts, _ = reviews
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    load = _load()
    start = time.perf_counter()
    summary = embed(minilm_dir, source, tmp_path / "emb.npy", max_seq_len=MAX_LEN, batch_size=BATCH, quiet=True)
    ours_seconds = time.perf_counter() - start
    ours = np.load(tmp_path / "emb.npy")
    assert summary["rows"] == N == ours.shape[0]

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    model = transformers.AutoModel.from_pretrained(minilm_dir).eval()
    plain = np.empty_like(ours)
    start = time.perf_counter()
    with torch.no_grad():
        for first in range(0, N, BATCH):
            enc = tokenizer(texts[first : first + BATCH], padding=True, truncation=True, max_length=MAX_LEN,
                            return_tensors="pt")  # fmt: skip
            hidden = model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            plain[first : first + BATCH] = ((hidden * mask).sum(1) / mask.sum(1)).numpy()
    plain_seconds = time.perf_counter() - start

    lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=MAX_LEN)["input_ids"]]
    piped = None
    try:
        extractor = transformers.pipeline("feature-extraction", model=str(minilm_dir), tokenizer=str(minilm_dir))
    except (OSError, ValueError) as err:  # reported, not failed: the plain loop is the reference
        pipe_line = f"[bench]   transformers pipeline('feature-extraction'): did not load ({err})"
    else:
        start = time.perf_counter()
        outputs = extractor(texts, batch_size=BATCH, return_tensors=True,
                            tokenize_kwargs={"truncation": True, "max_length": MAX_LEN})  # fmt: skip
        # Each text's token states (a padded batch may leave padding rows behind them: keep the real tokens).
        piped = np.stack([out[0, :n].mean(0).numpy() for out, n in zip(outputs, lengths, strict=True)])
        pipe_seconds = time.perf_counter() - start
        pipe_line = f"[bench]   transformers pipeline('feature-extraction'): {N / pipe_seconds:7.1f} texts/s"

    with capsys.disabled():
        print(
            f"\n[bench] embed, all-MiniLM-L6-v2 mean pooling, {N} real reviews, batch {BATCH}, max length {MAX_LEN}, "
            f"CPU fp32, {threads} thread(s), load average {load}\n"
            f"[bench]   bertkit embed (library call)        : {N / ours_seconds:7.1f} texts/s "
            f"(inference loop {summary['texts_per_s']:.1f})\n"
            f"[bench]   AutoModel + mean pooling, plain loop : {N / plain_seconds:7.1f} texts/s\n"
            f"{pipe_line}\n"
            f"[bench]   ratio bertkit / plain loop: {plain_seconds / ours_seconds:.2f}x "
            f"(inference loop {summary['texts_per_s'] * plain_seconds / N:.2f}x)"
        )
    np.testing.assert_allclose(ours, plain, atol=1e-4)
    if piped is not None:
        np.testing.assert_allclose(ours, piped, atol=1e-4)


@pytest.mark.bench
def test_predict_throughput_vs_transformers_pipeline(
    tmp_path: Path, minilm_dir: Path, reviews, threads, capsys
) -> None:
    transformers = pytest.importorskip("transformers")
    from bertkit.pipelines.predict.run import predict

    texts, train_rows = reviews
    train = tmp_path / "train.csv"
    with open(train, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows((r["text"], r["label"]) for r in train_rows)
    run_json(
        "finetune", "-m", str(minilm_dir), "--train", str(train), "-o", str(tmp_path / "run"),
        "--set", "train.steps=12", "--set", "train.batch_size=32", "--set", f"task.max_seq_len={MAX_LEN}",
        "--set", "schedule.warmup_steps=2", "--set", f"engine.threads={THREADS}",
    )  # fmt: skip
    run_json("export", str(tmp_path / "run"), "--to", "hf", "--head", "classifier", "--output", str(tmp_path / "hf"))
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    load = _load()
    start = time.perf_counter()
    summary = predict(tmp_path / "run", source, tmp_path / "preds.jsonl", batch_size=BATCH, max_seq_len=MAX_LEN,
                      quiet=True)  # fmt: skip
    ours_seconds = time.perf_counter() - start
    ours = [json.loads(line) for line in (tmp_path / "preds.jsonl").read_text("utf-8").splitlines()]
    assert summary["rows"] == N == len(ours)

    hf_dir = str(tmp_path / "hf")
    classifier = transformers.pipeline("text-classification", model=hf_dir, tokenizer=hf_dir)
    start = time.perf_counter()
    theirs = classifier(texts, batch_size=BATCH, top_k=None, truncation=True, max_length=MAX_LEN)
    pipe_seconds = time.perf_counter() - start

    with capsys.disabled():
        print(
            f"\n[bench] predict, all-MiniLM-L6-v2 classifier (pooled [CLS]), {N} real reviews, batch {BATCH}, "
            f"max length {MAX_LEN}, CPU fp32, {threads} thread(s), load average {load}\n"
            f"[bench]   bertkit predict (library call)        : {N / ours_seconds:7.1f} rows/s "
            f"(its summary: {summary['rows_per_s']} rows/s)\n"
            f"[bench]   transformers pipeline('text-classification') on the HF export: {N / pipe_seconds:7.1f} rows/s\n"
            f"[bench]   ratio bertkit / pipeline: {pipe_seconds / ours_seconds:.2f}x"
        )
    for record, scores in zip(ours, theirs, strict=True):
        probabilities = {s["label"]: s["score"] for s in scores}
        assert probabilities.keys() == record["probabilities"].keys()
        for name, value in probabilities.items():
            assert record["probabilities"][name] == pytest.approx(value, abs=1e-4)
        top = max(probabilities.values())
        if top - min(probabilities.values()) > 1e-3:  # a near tie may flip either way
            assert record["label"] == max(probabilities, key=probabilities.get)

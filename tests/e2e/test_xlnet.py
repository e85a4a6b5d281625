"""XLNet end to end through the CLI on real text (Python's documentation): a SentencePiece tokenizer, a
corpus in XLNet's layout, `xlnet-tiny` pretrained with permutation LM (the loss falls clearly), the export
loading into transformers' XLNetLMHeadModel and computing what bertkit computes, fine-tuning on real
Rotten Tomatoes reviews (pooled at <cls>), and the one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import run_error, run_json

FAST = ["--set", "engine.threads=1", "--set", "train.eval_batches=1"]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("xlnet-e2e")


@pytest.fixture(scope="module")
def xlnet_run(work: Path, xlnet_corpus: Path) -> tuple[Path, dict]:
    run = work / "run"
    summary = run_json("pretrain", "--recipe", "xlnet-tiny", "--corpus", str(xlnet_corpus), "--output", str(run),
                       "--set", "train.steps=40", "--set", "train.log_every=5", *FAST)  # fmt: skip
    return run, summary


def test_pretraining_drives_the_plm_loss_down(xlnet_run: tuple[Path, dict]) -> None:
    run, summary = xlnet_run
    assert summary["family"] == "xlnet" and summary["objectives"] == ["plm"] and summary["steps"] == 40
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    losses = [row["loss"] for row in rows if "loss" in row]
    assert len(losses) >= 8
    # From about ln(2000) = 7.6 (uniform over the vocabulary) clearly down.
    assert losses[0] > 7.0 and losses[-1] < losses[0] - 0.8, losses
    assert summary["eval"]["plm_loss"] < losses[0] - 0.8 and 0.0 < summary["eval"]["plm_acc"] < 1.0


def test_export_loads_into_xlnet_lm_head_model_and_agrees(
    xlnet_run: tuple[Path, dict], xlnet_corpus: Path, tmp_path: Path
) -> None:
    transformers = pytest.importorskip("transformers")
    from bertkit.corpus.loader import PLMBatches
    from bertkit.corpus.permutation import PermutationSpec
    from bertkit.corpus.shards import Corpus
    from bertkit.modelio.modeldir import load_model_dir
    from bertkit.models.pretraining import build_pretraining_model

    run, _ = xlnet_run
    out = run_json("export", str(run), "--to", "hf", "--output", str(tmp_path / "hf"))
    assert out["architecture"] == "XLNetLMHeadModel" and out["model_type"] == "xlnet"
    hf, info = transformers.XLNetLMHeadModel.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    _, meta, cfg, weights, tok = load_model_dir(run)
    ours = build_pretraining_model(cfg, None).eval()
    ours.load_state_dict(weights)
    corpus = Corpus(xlnet_corpus)
    batch = PLMBatches(corpus, np.arange(16), 4, PermutationSpec(6, 5, tok.special_ids), tok.pad_id, 0).next_batch()
    inputs = {key: batch[key] for key in ("input_ids", "attention_mask", "token_type_ids", "perm_mask",
                                          "target_mapping")}  # fmt: skip
    with torch.no_grad():
        # transformers takes float/int masks where bertkit's loader serves booleans.
        as_numbers = {"perm_mask": inputs["perm_mask"].float(), "attention_mask": inputs["attention_mask"].long()}
        expected = hf.eval()(**{**inputs, **as_numbers}).logits
        got = ours(**inputs)["plm_logits"]
    assert (got - expected).abs().max().item() <= 1e-4
    # The tokenizer travels with it: transformers encodes as bertkit does.
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    text = "Assert statements are a convenient way to insert debugging assertions."
    assert hf_tok(text, add_special_tokens=False)["input_ids"] == tok.encode(text, add_special_tokens=False)


def test_finetune_on_real_reviews_pools_cls(xlnet_run: tuple[Path, dict], sentiment_csv: Path, tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    run, _ = xlnet_run
    out = run_json("finetune", "--model", str(run), "--train", str(sentiment_csv), "--recipe", "finetune-tiny",
                   "--output", str(tmp_path / "ft"), "--set", "train.steps=20", "--set", "train.log_every=5",
                   "--set", "task.max_seq_len=64", "--set", "engine.threads=1")  # fmt: skip
    assert out["labels"] == ["negative", "positive"] and out["steps"] == 20
    assert out["eval_examples"] == 60 and 0.0 <= out["eval"]["accuracy"] <= 1.0
    assert np.isfinite(out["loss_last"])
    saved = load_file(str(tmp_path / "ft" / "model" / "model.safetensors"))
    pretrained = load_file(str(run / "model" / "model.safetensors"))
    # A fresh summary layer on <cls> (XLNetForSequenceClassification's), trained with the encoder.
    assert "encoder.pooler.dense.weight" in saved and "encoder.pooler.dense.weight" not in pretrained
    key = "encoder.layers.0.attention.q"
    assert not np.array_equal(saved[key], pretrained[key])
    meta = json.loads((tmp_path / "ft" / "model" / "bertkit_model.json").read_text())
    assert meta["model"]["family"] == "xlnet" and meta["model"]["pooler"] is True
    # The fine-tuned encoder exports as XLNetModel; the LM head is gone, which the error says.
    base = run_json("export", str(tmp_path / "ft"), "--to", "hf", "--output", str(tmp_path / "base"), "--head", "base")
    assert base["architecture"] == "XLNetModel"
    line = run_error("export", str(tmp_path / "ft"), "--to", "hf", "--output", str(tmp_path / "lm"), "--head",
                     "pretraining")  # fmt: skip
    assert "plm_head.bias" in line and "--head base" in line
    # A fine-tuned run exports its classifier by default (--head auto); XLNet's HF classifier is refused.
    line = run_error("export", str(tmp_path / "ft"), "--to", "hf", "--output", str(tmp_path / "cls"))
    assert "XLNetForSequenceClassification" in line and "--head base" in line
    # `bertkit embed` reads the fine-tuned XLNet too: <cls> (the last token) or the mean.
    texts = tmp_path / "texts.txt"
    texts.write_text("A gripping, beautifully shot film.\nDull.\n", encoding="utf-8")
    for pool in ("cls", "mean"):
        emb = run_json("embed", "--model", str(tmp_path / "ft"), "--input", str(texts), "--output",
                       str(tmp_path / f"{pool}.npy"), "--pool", pool)  # fmt: skip
        vectors = np.load(tmp_path / f"{pool}.npy")
        assert emb["rows"] == 2 and emb["dim"] == 128
        assert vectors.shape == (2, 128) and np.isfinite(vectors).all()


def test_init_from_an_xlnet_run_continues_it(xlnet_run: tuple[Path, dict], xlnet_corpus: Path, tmp_path: Path) -> None:
    run, _ = xlnet_run
    out = run_json("pretrain", "--recipe", "xlnet-tiny", "--corpus", str(xlnet_corpus), "--output",
                   str(tmp_path / "more"), "--init-from", str(run), "--set", "train.steps=2", *FAST)  # fmt: skip
    assert out["init_from"] == str(run) and out["steps"] == 2
    # Two more steps from the trained weights start where the first run ended, far below ln(2000).
    assert out["loss_first"] < 7.0


def test_init_from_another_family_is_one_line(pretrained_run: Path, xlnet_corpus: Path, tmp_path: Path) -> None:
    line = run_error("pretrain", "--recipe", "xlnet-tiny", "--corpus", str(xlnet_corpus), "--output",
                     str(tmp_path / "run"), "--init-from", str(pretrained_run))  # fmt: skip
    assert "is a bert model but recipe 'xlnet-tiny' trains xlnet" in line
    assert not (tmp_path / "run").exists()


def test_xlnet_needs_an_xlnet_layout_corpus(corpus_dir: Path, tmp_path: Path) -> None:
    line = run_error("pretrain", "--recipe", "xlnet-tiny", "--corpus", str(corpus_dir), "--output",
                     str(tmp_path / "run"))  # fmt: skip
    assert "--layout xlnet" in line and "layout 'bert'" in line


def test_resume_is_exact(xlnet_corpus: Path, tmp_path: Path) -> None:
    """The permutation draws come from (seed, epoch, sequence): a run stopped after a checkpoint and resumed
    ends with bitwise the weights of an uninterrupted one (fp32, CPU, dropout on)."""
    from safetensors.torch import load_file

    common = ["--recipe", "xlnet-tiny", "--corpus", str(xlnet_corpus), "--set", "train.batch_size=8",
              "--set", "train.log_every=1", "--set", "train.checkpoint_every=3", "--set", "schedule.decay=constant",
              "--set", "schedule.warmup_steps=2", *FAST]  # fmt: skip
    run_json("pretrain", *common, "--output", str(tmp_path / "straight"), "--set", "train.steps=6")
    run_json("pretrain", *common, "--output", str(tmp_path / "split"), "--set", "train.steps=3")
    resumed = run_json("pretrain", *common, "--output", str(tmp_path / "split"), "--set", "train.steps=6",
                       "--resume", "last")  # fmt: skip
    assert resumed["resumed_from"] == 3 and resumed["steps"] == 6
    straight = load_file(str(tmp_path / "straight" / "model" / "model.safetensors"))
    split = load_file(str(tmp_path / "split" / "model" / "model.safetensors"))
    assert straight.keys() == split.keys() and all(split[k].equal(straight[k]) for k in straight)


def test_distilling_from_xlnet_is_refused_in_one_line(
    xlnet_run: tuple[Path, dict], xlnet_corpus: Path, tmp_path: Path
) -> None:
    run, _ = xlnet_run
    line = run_error("distill", "--teacher", str(run), "--student", "tinybert-4", "--corpus", str(xlnet_corpus),
                     "--output", str(tmp_path / "student"))  # fmt: skip
    assert "is an XLNet model" in line and not (tmp_path / "student").exists()

"""ModernBERT end to end through the CLI on real data: `modernbert-tiny` pretrained on Python's documentation (the
session corpus: 64-token sequences from bertkit's own WordPiece tokenizer, so both its global layers and its
16-token sliding windows run), the loss falling; its export loading into transformers' ModernBertForMaskedLM with
no missing keys and computing what bertkit computes; fine-tuning on real Rotten Tomatoes reviews, the classifier
exporting to ModernBertForSequenceClassification with the same logits and to ONNX with the same predictions;
predict and embed on the result, all three unpadded (engine.unpad=auto: review batches have padding)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from cli_helpers import run_error, run_json

FAST = ["--set", "engine.threads=1", "--set", "train.eval_batches=2"]


@pytest.fixture(scope="module")
def modernbert_run(tmp_path_factory: pytest.TempPathFactory, corpus_dir: Path) -> tuple[Path, dict]:
    run = tmp_path_factory.mktemp("modernbert") / "run"
    summary = run_json("pretrain", "--recipe", "modernbert-tiny", "--corpus", str(corpus_dir), "--output", str(run),
                       "--set", "train.steps=40", "--set", "train.log_every=5", *FAST)  # fmt: skip
    return run, summary


def test_modernbert_tiny_pretrains_on_real_text(modernbert_run: tuple[Path, dict]) -> None:
    run, summary = modernbert_run
    assert summary["family"] == "modernbert" and summary["steps"] == 40
    losses = [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
    # From about ln(2000) = 7.6 (uniform over the vocabulary) clearly down.
    assert losses[0] > 7.0 and losses[-1] < losses[0] - 1.0, losses
    meta = json.loads((run / "model" / "bertkit_model.json").read_text())
    model = meta["model"]
    assert (model["local_attention"], model["global_attn_every_n_layers"], model["norm"]) == (16, 3, "pre")
    recipe = yaml.safe_load((run / "recipe.yaml").read_text())
    assert recipe["data"]["masking"]["prob"] == 0.3 and recipe["schedule"]["decay"] == "wsd"


def test_pretrained_export_runs_in_transformers(modernbert_run: tuple[Path, dict], tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from bertkit.modelio.modeldir import load_model_dir
    from bertkit.models.pretraining import build_pretraining_model

    run, _ = modernbert_run
    out = run_json("export", str(run), "--to", "hf", "--output", str(tmp_path / "hf"))
    assert out["architecture"] == "ModernBertForMaskedLM"
    hf, info = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert {k: v for k, v in info.items() if v and k != "error_msgs"} == {}, info
    _, meta, cfg, weights, tokenizer = load_model_dir(run)
    ours = build_pretraining_model(cfg).eval()
    ours.load_state_dict(weights)
    # Real text, longer than the window, with padding.
    texts = ["Return a new sorted list from the items in iterable, which may be any iterable object at all.", "x"]
    rows = [list(tokenizer.encode(t)) for t in texts]
    length = max(len(r) for r in rows)
    assert length > 16
    ids = torch.tensor([r + [cfg.pad_token_id] * (length - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (length - len(r)) for r in rows]).bool()
    with torch.no_grad():
        theirs = hf.eval()(input_ids=ids, attention_mask=mask).logits
        mine = ours(ids, mask)["mlm_logits"].view(theirs.shape)
    assert (theirs - mine)[mask].abs().max().item() <= 1e-4


@pytest.mark.slow  # 17 s (the default suite's time limit); ModernBERT's pretraining stays in the default suite
def test_finetune_predict_embed_and_export(modernbert_run: tuple[Path, dict], sentiment_csv: Path,
                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from bertkit.models import modernbert as modernbert_module

    packs: list[int] = []
    real_pack = modernbert_module.pack
    monkeypatch.setattr(modernbert_module, "pack", lambda *a: packs.append(1) or real_pack(*a))
    run, _ = modernbert_run
    ft = tmp_path / "ft"
    out = run_json("finetune", "--model", str(run), "--train", str(sentiment_csv), "--recipe", "finetune-tiny",
                   "--output", str(ft), "--set", "train.steps=20", "--set", "train.log_every=10",
                   "--set", "engine.threads=1")  # fmt: skip
    assert out["labels"] == ["negative", "positive"] and 0.0 <= out["eval"]["accuracy"] <= 1.0
    assert len(packs) >= 20  # every training batch (and the evaluation's) ran packed
    counted = len(packs)
    with open(sentiment_csv, encoding="utf-8", newline="") as handle:
        reviews = [row["text"] for row in csv.DictReader(handle)][:20]
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(reviews) + "\n", encoding="utf-8")
    predictions = tmp_path / "pred.jsonl"
    summary = run_json("predict", "--model", str(ft), "--input", str(texts), "--output", str(predictions))
    rows = [json.loads(line) for line in predictions.read_text().splitlines()]
    assert summary["rows"] == len(rows) == 20 and {row["label"] for row in rows} <= {"negative", "positive"}
    assert len(packs) > counted
    counted = len(packs)
    emb = run_json("embed", "--model", str(ft), "--input", str(texts), "--output", str(tmp_path / "emb.npy"))
    vectors = np.load(tmp_path / "emb.npy")
    assert emb["rows"] == 20 and vectors.shape == (20, 128) and np.isfinite(vectors).all()
    assert len(packs) > counted

    transformers = pytest.importorskip("transformers")
    exported = run_json("export", str(ft), "--to", "hf", "--output", str(tmp_path / "hf"))
    assert exported["architecture"] == "ModernBertForSequenceClassification"
    hf, info = transformers.AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "hf", output_loading_info=True
    )
    assert {k: v for k, v in info.items() if v and k != "error_msgs"} == {}, info
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    batch = tokenizer(reviews[:4], padding=True, truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        probs = hf.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.softmax(-1)
    # bertkit predict's scores for the same reviews (its own tokenisation: the same WordPiece vocabulary).
    ours = torch.tensor([[row["probabilities"][name] for name in ("negative", "positive")] for row in rows[:4]])
    assert (probs - ours).abs().max().item() <= 1e-4

    # The ONNX export (the serving path) gives predict the same scores, windows and rotary positions included:
    # these reviews run past the 16-token window.
    pytest.importorskip("onnxruntime")
    onnx_dir = tmp_path / "onnx"
    run_json("export", str(ft), "--to", "onnx", "--output", str(onnx_dir))
    served = tmp_path / "served.jsonl"
    run_json("predict", "--model", str(onnx_dir), "--input", str(texts), "--output", str(served))
    again = [json.loads(line) for line in served.read_text().splitlines()]
    assert [row["label"] for row in again] == [row["label"] for row in rows]
    for a, b in zip(again, rows, strict=True):
        assert all(abs(a["probabilities"][k] - b["probabilities"][k]) <= 1e-4 for k in b["probabilities"])


def test_distill_from_the_modernbert_run(modernbert_run: tuple[Path, dict], corpus_dir: Path, tmp_path: Path) -> None:
    """A ModernBERT teacher distilled into a ModernBERT student through the CLI (TinyBERT's hidden-state losses
    onto the teacher's global layers 1 and 4), and the attention loss on its sliding-window layers refused in one
    line before anything is written."""
    run, _ = modernbert_run
    common = ["--teacher", str(run), "--student", "modernbert-tiny", "--method", "tinybert", "--corpus",
              str(corpus_dir), "--set", "model.num_layers=2", "--set", "model.hidden_size=64",
              "--set", "model.intermediate_size=96", *FAST]  # fmt: skip
    error = run_error("distill", *common, "-o", str(tmp_path / "refused"))
    assert "sliding-window layer" in error and "distill.alpha_attention=0" in error
    assert not (tmp_path / "refused").exists()
    fixes = ["--set", "distill.alpha_attention=0", "--set", "distill.layer_map=[1,4]"]
    out = run_json("distill", *common, "-o", str(tmp_path / "ok"), *fixes, "--set", "train.steps=6",
                   "--set", "train.log_every=3")  # fmt: skip
    assert out["steps"] == 6 and out["layer_map"] == [1, 4]
    meta = json.loads((tmp_path / "ok" / "model" / "bertkit_model.json").read_text())
    assert meta["model"]["family"] == "modernbert" and meta["model"]["num_layers"] == 2

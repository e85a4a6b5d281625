"""The model families through the CLI: ELECTRA pretraining end to end, `bertkit export --to hf` for every
family loading into transformers with no missing or unexpected weights, and one-line errors for inputs that do
not fit (--init-from: tests/e2e/test_continue_pretraining.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from cli_helpers import run_error, run_json

from bertkit.config.recipe import load_recipe
from bertkit.modelio.modeldir import save_model_dir
from bertkit.models.pretraining import build_pretraining_model
from bertkit.tokenizers import load_tokenizer


def _loading_info(auto_class, directory: Path) -> dict:
    _, info = auto_class.from_pretrained(directory, output_loading_info=True)
    return {k: sorted(v) for k, v in info.items() if v and k != "error_msgs"}


@pytest.fixture(scope="module")
def electra_run(tmp_path_factory: pytest.TempPathFactory, corpus_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("electra") / "run"
    summary = run_json("pretrain", "--recipe", "electra-tiny", "--corpus", str(corpus_dir), "--output", str(out),
                  "--set", "train.steps=30", "--set", "train.log_every=10", "--set", "train.batch_size=16",
                  "--set", "engine.threads=1")  # fmt: skip
    assert summary["family"] == "electra" and summary["objectives"] == ["mlm", "rtd"]
    return out


def test_electra_tiny_pretrains_end_to_end(electra_run: Path) -> None:
    rows = [json.loads(line) for line in (electra_run / "metrics.jsonl").read_text().splitlines()]
    train_rows = [row for row in rows if "loss" in row]
    assert {"mlm_loss", "rtd_loss", "rtd_acc", "rtd_baseline_acc"} <= set(train_rows[-1])
    assert train_rows[-1]["loss"] < train_rows[0]["loss"]
    assert "eval_rtd_acc" in rows[-1] and "eval_mlm_loss" in rows[-1]


def test_electra_export_loads_as_discriminator(electra_run: Path, tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    out = run_json("export", str(electra_run), "--to", "hf", "--output", str(tmp_path / "hf"))
    assert out["architecture"] == "ElectraForPreTraining"
    assert {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt"} <= set(out["files"])
    assert _loading_info(transformers.ElectraForPreTraining, tmp_path / "hf") == {}
    # The exported discriminator computes what bertkit's does.
    hf = transformers.ElectraForPreTraining.from_pretrained(tmp_path / "hf").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    batch = tokenizer(["The for statement iterates over a sequence.", "Classes bundle data."], return_tensors="pt",
                      padding=True)  # fmt: skip
    from bertkit.modelio.modeldir import load_model_dir

    _, meta, cfg, weights, _ = load_model_dir(electra_run)
    ours = build_pretraining_model(cfg, load_recipe("electra-tiny").objective).eval()  # type: ignore[union-attr]
    ours.load_state_dict(weights)
    with torch.no_grad():
        theirs = hf(**batch).logits
        mine = ours.discriminate(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    valid = batch["attention_mask"].bool()
    assert (theirs - mine)[valid].abs().max().item() <= 1e-5


# Tiny versions of every family's paper recipe, exported with each head and loaded by the matching class.
FAMILIES = ["bert-base", "roberta-base", "albert-base", "electra-small", "spanbert-base", "distilbert", "tinybert-4"]
TINY = ["model.hidden_size=32", "model.num_heads=2", "model.intermediate_size=64", "model.num_layers=2",
        "model.max_position_embeddings=64"]  # fmt: skip


@pytest.mark.parametrize("name", FAMILIES)
def test_export_every_family_loads_cleanly(name: str, tmp_path: Path, tokenizer_dir: Path) -> None:
    transformers = pytest.importorskip("transformers")
    tokenizer = load_tokenizer(tokenizer_dir)
    overrides = [*TINY, f"model.vocab_size={tokenizer.vocab_size}", f"model.pad_token_id={tokenizer.pad_id}"]
    if name.startswith(("albert", "electra")):
        overrides.append("model.embedding_size=16")
    if name.startswith("roberta"):
        overrides.append(f"model.position_offset={tokenizer.pad_id + 1}")
    recipe = load_recipe(name, overrides)
    torch.manual_seed(0)
    model = build_pretraining_model(recipe.model, recipe.objective)  # type: ignore[union-attr]
    save_model_dir(tmp_path / "model", model, recipe.model, "pretraining", tokenizer)  # type: ignore[union-attr]
    classes = {"pretraining": transformers.AutoModelForPreTraining, "mlm": transformers.AutoModelForMaskedLM,
               "base": transformers.AutoModel}  # fmt: skip
    for head, auto_class in classes.items():
        if name.startswith("electra") and head == "mlm":
            assert "no MLM head" in run_error("export", str(tmp_path / "model"), "--output", str(tmp_path / head),
                                              "--head", head)  # fmt: skip
            continue
        if head == "pretraining" and name.startswith(("spanbert", "tinybert")):
            # BERT checkpoints without an NSP head: AutoModelForPreTraining would build BertForPreTraining.
            auto_class = transformers.AutoModelForMaskedLM
        out = run_json(
            "export", str(tmp_path / "model"), "--to", "hf", "--output", str(tmp_path / head), "--head", head
        )
        assert _loading_info(auto_class, tmp_path / head) == {}, (name, head, out["architecture"])


def test_bad_inputs_are_one_line(tmp_path: Path, corpus_dir: Path, minilm_dir: Path, tokenizer_dir: Path) -> None:
    assert "keep one" in run_error("recipes", "show", "bert-base", "--set", "objective.sop=1")
    assert "model.pooler=true" in run_error("recipes", "show", "albert-base", "--set", "model.pooler=false")
    assert "model.family=albert" in run_error("recipes", "show", "bert-base", "--set", "model.sharing=all-shared")
    error = run_error(
        "pretrain", "--recipe", "albert-tiny", "--corpus", str(corpus_dir), "--output", str(tmp_path / "a")
    )
    assert "--format sop" in error and "full-sentences" in error
    assert "--format segment-pair" in run_error("pretrain", "--recipe", "bert-base", "--corpus", str(corpus_dir),
                                                "--output", str(tmp_path / "b"))  # fmt: skip
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    # A checkpoint whose weights do not fit its config, and a tokenizer that does not fit the model.
    broken = tmp_path / "broken"
    shutil.copytree(minilm_dir, broken)
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "hidden_size": 768}))
    assert "do not fit the config" in run_error("export", str(broken), "--output", str(tmp_path / "x"))
    (broken / "config.json").write_text(json.dumps({**config, "vocab_size": 30000}))
    assert "30522" in run_error("export", str(broken), "--output", str(tmp_path / "y"))
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    (broken / "config.json").write_text(json.dumps({**config, "num_attention_heads": 7}))
    assert "cannot build" in run_error("export", str(broken), "--output", str(tmp_path / "w"))
    # A tokenizer whose vocabulary is not the model's.
    (broken / "config.json").write_text(json.dumps(config))
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(tokenizer_dir / name, broken / name)
    error = run_error("export", str(broken), "--output", str(tmp_path / "z"))
    assert "tokenizer has 2000 tokens but the model's vocabulary is 30522" in error


def test_real_minilm_loads_as_a_model_dir_with_parity(minilm_dir: Path) -> None:
    """`--model`/`--teacher`/`--init-from` read HF dirs through load_model_dir: the real MiniLM BERT gives
    transformers' hidden states, and its encoder fits the encoder that finetune builds, strictly."""
    transformers = pytest.importorskip("transformers")
    from bertkit.engine.checkpoint import load_state
    from bertkit.modelio.modeldir import encoder_weights, load_model_dir
    from bertkit.models.bert import BertEncoder

    _, meta, cfg, weights, tokenizer = load_model_dir(minilm_dir)
    assert meta["architecture"] == "huggingface:BertModel" and cfg.hidden_size == 384 and cfg.num_layers == 6
    encoder = BertEncoder(cfg).eval()
    load_state(encoder, encoder_weights(weights), str(minilm_dir))  # strict: every tensor placed
    hf = transformers.AutoModel.from_pretrained(minilm_dir).eval()
    texts = ["Generators yield values lazily.", "A module is a file containing Python definitions."]
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    batch = hf_tokenizer(texts, return_tensors="pt", padding=True)
    length = int(batch["attention_mask"][0].sum())
    assert batch["input_ids"][0, 1 : length - 1].tolist() == tokenizer.encode_batch(texts[:1])[0]
    with torch.no_grad():
        theirs = hf(**batch)
        mine = encoder(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    valid = batch["attention_mask"].bool()
    assert (theirs.last_hidden_state - mine.last_hidden_state)[valid].abs().max().item() <= 1e-5
    assert (theirs.pooler_output - mine.pooled).abs().max().item() <= 1e-5


def test_electra_generator_exports_as_masked_lm(electra_run: Path, tmp_path: Path) -> None:
    """The generator (with the shared embeddings) as HF ElectraForMaskedLM: same hidden states and MLM logits."""
    transformers = pytest.importorskip("transformers")
    from bertkit.modelio.modeldir import load_model_dir

    run_json("export", str(electra_run), "--output", str(tmp_path / "gen"), "--head", "generator")
    assert _loading_info(transformers.ElectraForMaskedLM, tmp_path / "gen") == {}
    hf = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / "gen").eval()
    _, _, cfg, weights, _ = load_model_dir(electra_run)
    ours = build_pretraining_model(cfg, load_recipe("electra-tiny").objective).eval()  # type: ignore[union-attr]
    ours.load_state_dict(weights)
    ids = torch.randint(5, cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids, dtype=torch.bool)
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        hidden = ours.generator(attention_mask=mask, inputs_embeds=ours.encoder.embeddings(ids)).last_hidden_state
        logits = ours.generator_head(hidden, ours.encoder.word_embeddings)
    assert (theirs.hidden_states[-1] - hidden).abs().max().item() <= 1e-5
    assert (theirs.logits - logits).abs().max().item() <= 1e-5

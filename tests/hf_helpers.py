"""Tiny random Hugging Face checkpoints, saved as transformers saves them (`save_pretrained`: config.json and
model.safetensors, with tokenizer files): sequence classifiers, as a fine-tuned checkpoint is saved, and masked
LMs (and ELECTRA's and XLNet's pretraining classes) of every family bertkit imports.
Importable from every test directory (see cli_helpers.py)."""

from __future__ import annotations

from pathlib import Path

# family -> (transformers config class, model class)
CLASSIFIERS = {
    "bert": ("BertConfig", "BertForSequenceClassification"),
    "roberta": ("RobertaConfig", "RobertaForSequenceClassification"),
    "albert": ("AlbertConfig", "AlbertForSequenceClassification"),
}


def save_hf_classifier(
    out: Path, tokenizer_dir: Path, family: str = "bert", labels: tuple[str, ...] = ("negative", "positive")
) -> Path:
    """A 2-layer, hidden-32 classifier over `labels` (id2label in that order) with the tokenizer of
    `tokenizer_dir`. initializer_range 0.2 rather than 0.02, and a classifier 10 times that, give logits of
    order 10: a weight mapped to the wrong place shows in them, and the teacher's predictions are confident
    ones, as a fine-tuned classifier's are, with something for a student to learn in a few steps."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    config_class, model_class = CLASSIFIERS[family]
    shape = {
        "vocab_size": tokenizer.vocab_size,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 130,  # RoBERTa numbers positions from pad_token_id + 1
        "pad_token_id": tokenizer.pad_token_id,
        "initializer_range": 0.2,
        "id2label": dict(enumerate(labels)),
        "label2id": {name: i for i, name in enumerate(labels)},
    }
    if family == "albert":
        shape["embedding_size"] = 16
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**shape))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.startswith("classifier.") and name.endswith("weight"):
                parameter.mul_(10.0)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    assert (out / "model.safetensors").is_file() and not list(out.glob("*.bin"))
    return out


# family -> (transformers config class, masked-LM class)
MASKED_LMS = {
    "bert": ("BertConfig", "BertForMaskedLM"),
    "roberta": ("RobertaConfig", "RobertaForMaskedLM"),
    "albert": ("AlbertConfig", "AlbertForMaskedLM"),
    "distilbert": ("DistilBertConfig", "DistilBertForMaskedLM"),
    "modernbert": ("ModernBertConfig", "ModernBertForMaskedLM"),
    "bigbird": ("BigBirdConfig", "BigBirdForMaskedLM"),
    # Pretraining checkpoints of the families whose objective is not masked LM alone.
    "electra": ("ElectraConfig", "ElectraForPreTraining"),
    "xlnet": ("XLNetConfig", "XLNetLMHeadModel"),
}


def save_hf_masked_lm(out: Path, tokenizer_dir: Path, family: str) -> Path:
    """A tiny random transformers *ForMaskedLM of `family` (2 layers, hidden 32), saved with save_pretrained,
    with the tokenizer files of `tokenizer_dir` copied as they are (so a corpus built with that tokenizer is
    one built with the checkpoint's). initializer_range 0.2 gives logits of order 1: a weight mapped to the
    wrong place shows in them."""
    import shutil

    import torch
    import transformers

    from bertkit.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    config_class, model_class = MASKED_LMS[family]
    if family == "distilbert":
        shape = {"dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 64}
    elif family == "xlnet":
        shape = {"d_model": 32, "n_layer": 2, "n_head": 4, "d_inner": 64}
    else:
        shape = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
    shape.update(vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_id, initializer_range=0.2)
    if family != "xlnet":  # relative positions: no table
        shape["max_position_embeddings"] = 130
    if family in ("albert", "electra"):
        shape["embedding_size"] = 16
    if family == "bigbird":
        shape["attention_type"] = "original_full"  # short sequences: BigBird itself falls back to full attention
    if family == "modernbert":
        shape.update(cls_token_id=tokenizer.cls_id, sep_token_id=tokenizer.sep_id, bos_token_id=tokenizer.cls_id,
                     eos_token_id=tokenizer.sep_id, global_attn_every_n_layers=2, local_attention=16)  # fmt: skip
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**shape))
    model.save_pretrained(out)
    for name in tokenizer_dir.iterdir():
        if name.is_file():
            shutil.copy(name, out / name.name)
    assert (out / "model.safetensors").is_file() and not list(out.glob("*.bin"))
    return out

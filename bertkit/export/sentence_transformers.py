"""`bertkit export --to sentence-transformers`: a bertkit bi-encoder (or any encoder) as a directory that
`SentenceTransformer(DIR)` loads: the encoder as a transformers AutoModel checkpoint with its tokenizer, then the
Pooling module (mean or [CLS], as the model was trained to pool) and, when its vectors are normalised, Normalize."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError
from bertkit.fsutil import atomic_output_dir
from bertkit.interop.hf import to_hf_checkpoint
from bertkit.modelio.hf_dir import write_hf_dir
from bertkit.modelio.modeldir import load_model_dir
from bertkit.modelio.st_dir import trained_pooling


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")


def export_sentence_transformers(model_path: Path, output: Path, overwrite: bool = False) -> dict[str, Any]:
    """Write the directory; the pooling, normalisation and window are those the model records (a bi-encoder's
    `embedding`), else mean pooling without normalisation over the model's positions."""
    model_dir, meta, cfg, weights, tokenizer = load_model_dir(model_path)
    if cfg.family not in ("bert", "roberta", "albert", "electra", "modernbert", "distilbert"):
        raise BertkitError(f"a {cfg.family} encoder has no sentence-transformers export; export --to hf instead")
    embedding = meta.get("embedding") or {}
    pooling = trained_pooling(meta, model_dir) or "mean"
    normalize = bool(embedding.get("normalize", False))
    positions = cfg.max_position_embeddings - cfg.position_offset
    max_len = min(int(embedding.get("max_seq_length") or positions), positions)
    config, state = to_hf_checkpoint(cfg, weights, "base")
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    with atomic_output_dir(output, overwrite) as tmp:
        write_hf_dir(tmp, config, state)
        tokenizer.save(tmp)
        _write_json(tmp / "modules.json", modules)
        _write_json(tmp / "sentence_bert_config.json", {"max_seq_length": max_len, "do_lower_case": False})
        _write_json(tmp / "1_Pooling" / "config.json", {
            "word_embedding_dimension": cfg.hidden_size,
            "pooling_mode_cls_token": pooling == "cls",
            "pooling_mode_mean_tokens": pooling == "mean",
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
        })  # fmt: skip
        if normalize:
            (tmp / "2_Normalize").mkdir()
        files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
    return {"output": str(output), "source": str(model_dir), "model_type": config["model_type"],
            "pooling": pooling, "normalize": normalize, "max_seq_length": max_len, "files": files}  # fmt: skip

"""How a checkpoint wants its vectors pooled: a sentence-transformers directory says so in `modules.json` (a
Pooling module's `1_Pooling/config.json`, and a Normalize module or not); a bertkit bi-encoder records it in its
`bertkit_model.json` (`embedding`). What the retrieval and similarity kinds start from when `task.pooling` is auto."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError

_ST_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}


_ST_MODULES = {"Transformer", "Pooling", "Normalize"}


def read_st_embedding(model_dir: Path) -> dict[str, Any] | None:
    """{"pooling", "normalize", "max_seq_length"} of a sentence-transformers directory, None for another one. What
    bertkit does not compute (max or weighted pooling, a Dense layer after the pooling) is recorded as `unsupported`
    rather than replaced: the directory still loads as an encoder, and `trained_pooling` refuses to pool it."""
    modules_file = model_dir / "modules.json"
    if not modules_file.is_file():
        return None
    try:
        modules = json.loads(modules_file.read_text("utf-8"))
        kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
        pooling = next((m for m in modules if str(m.get("type", "")).endswith(".Pooling")), None)
        settings = json.loads((model_dir / pooling["path"] / "config.json").read_text("utf-8")) if pooling else {}
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:
        raise BertkitError(f"{modules_file}: cannot read the sentence-transformers modules ({err})") from None
    chosen = [mode for key, mode in _ST_MODES.items() if settings.get(key)]
    others = [k for k, v in settings.items() if k.startswith("pooling_mode_") and v and k not in _ST_MODES]
    out: dict[str, Any] = {"pooling": chosen[0] if chosen else "mean", "normalize": "Normalize" in kinds}
    extra = [kind for kind in kinds if kind not in _ST_MODULES]
    if others or len(chosen) > 1 or extra:
        what = f"pooling {', '.join(others or chosen)}" if others or len(chosen) > 1 else f"module {extra[0]}"
        out["unsupported"] = what
    try:
        config = json.loads((model_dir / "sentence_bert_config.json").read_text("utf-8"))
        out["max_seq_length"] = int(config["max_seq_length"])
    except (OSError, ValueError, TypeError, KeyError):
        pass
    return out


def trained_pooling(meta: dict[str, Any], source: object) -> str | None:
    """How the model was trained to pool ("mean" or "cls"), None when it records nothing; one line when it was
    trained with something bertkit does not compute."""
    embedding = meta.get("embedding") or {}
    if embedding.get("unsupported"):
        raise BertkitError(f"{source} was trained with {embedding['unsupported']}, which bertkit does not compute; "
                           "choose the pooling (task.pooling, --pool mean|cls) to use it as an encoder")  # fmt: skip
    return embedding.get("pooling")

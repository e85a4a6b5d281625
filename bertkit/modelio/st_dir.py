"""How a checkpoint wants its vectors pooled: a sentence-transformers directory says so in `modules.json` (a
Pooling module's `1_Pooling/config.json`, and a Normalize module or not); a bertkit bi-encoder records it in its
`bertkit_model.json` (`embedding`). What the retrieval and similarity kinds start from when `task.pooling` is auto."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError

_ST_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}


def read_st_embedding(model_dir: Path) -> dict[str, Any] | None:
    """{"pooling", "normalize", "max_seq_length"} of a sentence-transformers directory, None for another one. A
    pooling bertkit does not compute (max, mean of sqrt length, weighted) is refused rather than replaced."""
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
    if others or len(chosen) > 1:
        raise BertkitError(f"{model_dir}: pooling {', '.join(others or chosen)} is not one bertkit computes (mean or "
                           "cls); set task.pooling to choose one")  # fmt: skip
    out: dict[str, Any] = {"pooling": chosen[0] if chosen else "mean", "normalize": "Normalize" in kinds}
    try:
        config = json.loads((model_dir / "sentence_bert_config.json").read_text("utf-8"))
        out["max_seq_length"] = int(config["max_seq_length"])
    except (OSError, ValueError, TypeError, KeyError):
        pass
    return out

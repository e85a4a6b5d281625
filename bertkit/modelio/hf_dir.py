"""A Hugging Face checkpoint directory on disk: `config.json` + `model.safetensors` (+ tokenizer files), never
pickled weights. Reading one gives bertkit's config and weights through the key maps of bertkit/interop/hf.py;
writing one takes what those key maps made of a bertkit model (`bertkit export --to hf`, bertkit/export/hf.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from bertkit.config.schema import ModelConfig
from bertkit.errors import BertkitError
from bertkit.interop.hf import HFModel, from_hf_state
from bertkit.modelio.weights import read_weights

HF_CONFIG, HF_WEIGHTS = "config.json", "model.safetensors"


def is_hf_dir(path: Path) -> bool:
    return (Path(path) / HF_CONFIG).is_file()


def load_hf_dir(directory: Path) -> HFModel:
    """Read `config.json` and `model.safetensors` from a local HF directory (never pickle files)."""
    directory = Path(directory)
    config_file, weights_file = directory / HF_CONFIG, directory / HF_WEIGHTS
    if not config_file.is_file():
        raise BertkitError(f"{directory} has no config.json; not a Hugging Face model directory")
    if not weights_file.is_file():
        raise BertkitError(f"{directory} has no model.safetensors (bertkit never loads pickled .bin weights)")
    try:
        hf_config = json.loads(config_file.read_text("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BertkitError(f"{config_file} is not valid JSON: {err}") from None
    try:
        return from_hf_state(hf_config, read_weights(weights_file), str(directory))
    except KeyError as err:
        raise BertkitError(f"{config_file} lacks the field {err}") from None
    except ValueError as err:  # pydantic's ValidationError: a config bertkit's ModelConfig rejects
        detail = " ".join(str(err).split())
        raise BertkitError(f"{config_file} describes a model bertkit cannot build: {detail[:300]}") from None


def load_hf_encoder(directory: Path) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """The encoder alone (keys without the `encoder.` prefix), as the walking skeleton exposed it."""
    model = load_hf_dir(directory)
    return model.config, {k.removeprefix("encoder."): v for k, v in model.weights.items() if k.startswith("encoder.")}


def write_hf_dir(directory: Path, config: dict[str, Any], state: dict[str, torch.Tensor]) -> None:
    from bertkit.fsutil import save_safetensors

    (directory / HF_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    save_safetensors(state, directory / HF_WEIGHTS, metadata={"format": "pt"})

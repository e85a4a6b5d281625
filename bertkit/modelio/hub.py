"""Hugging Face hub names: a short name (ALIASES) or a repository id, resolved to a snapshot in the hub cache
(downloaded, or read from the cache offline). Only what bertkit reads is fetched (HUB_FILES): never pickled
weights, never code. Two callers use it: bertkit/modelio/modeldir.py (`resolve_model_path(spec, hub=True)`) and,
without torch, bertkit/modelio/layout.py (`tokenizer_source`, for a name that is not a path). So the model
arguments that name a public model (distill's teacher, pretrain's --init-from, evaluate's models, build-corpus's
and tokenize extend's --tokenizer) accept a hub name."""

from __future__ import annotations

import os
from pathlib import Path

from bertkit.errors import BertkitError

# Short names for common public models. Anything else that looks like a hub name is passed through as it is
# (`roberta-base`, `roberta-large`, `bert-base-cased`, `org/name`).
ALIASES = {
    "bert-base": "bert-base-uncased",
    "bert-large": "bert-large-uncased",
    "distilbert": "distilbert-base-uncased",
    "albert-base": "albert-base-v2",
    "electra-small": "google/electra-small-discriminator",
    "electra-base": "google/electra-base-discriminator",
}
# Only what bertkit reads: configs, tokenizer files and safetensors weights. Never pickled weights
# (*.bin, *.pt) and never code (*.py): nothing downloaded is ever executed.
HUB_FILES = [
    "config.json",
    "model.safetensors",
    "bertkit_model.json",
    "bertkit_tokenizer.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spm.model",
    "spiece.model",
    "sentencepiece.bpe.model",
]
_TRUE = {"1", "ON", "YES", "TRUE"}


def looks_like_path(spec: str) -> bool:
    return spec.startswith(("/", "./", "../", "~")) or spec in (".", "..")


def hub_cache() -> Path:
    """The hub cache as the environment says now. huggingface_hub reads HF_HOME / HF_HUB_CACHE once, at
    import; reading them here honours a change made after that (a test, or a caller setting them)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def is_offline() -> bool:
    from huggingface_hub import constants

    flag = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return flag.upper() in _TRUE or bool(constants.HF_HUB_OFFLINE)


def download(name: str) -> Path:
    """The snapshot of a hub name (one of ALIASES, or a repository id) in the hub cache, downloaded if needed."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo_id = ALIASES.get(name, name)
    cache, offline = hub_cache(), is_offline()
    local = "pass a local model directory instead (a bertkit model/run directory or a Hugging Face checkpoint)"
    try:
        folder = snapshot_download(repo_id, cache_dir=cache, allow_patterns=HUB_FILES, local_files_only=offline)
    except GatedRepoError:
        raise BertkitError(f"{repo_id} is gated on the hub; log in with `hf auth login`, or {local}") from None
    except RepositoryNotFoundError:
        raise BertkitError(f"no model named {repo_id} on the Hugging Face hub (or it is private); {local}") from None
    except RevisionNotFoundError:
        raise BertkitError(f"{repo_id} has no main revision on the Hugging Face hub; {local}") from None
    except LocalEntryNotFoundError:
        why = "HF_HUB_OFFLINE is set" if offline else "the hub cannot be reached"
        raise BertkitError(
            f"cannot get {repo_id}: no directory of that name here, {why} and there is no complete cached copy "
            f"under {cache}; "
            f"download it where there is network (same HF_HOME), or {local}"
        ) from None
    except HFValidationError:
        raise BertkitError(f"{repo_id!r} is neither an existing directory nor a valid hub model name") from None
    except (HfHubHTTPError, OSError) as err:
        raise BertkitError(f"cannot download {repo_id}: {str(err).splitlines()[0]}; {local}") from None
    path = Path(folder)
    if not (path / "model.safetensors").is_file():
        raise BertkitError(
            f"{repo_id} has no model.safetensors on the hub (bertkit never loads pickled .bin weights); "
            f"convert it to safetensors and {local}"
        )
    return path

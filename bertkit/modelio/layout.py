"""The files that make a bertkit model directory and a tokenizer directory, and the directory a `--tokenizer`
argument names. Torch-free: `build-corpus` and each of its tokenizing worker processes import it, and never need
torch (a second of start-up and some 200 MB in every one of them).
"""

from __future__ import annotations

from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.tokenizers.base import BERTKIT_TOKENIZER_FILE
from bertkit.tokenizers.spm import SPM_MODEL_NAMES

MODEL_META = "bertkit_model.json"
# Files that make a directory a tokenizer directory (bertkit's, a Hugging Face one, or a bare vocabulary): what
# load_tokenizer reads.
TOKENIZER_FILES = (BERTKIT_TOKENIZER_FILE, "tokenizer.json", "vocab.txt", "vocab.json", *SPM_MODEL_NAMES)


def tokenizer_source(spec: str | Path) -> Path:
    """The directory whose tokenizer a `--tokenizer` argument names: a tokenizer directory (or its s3:// URL), a
    bertkit run or model directory (its `model/`), a Hugging Face checkpoint directory, or a hub name (its tokenizer
    files, through the hub cache). A missing path that reads as a path (absolute, ./, ../, ~, or more than two
    parts) is one error; a missing ORG/NAME or NAME is looked up on the hub."""
    from bertkit.inputs.remote import is_url, local_tokenizer
    from bertkit.modelio.hub import download, looks_like_path

    if is_url(spec):
        return local_tokenizer(spec)  # an s3:// tokenizer directory, fetched to the cache
    path = Path(spec).expanduser()
    if path.is_dir():
        if any((path / name).is_file() for name in TOKENIZER_FILES):
            return path
        if (path / "model" / MODEL_META).is_file():
            return path / "model"
        return path  # load_tokenizer names what is missing
    if path.exists() or looks_like_path(str(spec)) or len(Path(str(spec)).parts) > 2:
        raise BertkitError(f"tokenizer directory not found: {spec}")
    return download(str(spec))  # a hub name (or alias): its snapshot in the hub cache

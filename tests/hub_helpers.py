"""A Hugging Face hub cache laid out exactly as huggingface_hub lays it out, filled from a local checkpoint,
for testing the hub-name path of `--teacher` offline. Importable from every test directory (see
cli_helpers.py)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from bertkit.modelio.hub import HUB_FILES

REPO = "sentence-transformers/all-MiniLM-L6-v2"
COMMIT = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"  # any 40-hex name: the cache only needs refs/main to match


def fill_hub_cache(hub: Path, source: Path) -> Path:
    """HF_HOME/hub/models--ORG--NAME/{blobs/<hash>, refs/main, snapshots/<commit>/<file> -> ../../blobs/<hash>}."""
    repo = hub / ("models--" + REPO.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)  # the hub writes the bare hash, no newline
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for name in HUB_FILES:
        if not (source / name).is_file():
            continue
        digest = hashlib.sha256((source / name).read_bytes()).hexdigest()
        shutil.copyfile(source / name, repo / "blobs" / digest)
        (snapshot / name).symlink_to(Path("..", "..", "blobs", digest))
    return snapshot

"""Corpora in object storage: s3:// (the `bertkit[s3]` extra) and any other fsspec URL, through the URL
handling of bertkit/inputs/remote.py.

- A corpus is built in a local staging directory and uploaded whole, manifest.json last: a corpus URL holds a
  corpus only once its manifest is there, so a reader never sees half of one under the final name.
- Training reads a corpus URL through a node-local cache: filled once per node (the ranks of a node take a
  file lock; the first fills, the others wait and reuse), every file checked against the manifest's sha256
  before the cache directory is renamed into place, and reused by later runs and resumes as long as the
  bucket's manifest is the same.
Credentials and endpoints come from the usual environment (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, AWS_PROFILE...),
which the filesystem libraries read themselves; nothing of them is ever written into a recipe or a manifest.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError
from bertkit.inputs.remote import cache_key, cache_root, filesystem, is_url, remote_error

MANIFEST = "manifest.json"  # shards.MANIFEST, repeated to keep this module free of numpy


# -- corpora written to a URL ------------------------------------------------------------------------------
def check_remote_output(url: str, overwrite: bool) -> None:
    fs, path = filesystem(url)
    try:
        exists = fs.exists(f"{path.rstrip('/')}/{MANIFEST}")
    except (OSError, ValueError) as err:
        raise remote_error(url, err) from None
    if exists and not overwrite:
        raise BertkitError(f"output {url} already holds a corpus; pass --overwrite to replace it or choose another URL")


def publish_corpus(local: Path, url: str) -> None:
    """Upload a finished corpus directory: every file first, the manifest last (what makes it a corpus)."""
    fs, path = filesystem(url)
    path = path.rstrip("/")
    try:
        if fs.exists(f"{path}/{MANIFEST}"):
            fs.rm(f"{path}/{MANIFEST}")  # --overwrite: the old corpus stops being one before any file changes
        for file in sorted(p for p in local.rglob("*") if p.is_file() and p.name != MANIFEST):
            fs.put_file(str(file), f"{path}/{file.relative_to(local).as_posix()}")
        fs.put_file(str(local / MANIFEST), f"{path}/{MANIFEST}")
    except (OSError, ValueError) as err:
        raise BertkitError(f"cannot upload the corpus to {url}: {type(err).__name__}: {err}".splitlines()[0]) from None


def build_to_url(build: Callable[[Path], dict[str, Any]], url: str, overwrite: bool) -> dict[str, Any]:
    """Run `build(local_dir)` in a local staging directory, then upload the corpus whole to `url`."""
    check_remote_output(url, overwrite)
    (cache_root() / "staging").mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="upload-", dir=cache_root() / "staging"))
    try:
        result = build(staging / "corpus")
        publish_corpus(staging / "corpus", url)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    result["output"] = url
    return result


# -- corpora read from a URL, through a node-local cache -------------------------------------------------
@contextlib.contextmanager
def _node_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on this node: the ranks of one node fill a cache directory once, one after another."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cached_corpus(location: Path | str | None, on_fill: Callable[[str], None] | None = None) -> Path | None:
    """A local corpus directory for `location`: itself when local, else the node-local cache of the URL,
    filled (and verified against the manifest's checksums) on first use and reused while the manifest holds."""
    if location is None or not is_url(location):
        return None if location is None else Path(location)
    url = str(location).rstrip("/")
    fs, path = filesystem(url)
    try:
        manifest_bytes = fs.cat_file(f"{path}/{MANIFEST}")
    except FileNotFoundError:
        raise BertkitError(
            f"{url} holds no corpus ({MANIFEST} missing: not built, or its upload did not finish)"
        ) from None
    except (OSError, ValueError) as err:
        raise remote_error(url, err) from None
    try:
        manifest = json.loads(manifest_bytes)
        checksums: dict[str, str] = dict(manifest["checksums"])
    except (ValueError, KeyError, TypeError):
        raise BertkitError(f"{url}/{MANIFEST} is not a bertkit corpus manifest") from None
    # The cache key: the URL and the manifest's bytes, so a rebuilt corpus under the same URL is fetched anew.
    target = cache_root() / "corpora" / f"{cache_key(url)}-{hashlib.sha256(manifest_bytes).hexdigest()[:16]}"
    with _node_lock(target.with_name(target.name + ".lock")):
        if (target / MANIFEST).is_file():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        try:
            _fill(fs, path, url, tmp, checksums)
            (tmp / MANIFEST).write_bytes(manifest_bytes)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if on_fill:
            on_fill(url)
    return target


def _fill(fs: Any, path: str, url: str, tmp: Path, checksums: dict[str, str]) -> None:
    from bertkit.corpus.shards import sha256_file  # the digest the manifest was written with

    try:
        listed = [p for p in fs.find(path) if p.rstrip("/") != f"{path}/{MANIFEST}"]
        for remote in listed:
            relative = remote[len(path) :].lstrip("/")
            local = tmp / relative
            local.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(remote, str(local))
    except (OSError, ValueError) as err:
        raise remote_error(url, err) from None
    for name, expected in checksums.items():
        local = tmp / name
        if not local.is_file():
            raise BertkitError(f"corpus {url} is incomplete: {name} is missing from the bucket; upload it again")
        if sha256_file(local) != expected:
            raise BertkitError(
                f"corpus {url}: {name} does not match the manifest's checksum (damaged in the bucket or in "
                "transit); rebuild or upload the corpus again"
            )


def with_local_corpora(recipe: Any) -> Any:
    """The recipe with its corpus URLs (data.train, data.eval) replaced by their verified node-local caches."""
    data = recipe.data
    if not (is_url(data.train) or is_url(data.eval)):
        return recipe
    local = data.model_copy(update={"train": cached_corpus(data.train), "eval": cached_corpus(data.eval)})
    return recipe.model_copy(update={"data": local})

"""Inputs, tokenizers and corpora in object storage: s3:// (the `bertkit[s3]` extra) and any other fsspec URL.

- Inputs are read streaming from the bucket (`RemoteFile` quacks like the Path the readers expect).
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
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, BinaryIO

from bertkit.errors import BertkitError

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
CACHE_ENV = "BERTKIT_CACHE"
MANIFEST = "manifest.json"  # shards.MANIFEST, repeated to keep this module free of numpy
# The extra (or package) that brings each scheme's filesystem.
_EXTRAS = {"s3": 'pip install "bertkit[s3]"', "s3a": 'pip install "bertkit[s3]"', "gs": "pip install gcsfs"}
_EXTRAS |= {"gcs": "pip install gcsfs", "az": "pip install adlfs", "abfs": "pip install adlfs"}


def is_url(location: object) -> bool:
    return isinstance(location, str) and bool(_URL.match(location))


def filesystem(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path within it) for a URL; a missing filesystem package is one line naming it."""
    scheme = url.split("://", 1)[0].lower()
    hint = _EXTRAS.get(scheme, f"install the fsspec filesystem for {scheme}://")
    try:
        import fsspec
    except ImportError:
        raise BertkitError(f"{url}: reading URLs needs fsspec; {hint}") from None
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError:
        raise BertkitError(f"{url}: no filesystem for {scheme}:// is installed; {hint}") from None
    except ValueError as err:
        raise BertkitError(f"{url}: {err}; {hint}") from None


def _remote_error(url: str, err: Exception) -> BertkitError:
    return BertkitError(f"cannot read {url}: {type(err).__name__}: {err}".splitlines()[0])


class RemoteFile:
    """An input file in object storage, with the few Path methods the readers use."""

    def __init__(self, url: str, fs: Any, path: str, info: dict[str, Any]) -> None:
        self.url, self._fs, self._path = url, fs, path
        self.name = path.rstrip("/").rsplit("/", 1)[-1]
        modified = info.get("LastModified", info.get("mtime", info.get("updated", 0)))
        mtime = modified.timestamp() if hasattr(modified, "timestamp") else float(modified or 0)
        self._stat = SimpleNamespace(st_size=int(info.get("size") or 0), st_mtime=mtime)

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"RemoteFile({self.url!r})"

    def is_dir(self) -> bool:
        return False

    def is_file(self) -> bool:
        return True

    def stat(self) -> SimpleNamespace:
        return self._stat

    def open(self, mode: str = "rb") -> BinaryIO:
        """A streaming reader: blocks are fetched as the reader gets to them, never the whole object first."""
        try:
            return self._fs.open(self._path, mode, block_size=8 << 20)
        except (OSError, ValueError) as err:
            raise _remote_error(self.url, err) from None


def expand_url(pattern: str) -> list[RemoteFile]:
    """The files a URL (or a URL glob) names, sorted like local globs; one line for a missing one."""
    fs, path = filesystem(pattern)
    scheme = pattern.split("://", 1)[0]
    try:
        matches = sorted(fs.glob(path)) if any(ch in path for ch in "*?[") else [path]
        if not matches:
            raise BertkitError(f"no input file matches '{pattern}'")
        files = []
        for match in matches:
            url = f"{scheme}://{match}"
            if not fs.exists(match):
                raise BertkitError(f"input file not found: {url}")
            info = fs.info(match)
            if info.get("type") == "directory":
                raise BertkitError(f"input {url} is a directory; give its files (a glob such as '{url}/*.txt' works)")
            files.append(RemoteFile(url, fs, match, info))
    except (OSError, ValueError) as err:
        raise _remote_error(pattern, err) from None
    return files


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "bertkit")


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def local_tokenizer(location: Path | str) -> Path:
    """A tokenizer directory, downloaded to the cache first when it is a URL (a few MB: fetched every time)."""
    if not is_url(location):
        return Path(location)
    url = str(location).rstrip("/")
    fs, path = filesystem(url)
    target = cache_root() / "tokenizers" / _key(url)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        if not fs.isdir(path):
            raise BertkitError(f"tokenizer directory not found: {url}")
        fs.get(path + "/", str(tmp) + "/", recursive=True)
        _replace_dir(tmp, target)
    except (OSError, ValueError) as err:
        raise _remote_error(url, err) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _replace_dir(tmp: Path, target: Path) -> None:
    if target.exists():
        trash = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.replace(target, trash / target.name)
        shutil.rmtree(trash, ignore_errors=True)
    os.replace(tmp, target)


# -- corpora written to a URL ------------------------------------------------------------------------------
def check_remote_output(url: str, overwrite: bool) -> None:
    fs, path = filesystem(url)
    try:
        exists = fs.exists(f"{path.rstrip('/')}/{MANIFEST}")
    except (OSError, ValueError) as err:
        raise _remote_error(url, err) from None
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
        raise _remote_error(url, err) from None
    try:
        manifest = json.loads(manifest_bytes)
        checksums: dict[str, str] = dict(manifest["checksums"])
    except (ValueError, KeyError, TypeError):
        raise BertkitError(f"{url}/{MANIFEST} is not a bertkit corpus manifest") from None
    # The cache key: the URL and the manifest's bytes, so a rebuilt corpus under the same URL is fetched anew.
    target = cache_root() / "corpora" / f"{_key(url)}-{hashlib.sha256(manifest_bytes).hexdigest()[:16]}"
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
        raise _remote_error(url, err) from None
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

"""Inputs and tokenizers in object storage: s3:// (the `bertkit[s3]` extra) and any other fsspec URL.

- Inputs are read streaming from the bucket (`RemoteFile` quacks like the Path the readers expect).
- A tokenizer directory given as a URL is downloaded to the cache (`local_tokenizer`).
Corpora in object storage (built locally and uploaded whole, read through a node-local cache) are
bertkit/corpus/remote.py's, on top of this module.
Credentials and endpoints come from the usual environment (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, AWS_PROFILE...),
which the filesystem libraries read themselves; nothing of them is ever written into a recipe or a manifest.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, BinaryIO

from bertkit.errors import BertkitError

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
CACHE_ENV = "BERTKIT_CACHE"
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


def remote_error(url: str, err: Exception) -> BertkitError:
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
            raise remote_error(self.url, err) from None


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
        raise remote_error(pattern, err) from None
    return files


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "bertkit")


def cache_key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def local_tokenizer(location: Path | str) -> Path:
    """A tokenizer directory, downloaded to the cache first when it is a URL (a few MB: fetched every time)."""
    if not is_url(location):
        return Path(location)
    url = str(location).rstrip("/")
    fs, path = filesystem(url)
    target = cache_root() / "tokenizers" / cache_key(url)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        if not fs.isdir(path):
            raise BertkitError(f"tokenizer directory not found: {url}")
        fs.get(path + "/", str(tmp) + "/", recursive=True)
        _replace_dir(tmp, target)
    except (OSError, ValueError) as err:
        raise remote_error(url, err) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _replace_dir(tmp: Path, target: Path) -> None:
    if target.exists():
        trash = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.replace(target, trash / target.name)
        shutil.rmtree(trash, ignore_errors=True)
    os.replace(tmp, target)

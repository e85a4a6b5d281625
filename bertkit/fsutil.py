"""Output directories that are never half-written and never silently overwritten.

Every command that writes a directory builds it under a temporary sibling name and renames it into place
at the end, so an interrupted run leaves no output that looks complete.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError, rust_io_errors_as_os_errors


def check_output_dir(path: Path, overwrite: bool) -> None:
    """Refuse to replace an existing, non-empty directory unless the user said `--overwrite`."""
    if path.exists() and (not path.is_dir() or any(path.iterdir())) and not overwrite:
        raise BertkitError(f"output {path} already exists; pass --overwrite to replace it or choose another path")


@contextlib.contextmanager
def atomic_output_dir(path: Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory next to `path`; on success rename it to `path`, on failure delete it. Its name
    carries this process's id and host, so that if the process is killed a later one can tell the directory is
    dead (`remove_dead_tmp_dirs`)."""
    path = Path(path)
    check_output_dir(path, overwrite)
    path.parent.mkdir(parents=True, exist_ok=True)
    owner = f"{os.getpid()}@{socket.gethostname()}@"
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-{owner}", dir=path.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if path.exists():
        # Move the old output aside first so that a crash between the two renames loses nothing.
        trash = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
        os.replace(path, trash / path.name)
        os.replace(tmp, path)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp, path)


def remove_dead_tmp_dirs(path: Path) -> int:
    """Delete the temporary directories of `path` (`atomic_output_dir`) whose process on this host
    is gone (killed, power loss); returns how many. The owner is in the directory's name, made with it in one step,
    so a process killed at any moment leaves a directory a later one can judge. Another host's are left alone (a
    shared disk): its processes cannot be checked from here."""
    prefix, removed = f".{Path(path).name}.tmp-", 0
    for candidate in Path(path).parent.glob(f"{glob.escape(prefix)}*@*@*"):
        pid, host, _ = candidate.name[len(prefix) :].split("@", 2)
        if host != socket.gethostname() or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # still at work
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # another user's live process
        shutil.rmtree(candidate, ignore_errors=True)
        removed += 1
    return removed


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to `path` via a temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path, what: str) -> Any:
    """Read a JSON file, turning a missing or corrupt file into a one-line error."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BertkitError(f"{what} not found: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BertkitError(f"{what} {path} is not valid JSON: {err}") from None


def save_safetensors(tensors: dict[str, Any], path: Path | str, metadata: dict[str, str] | None = None) -> None:
    """safetensors' `save_file`, whose I/O failures (a full disk) come back as the OSError they are, so that they
    reach the user as one line, and a checkpoint's own handler sees them."""
    from safetensors.torch import save_file

    with rust_io_errors_as_os_errors(path):
        save_file(tensors, str(path), metadata=metadata)


def save_safetensors_atomic(path: Path, tensors: dict[str, Any], metadata: dict[str, str] | None = None) -> None:
    """Tensors to a safetensors file under a temporary name, then renamed: never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        save_safetensors({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, tmp, metadata)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def hash_file_into(digest: Any, path: Path) -> None:
    """Feed a file's bytes to a hashlib digest, a block at a time (files of any size in bounded memory)."""
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)

"""The pre-flight check of a job on several processes (often several machines): before the first step every
rank states what it is about to run, and a job whose ranks disagree stops on every rank with one line.

Under torchrun or the DeepSpeed launcher every node starts its own `bertkit` command. Nothing in the
collectives notices two nodes with different recipes, corpora or teachers: each rank would step with its
own settings and the saved model would match no consistent run. So every rank gathers every other rank's
statement (bertkit version, resolved recipe, command arguments, fingerprints of its input files) and all of
them compare the same list, reach the same verdict and raise the same error; none is left waiting.

A second check runs once rank 0 has made the run directory: every rank must see it, because checkpoints
are written by rank 0 and read by every rank on `--resume` (a filesystem every node mounts at the same
path: NFS, Lustre, GPFS...).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertkit import __version__
from bertkit.engine import dist
from bertkit.errors import BertkitError

# Recipe keys that may differ between nodes: they change how fast a node computes, never what it computes.
NODE_LOCAL_KEYS = frozenset({"engine.threads"})
# Files up to this size are hashed whole; larger ones (corpus shards, weights) by their size and three
# samples, so that a 160 GB corpus is fingerprinted in milliseconds: this tells corpora and teachers apart,
# it does not verify their bytes.
_WHOLE_FILE_BYTES = 1 << 20
_SAMPLE_BYTES = 1 << 16
_VISIBLE_WAIT_SECONDS = 5.0  # NFS clients may cache a directory listing for a few seconds
PROBE_PREFIX = ".bertkit-preflight-"


def fingerprint(path: Path | str | None) -> str:
    """A short digest of a file or directory tree's contents ("absent" when there is none)."""
    if path is None:
        return "none"
    path = Path(path)
    if not path.exists():
        return "absent"
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        relative = file.name if file == path else file.relative_to(path).as_posix()
        digest.update(f"{relative}\0{_file_digest(file)}\0".encode())
    return digest.hexdigest()[:16]


def _file_digest(file: Path) -> str:
    size = file.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with open(file, "rb") as handle:
        if size <= _WHOLE_FILE_BYTES:
            digest.update(handle.read())
        else:
            for offset in (0, size // 2, size - _SAMPLE_BYTES):
                handle.seek(offset)
                digest.update(handle.read(_SAMPLE_BYTES))
    return digest.hexdigest()


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{'optim': {'lr': 1e-4}} -> {'optim.lr': 1e-4}: differences are reported by the recipe's dotted keys."""
    if isinstance(tree, Mapping):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): tree}


def statement(recipe: Any, arguments: Mapping[str, Any], inputs: Mapping[str, Path | str | None]) -> dict[str, Any]:
    """What this rank is about to run, in a form every rank can compare."""
    settings = flatten(recipe.model_dump(mode="json"))
    return {
        "version": __version__,
        "recipe": {key: value for key, value in settings.items() if key not in NODE_LOCAL_KEYS},
        "arguments": {key: str(value) for key, value in arguments.items()},
        "inputs": {name: fingerprint(path) for name, path in inputs.items()},
        "node": socket.gethostname(),
        "local_rank": dist.local_rank(),
    }


def first_difference(statements: list[dict[str, Any]]) -> str | None:
    """The message for the first rank whose statement differs from rank 0's, or None when all agree."""
    reference = statements[0]
    for rank, other in enumerate(statements[1:], start=1):
        where = f"rank {rank} (node {other['node']}, local rank {other['local_rank']})"
        versus = f"rank 0 (node {reference['node']})"
        if other["version"] != reference["version"]:
            return (
                f"{where} runs bertkit {other['version']}, {versus} runs {reference['version']}; "
                "install the same bertkit on every node"
            )
        for section, what, fix in (
            ("recipe", "has", "start every node with the same recipe and --set overrides"),
            ("arguments", "was given", "start every node with the same command line"),
        ):
            theirs, ours = other[section], reference[section]
            for key in sorted(set(theirs) | set(ours)):
                if theirs.get(key) != ours.get(key):
                    return f"{where} {what} {key}={theirs.get(key)} but {versus} {key}={ours.get(key)}; {fix}"
        for name in sorted(set(other["inputs"]) | set(reference["inputs"])):
            theirs, ours = other["inputs"].get(name), reference["inputs"].get(name)
            if theirs == ours:
                continue
            if "absent" in (theirs, ours):
                missing = where if theirs == "absent" else versus
                return f"{missing} cannot find the {name}; every node must see the same files at the same path"
            return (
                f"{where} reads another {name} than {versus} (its files differ); every node must read the "
                "same files (a shared filesystem, or identical copies at the same path)"
            )
    return None


def check_same_job(recipe: Any, arguments: Mapping[str, Any], inputs: Mapping[str, Path | str | None]) -> None:
    """Collective over every rank of the job: raise the same BertkitError on all of them if any differs."""
    if not dist.is_initialized() or dist.world_size() == 1:
        return
    statements = dist.gather_objects(statement(recipe, arguments, inputs))
    if message := first_difference(statements):
        raise BertkitError(f"the nodes of this job disagree: {message}")


def check_run_dir_shared(run_dir: Path) -> None:
    """Collective: every rank must see the run directory rank 0 made (checkpoints are read on every rank)."""
    if not dist.is_initialized() or dist.world_size() == 1:
        return
    probe = run_dir / f"{PROBE_PREFIX}{dist.broadcast_object(secrets.token_hex(8))}"
    if dist.is_main():
        probe.write_text(socket.gethostname(), encoding="utf-8")
    dist.barrier()
    deadline = time.monotonic() + _VISIBLE_WAIT_SECONDS
    while not (seen := probe.is_file()) and time.monotonic() < deadline:
        time.sleep(0.2)
        if run_dir.is_dir():
            os.listdir(run_dir)  # a fresh listing refreshes a stale NFS directory cache
    views = dist.gather_objects((seen, socket.gethostname(), dist.local_rank()))
    dist.barrier()
    if dist.is_main():
        probe.unlink(missing_ok=True)
    blind = [(rank, node) for rank, (visible, node, _) in enumerate(views) if not visible]
    if blind:
        rank, node = blind[0]
        raise BertkitError(
            f"the run directory {run_dir} made on node {views[0][1]} is not visible from node {node} (rank {rank}): "
            "checkpoints are written by rank 0 and read by every rank on --resume, so --output must be on a "
            "filesystem every node mounts at the same path (NFS, Lustre, GPFS...)"
        )

"""Temporary output directories carry their owner in their name: a process killed at any moment leaves one that a
later process removes when its owner is gone from this host, and leaves alone while it lives or when it is
another host's."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from bertkit.fsutil import atomic_output_dir, remove_dead_tmp_dirs


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_only_dead_owners_on_this_host_lose_their_directories(tmp_path: Path) -> None:
    host = socket.gethostname()
    named = {
        "dead": f".out.tmp-{dead_pid()}@{host}@x1",
        "alive": f".out.tmp-{os.getpid()}@{host}@x2",
        "other host": f".out.tmp-{dead_pid()}@not-{host}@x3",
        "no owner": ".out.tmp-x4",
        "other output": f".output.tmp-{dead_pid()}@{host}@x5",
    }
    for name in named.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / "shard.bin").write_bytes(b"\0")
    assert remove_dead_tmp_dirs(tmp_path / "out") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(v for k, v in named.items() if k != "dead")


def test_a_process_killed_inside_an_owned_directory_leaves_it_for_the_next(tmp_path: Path) -> None:
    script = (
        "import os, signal, sys\n"
        "from bertkit.fsutil import atomic_output_dir\n"
        "with atomic_output_dir(sys.argv[1]):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "out")], capture_output=True)
    assert done.returncode == -signal.SIGKILL
    (left,) = tmp_path.iterdir()
    assert left.name.startswith(".out.tmp-") and f"@{socket.gethostname()}@" in left.name
    assert remove_dead_tmp_dirs(tmp_path / "out") == 1 and not list(tmp_path.iterdir())
    with atomic_output_dir(tmp_path / "out") as tmp:
        assert remove_dead_tmp_dirs(tmp_path / "out") == 0 and tmp.is_dir()  # our own: alive
    assert (tmp_path / "out").is_dir()


def test_an_owned_directory_is_renamed_into_place(tmp_path: Path) -> None:
    with atomic_output_dir(tmp_path / "out") as tmp:
        (tmp / "a.txt").write_text("a", "utf-8")
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and (tmp_path / "out" / "a.txt").read_text("utf-8") == "a"

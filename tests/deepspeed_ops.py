"""DeepSpeed's CPU comm op, built once per virtual environment, before the tests run.

DeepSpeed compiles its shared-memory all-reduce (`deepspeed_shm_comm`) with ninja the first time a process starts its
CPU backend, into TORCH_EXTENSIONS_DIR (~/.cache/torch_extensions unless set), and compiles it again whenever another
environment's build is there. The tests keep the build inside the venv (tests/conftest.py sets the directory) and
`make install-test` makes it (`python tests/deepspeed_ops.py`), so that no test pays the compile: a minute and a half
inside the first DeepSpeed test on 2 busy cores, and on every fresh machine.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def extensions_dir() -> Path:
    return Path(sys.prefix) / "torch-extensions"


def use_venv_extensions() -> None:
    """Point this process, and every process it starts, at the venv's build (unless the caller chose another).
    Outside a venv, DeepSpeed's own default stays: sys.prefix may not be writable there."""
    if sys.prefix != sys.base_prefix:
        os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(extensions_dir()))


def build() -> int:
    use_venv_extensions()
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
        print("DeepSpeed has no CPU comm op to build on this machine")
        return 0
    try:
        builder.load(verbose=False)
    except Exception as error:  # noqa: BLE001 - DeepSpeed raises bare RuntimeErrors from its compiler calls
        print(f"error: DeepSpeed could not build its CPU comm op ({error}); its tests need a C++ compiler and ninja",
              file=sys.stderr)  # fmt: skip
        return 1
    where = os.environ.get("TORCH_EXTENSIONS_DIR", "DeepSpeed's default cache (~/.cache/torch_extensions)")
    print(f"DeepSpeed's CPU comm op is built in {where}")
    return 0


if __name__ == "__main__":
    sys.exit(build())

"""The one exception type that reaches the user as a single line and exit code 2."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator


class BertkitError(Exception):
    """Bad input or an impossible request: the CLI prints `error: <message>` and exits 2.

    Raise it with a message that says what is wrong *and* how to fix it; never raise it for bugs.
    """

    exit_code = 2


def os_error_from(err: BaseException, path: object = None) -> OSError | None:
    """The OSError behind a Rust library's I/O failure (safetensors, tokenizers: "... No space left on device (os
    error 28)"), for the one line an OSError gets; None when `err` is not one."""
    # Rust's io::Error as Display ("... (os error 28)") or as Debug ("Os { code: 28, kind: StorageFull, ... }"),
    # as the libraries' versions word it.
    found = re.search(r"\(os error (\d+)\)|Os \{ code: (\d+)", str(err))
    if found is None:
        return None
    code = int(found[1] or found[2])
    return OSError(code, os.strerror(code), *([str(path)] if path is not None else []))


@contextlib.contextmanager
def rust_io_errors_as_os_errors(path: object) -> Iterator[None]:
    """Around a write by safetensors or tokenizers: their I/O failures, plain exceptions, raised as OSError."""
    try:
        yield
    except OSError:
        raise
    except Exception as err:
        if (os_error := os_error_from(err, path)) is None:
            raise
        raise os_error from None

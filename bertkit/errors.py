"""The one exception type that reaches the user as a single line and exit code 2."""

from __future__ import annotations


class BertkitError(Exception):
    """Bad input or an impossible request: the CLI prints `error: <message>` and exits 2.

    Raise it with a message that says what is wrong *and* how to fix it; never raise it for bugs.
    """

    exit_code = 2

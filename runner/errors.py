"""One error type for bad input, so the CLI can print it and exit 2 without a traceback."""

from __future__ import annotations


class RunnerError(Exception):
    """Bad input or a failed step, described for the person who must fix it.

    `where` names the file (and field) at fault, `fix` says what to do about it; both are
    part of the message so nobody has to read a traceback to find them.
    """

    def __init__(self, message: str, *, where: str | None = None, fix: str | None = None):
        self.where = where
        self.fix = fix
        parts = [f"{where}: {message}" if where else message]
        if fix:
            parts.append(f"fix: {fix}")
        super().__init__("\n  ".join(parts))

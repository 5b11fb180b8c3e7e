"""The runner's error types, so the CLI can print any of them and exit 2 without a traceback,
and the exit-code table every command shares.

`RunnerError` is the one every command catches; its kinds (`BadInput`, `StepFailed`,
`ToolFailed`, `ServiceUnreachable`) say which sort of trouble it was, for a caller or a test
that must tell them apart (retry a service, not a typo). They share exit 2: a scheduler acts
the same on each (fix something, then rerun), so a code of their own would add nothing.
Only `IncompleteRun` differs (exit 3), since a resume, not a fix, is what it needs."""

from __future__ import annotations

import errno
import traceback


class RunnerError(Exception):
    """Bad input or a failed step, described for the person who must fix it.

    `where` names the file (and field) at fault, `fix` says what to do about it; both are
    part of the message so nobody has to read a traceback to find them.
    """

    exit_code = 2  # EXIT_BAD_INPUT below; the CLI exits with it

    def __init__(self, message: str, *, where: str | None = None, fix: str | None = None):
        self.message = message
        self.where = where
        self.fix = fix
        parts = [f"{where}: {message}" if where else message]
        if fix:
            parts.append(f"fix: {fix}")
        super().__init__("\n  ".join(elide(part) for part in parts))


class BadInput(RunnerError):
    """A file, field or flag the user gave is wrong: fixing it is the remedy."""


class StepFailed(RunnerError):
    """A step of the runner's own (a compile, a run, a score) could not finish on good input."""


class ToolFailed(RunnerError):
    """An external program the runner calls (iree-compile, nvidia-smi, docker, ...) is missing,
    failed, hung or printed what cannot be read; the message names it and what it said.
    `returncode` (None: it did not exit, or exited 0 with an unreadable answer) and `output`
    are kept for callers that judge what the failure says (an unsupported driver, say)."""

    def __init__(self, message: str, *, where: str | None = None, fix: str | None = None,
                 returncode: int | None = None, output: str = ""):
        super().__init__(message, where=where, fix=fix)
        self.returncode, self.output = returncode, output


class ServiceUnreachable(RunnerError):
    """A service over the network (the history store, an upload target, a registry) did not
    answer or refused the runner's credentials; rerunning once it is back is the remedy."""


ERROR_KINDS = (BadInput, StepFailed, ToolFailed, ServiceUnreachable)


def recorded_name(error: BaseException) -> str:
    """The class name a record (probe.json, run.json's attempt) gives `error`: a kind above
    is recorded as `RunnerError`, as before the kinds existed, so records and reports made
    by this runner and an earlier one read and compare the same; any other class (a
    subclass with a meaning of its own, such as StoreUnavailable, or a Python error) by its
    own name."""
    return "RunnerError" if type(error) in ERROR_KINDS else type(error).__name__


MAX_PART_CHARS = 600  # a huge field quoted back in full would bury the message itself


def elide(text: str, limit: int = MAX_PART_CHARS) -> str:
    """Keeps a message readable when it quotes a huge user value: its head and tail stay,
    the middle becomes a count of what was left out."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 2 // 3], text[-(limit // 3):]
    return f"{head}... ({len(text) - len(head) - len(tail)} characters left out) ...{tail}"


# Exit codes, one table for every `runner` command (shown in each command's help epilog, the
# CLI reference and docs/failure-modes.md), so a CI step can tell "the build is bad" from "the
# command was wrong" from "the run was cut short and can be resumed".
EXIT_OK = 0  # measured and judged (passed), or done where nothing is to judge: a command
# with no verdict, a dry run, a subset or an unscored run (labelled not judged, never PASS)
EXIT_FAILED = 1  # a verdict failed: accuracy out of range, a golden over tolerance, ...
EXIT_BAD_INPUT = 2  # bad input or a failed step, said with where/fix; or nothing to measure or
# judge (every layout skipped, no golden for the SKU): nothing judged
EXIT_INCOMPLETE = 3  # a run stopped with samples missing; `runner run --resume DIR` goes on
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT); SIGTERM gives 143 and SIGHUP 129: 128 + the signal

EXIT_CODES = ((EXIT_OK, "passed / done (also a dry run, and a subset or --no-score run: "
                        "not judged, never PASS)"),
              (EXIT_FAILED, "a verdict failed (accuracy, goldens, benchmarks, --require-full)"),
              (EXIT_BAD_INPUT, "bad input or a failed step, or nothing to measure or judge "
               "(every layout skipped, no golden for the SKU, no history to propose from): "
               "the error names file, field and fix"),
              (EXIT_INCOMPLETE, "run incomplete: samples are missing; the run dir can be resumed"),
              (EXIT_INTERRUPTED, "interrupted: Ctrl-C; 143 SIGTERM, 129 SIGHUP (128 + the "
               "signal); its processes stopped, finished work kept"))


class IncompleteRun(RunnerError):
    """A run dir that lacks samples it asked for: resumable, so not "bad input"."""

    exit_code = EXIT_INCOMPLETE


def is_disk_full(error: BaseException) -> bool:
    """ENOSPC or a quota: the one OSError that means "free space, then resume"."""
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


def clear_frames(error: BaseException) -> None:
    """Drops the local variables of every finished frame in `error`'s traceback and in the
    tracebacks of the errors it chains (`__cause__`, `__context__`); the message and the
    traceback's lines stay. Why: a frame of a failed IREE call holds the runtime's objects
    (its invoker, device buffers). Kept by an exception that outlives the call (a caller
    keeps it, or it sits in a reference cycle the garbage collector frees at some later
    moment, in whatever code runs then), they would be freed after their device is: that
    deadlocks inside IREE's runtime, waiting on its task executor's threads, or crashes
    the interpreter. Frames still running (the caller's) cannot be cleared and are left."""
    todo, seen = [error], set()
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        traceback.clear_frames(e.__traceback__)
        todo.extend(c for c in (e.__cause__, e.__context__) if c is not None)

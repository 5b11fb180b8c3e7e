"""The two ways a test runs `runner`, one helper each.

`cli(...)` runs the command in this process (`runner.cli.main.main(argv)`), for what is about the
command's words: parsing, help, errors, reports, dry runs. A case then costs no interpreter
start and no import of the CLI (about a second each on a 2-core machine).

`runner_process(...)` and `start_runner(...)` run `python -m runner` as a process of its own,
for what is about the process: signals, process groups, orphaned workers, the exit status of
a killed process, what reaches a terminal or a closed pipe.

A test that signals a process starts it as an interactive shell would (`as_from_a_terminal`):
the suite itself may run with stop signals ignored (`nohup` ignores SIGHUP; a shell without job
control starts a background job with SIGINT ignored), children inherit that, and the runner
rightly keeps an ignored signal ignored.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.base import iree_tools
from runner.cli.main import main

StrPath = str | Path


@dataclass(frozen=True)
class Ran:
    """What a command did: its exit code and what it printed (the fields of a finished
    `subprocess.run`, so a check reads the same whichever way the command ran)."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def _as_a_process_would(cwd: StrPath | None, env: Mapping[str, str] | None) -> Iterator[None]:
    """The working directory and environment a process started with `cwd`/`env` would
    have, and the process-wide state a command sets, put back afterwards: `--iree-tools`
    exports $IREE_TOOL_PATH (and notes that it did), `--resume` goes to the directory the
    attempt ran in."""
    saved_env, saved_cwd, saved_flag = dict(os.environ), os.getcwd(), iree_tools._from_flag
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        iree_tools._from_flag = saved_flag
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def cli(*args: StrPath, cwd: StrPath | None = None, env: Mapping[str, str] | None = None
        ) -> Ran:
    """`runner ARGS` in this process, its output captured: the exit code `runner ARGS`
    gives (argparse's exits, `--help` and usage errors, included)."""
    argv = tuple(str(a) for a in args)
    out, err = io.StringIO(), io.StringIO()
    with _as_a_process_would(cwd, env), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as e:  # argparse: --help, --version, usage errors
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return Ran(argv, code, out.getvalue(), err.getvalue())


def runner_argv(*args: StrPath) -> list[str]:
    return [sys.executable, "-m", "runner", *(str(a) for a in args)]


def runner_process(*args: StrPath, timeout: float = 600, **run: Any
                   ) -> subprocess.CompletedProcess:
    """`python -m runner ARGS` as a process of its own, to its end, output captured."""
    return subprocess.run(runner_argv(*args), capture_output=True, text=True, timeout=timeout,
                          check=False, **run)


def start_runner(*args: StrPath, **popen: Any) -> subprocess.Popen:
    """`python -m runner ARGS` started in a session of its own (so a test can signal its
    whole group), output piped."""
    for key, value in (("stdout", subprocess.PIPE), ("stderr", subprocess.PIPE),
                       ("text", True), ("start_new_session", True)):
        popen.setdefault(key, value)
    return subprocess.Popen(runner_argv(*args), **popen)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def as_from_a_terminal() -> None:
    """For `preexec_fn`: the child's stop signals at their defaults, as an interactive shell
    starts a command, whatever this suite inherited (see the module docstring)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


@contextlib.contextmanager
def at_default(sig: int) -> Iterator[None]:
    """`sig` at its default in this process for the block (Python's own handler for SIGINT),
    then as it was: the in-process form of `as_from_a_terminal`."""
    default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
    before = signal.signal(sig, default)
    try:
        yield
    finally:
        signal.signal(sig, before)

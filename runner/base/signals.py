"""SIGINT, SIGTERM and SIGHUP end a command the same way: as `Interrupted` in the main thread.

Python turns only SIGINT into an exception (KeyboardInterrupt); SIGTERM (`timeout`, a
scheduler's time limit, `docker stop`) and SIGHUP (a closed terminal or ssh session) kill the
process outright by default, skipping every cleanup: workers are not stopped, an IREE device
is not closed, the attempt is not recorded. Here all three raise `Interrupted`, a
KeyboardInterrupt, so every `except BaseException`/`finally` on the way out runs, and the
CLI exits with 128 + the signal's number, as a shell reports a process a signal ended.

The first signal raises; one arriving while that cleanup runs is noted and not raised, so
the cleanup (bounded: every wait in it has a deadline) finishes instead of being cut short
half way. A signal a parent set to be ignored (`nohup` ignores SIGHUP) stays ignored. Once a
process's work is done and its exit status decided (`work_done`), the three are ignored to
its end: Python's shutdown puts the default action back before it frees the modules, so a
signal there would kill the process by the signal itself (exit -N, as if killed mid-work,
with nothing recorded), and a signal after the work finished must not change its status.

`deferred()` marks a stretch that must not be cut in the middle: there a signal is held and
raised when it ends. IREE's Python objects do not keep what they use alive, so an exception
raised half way through an IREE call leaves a device buffer in a traceback that outlives the
session's device, and the interpreter crashes freeing it (runner/model/pipeline/
iree_session.py defers around every call into the runtime).

Python swallows an exception raised inside a finalizer (a `__del__`, a weakref callback, the
garbage collector's): it prints "Exception ignored in ..." and the code goes on. A signal
landing there would be lost and the command would run to its end. So an `Interrupted` that
reaches `sys.unraisablehook` re-arms the handler that raised it and sends the signal again,
to land after the finalizer.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType, ModuleType
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A command (or worker) stopped by a signal; `exit_code` is what a shell reports."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def exit_code(error: KeyboardInterrupt) -> int:
    """128 + the signal; a bare KeyboardInterrupt (raised by other code) is SIGINT's 130."""
    return error.exit_code if isinstance(error, Interrupted) else 128 + signal.SIGINT


def signal_name(error: KeyboardInterrupt) -> str:
    return error.name if isinstance(error, Interrupted) else "SIGINT"


class _Armed:
    """How to re-arm the handler that raised last (None: no handler of ours raises now),
    and the unraisable hook that was there before ours."""

    rearm: Callable[[], None] | None = None
    previous_hook: Callable[[Any], Any] | None = None


def _swallowed(unraisable: Any) -> None:
    """`sys.unraisablehook`: an `Interrupted` that a finalizer swallowed is sent again (see
    the module's docstring); anything else goes to the hook that was there before."""
    error = unraisable.exc_value
    if isinstance(error, Interrupted) and _Armed.rearm is not None:
        _Armed.rearm()
        again = threading.Timer(0.01, os.kill, (os.getpid(), error.signum))
        again.daemon = True
        again.start()
        return
    (_Armed.previous_hook or sys.__unraisablehook__)(unraisable)


def _arm(rearm: Callable[[], None]) -> Callable[[], None] | None:
    """Our handler is set: `rearm` puts it back after a swallowed raise. Returns what was
    armed before, for the caller to put back when it leaves."""
    if sys.unraisablehook is not _swallowed:
        _Armed.previous_hook, sys.unraisablehook = sys.unraisablehook, _swallowed
    before, _Armed.rearm = _Armed.rearm, rearm
    return before


def _exit_quietly(signum: int, frame: FrameType | None) -> None:
    """After the command is done: a late signal ends the process without a traceback."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    os._exit(128 + signum)


def exit_at_once() -> None:
    """SIGINT/SIGTERM/SIGHUP end this process at once, with 128 + the signal and no
    traceback: for a process with nothing to close (a LoadGen test, whose half-written logs
    are not kept), or one that is still importing."""
    for signum in HANDLED:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _exit_quietly)


def work_done() -> None:
    """This process's work is finished and its exit status decided: SIGINT, SIGTERM and
    SIGHUP are ignored from here to its end (see the module's docstring). Only the main
    thread can set handlers; elsewhere it does nothing."""
    if threading.current_thread() is threading.main_thread():
        for signum in HANDLED:
            signal.signal(signum, signal.SIG_IGN)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """After `work_done`: a stretch that a signal may cut short without losing anything (the
    results already on disk copied elsewhere, a wait on another's lock), so SIGINT, SIGTERM
    and SIGHUP raise `Interrupted` inside it again; ignored again when it ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        for each in HANDLED:  # once: the stretch's own cleanup is not cut short
            signal.signal(each, signal.SIG_IGN)
        raise Interrupted(signum)

    def arm() -> None:
        for signum in HANDLED:
            signal.signal(signum, handler)

    arm()
    before = _arm(arm)
    try:
        yield
    finally:
        _Armed.rearm = before
        work_done()


def start_child(argv: list[str], **popen: Any) -> subprocess.Popen:
    """Starts a Python child (a worker, a LoadGen test) with SIGINT/SIGTERM/SIGHUP blocked
    until it calls `handlers_ready()`. Ctrl-C reaches the whole process group: a child
    still starting Python or importing when it arrives would end in a KeyboardInterrupt
    traceback on the user's terminal. A blocked signal waits instead (the blocked set
    survives fork and exec) and reaches the child once its own handlers are set."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
    try:
        return subprocess.Popen(argv, **popen)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def handlers_ready() -> None:
    """A child of `start_child` has set its handlers: the signals held until now arrive."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED)


class _Held:
    """The main thread's deferred stretches (nested) and the signal held meanwhile."""

    depth = 0
    signum: int | None = None


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A signal arriving inside is raised (as `Interrupted`) once the stretch is over, in
    the caller's frame, not in the middle of it. Elsewhere than the main thread (where a
    signal is never raised) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _Held.depth += 1
    try:
        yield
    finally:
        _Held.depth -= 1
    if _Held.depth == 0 and _Held.signum is not None:
        signum, _Held.signum = _Held.signum, None
        raise Interrupted(signum)


def import_held(name: str) -> ModuleType:
    """`importlib.import_module(name)` with a signal held to its end (`deferred`). IREE's
    compiler and runtime packages load nanobind extensions that call back into Python while
    they initialise: an `Interrupted` raised in such a callback cannot cross the C++ frames,
    and the process ends in std::terminate ("terminate called after throwing an instance of
    'nanobind::python_error'", exit -6) with nothing recorded. Every import of `iree.*` in
    the runner goes through here (tests/test_signals_imports.py checks)."""
    with deferred():
        return importlib.import_module(name)


@contextlib.contextmanager
def raised_as_interrupted(note: str = "", restore: bool = True) -> Iterator[None]:
    """While inside: SIGINT/SIGTERM/SIGHUP raise `Interrupted` (once). Outside the main
    thread (a signal handler can only be set there) it does nothing. `note` is printed
    when a second signal arrives during cleanup. On leaving, the handlers before are put
    back (`restore`), or (a process that is about to exit) the signals are ignored to its
    end (`work_done`)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    first: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if first:
            print(f"\n{signal.Signals(signum).name} while stopping after "
                  f"{signal.Signals(first[0]).name}: still stopping{note}", file=sys.stderr)
            return
        first.append(signum)
        if _Held.depth:
            _Held.signum = signum  # raised when the deferred stretch ends
            return
        raise Interrupted(signum)

    previous = {}
    for signum in HANDLED:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, handler)
    before = _arm(first.clear)
    try:
        yield
    finally:
        _Armed.rearm = before
        if restore:
            for signum, old in previous.items():
                signal.signal(signum, old)
        else:
            work_done()

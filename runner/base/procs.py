"""The processes a command started, found and ended before it exits.

A driver's workers, LoadGen test process, `iree-benchmark-module`, `iree-compile` and the
child `runner` commands a bisect runs each hold something: a GPU's memory, a run dir they
write into, a LoadGen queue. When the driver stops (a signal), it must not exit before they
have: a process still tearing down its device after its driver's exit status is seen is
what a scheduler or a GPU check reads as a leak.

`ProcessGuard` notes the descendants that exist when a command starts (a test calling the
CLI in-process has its own), and on the way out stops only the ones started since and what
runs below them (not what an older process starts meanwhile): SIGTERM
to each direct child first (a child `runner` stops its own workers in order), SIGKILL to
every one still alive after the grace, then waits until each is gone, reaping our own
children. As a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`), the driver adopts the
children of a child that died, so none escapes to init unwaited.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

# How long a process gets to stop on SIGTERM (close its IREE device, write its finished
# samples) before SIGKILL; `RUNNER_STOP_GRACE_S` changes it.
STOP_GRACE_S = float(os.environ.get("RUNNER_STOP_GRACE_S", "10"))
KILL_WAIT_S = 10.0  # after SIGKILL: the kernel tearing a process (and its device) down
POLL_S = 0.05
PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class Proc:
    """A process, with its start time so a reused pid is not taken for it."""

    pid: int
    ppid: int
    start: str
    state: str

    def alive(self) -> bool:
        now = read_proc(self.pid)
        return now is not None and now.start == self.start and now.state not in "ZX"


def read_proc(pid: int) -> Proc | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return Proc(pid, int(fields[1]), fields[19], fields[0])


def all_processes() -> list[Proc]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (proc := read_proc(int(entry.name))) is not None:
            out.append(proc)
    return out


def descendants(pid: int | None = None, apart_from: Collection[tuple[int, str]] = ()
                ) -> list[Proc]:
    """Every live process below `pid` (default: this one), children before grandchildren;
    a process in `apart_from` (pid, start time), and everything below it, left out."""
    root = os.getpid() if pid is None else pid
    by_parent: dict[int, list[Proc]] = {}
    for proc in all_processes():
        by_parent.setdefault(proc.ppid, []).append(proc)
    out, todo = [], [root]
    while todo:
        for child in by_parent.get(todo.pop(0), []):
            if (child.pid, child.start) not in apart_from:
                out.append(child)
                todo.append(child.pid)
    return out


def become_subreaper() -> None:
    """Orphans below this process are reparented to it rather than to init (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _reap(procs: Iterable[Proc]) -> None:
    """Collects those of `procs` that are our children and have ended (only these: a test
    calling the CLI in-process keeps its own children's exit codes)."""
    for proc in procs:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(proc.pid, os.WNOHANG)


def send_signal(procs: Iterable[Proc], sig: int) -> None:
    """`sig` to each of `procs` still alive (not a reused pid), none reaped."""
    for proc in procs:
        if proc.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, sig)


def wait_gone(procs: Iterable[Proc], timeout: float, reap: bool = True) -> list[Proc]:
    """Waits until every process in `procs` has ended (reaping our children when `reap`);
    the ones still alive at the deadline."""
    every = list(procs)
    deadline = time.monotonic() + timeout
    while True:
        if reap:
            _reap(every)
        left = [p for p in every if p.alive()]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(POLL_S)


class ProcessGuard:
    """Stops, on the way out of a command, the processes it started (see the module)."""

    def __init__(self) -> None:
        self.before = {(p.pid, p.start) for p in descendants()}

    def started(self) -> list[Proc]:
        """The processes started since, and below them. Not what a process that was
        already there starts meanwhile: a test calling the CLI in-process may hold a
        `runner` of its own whose new workers are that driver's, not this command's."""
        return descendants(apart_from=self.before)

    def stop(self, grace: float = STOP_GRACE_S,
             say: Callable[[str], None] = lambda line: None) -> list[Proc]:
        """SIGTERM to the direct children started since, SIGKILL to whatever of them (or
        below them) is alive after `grace`, then waits until all are gone. Returns the
        processes that were still running when it began."""
        started = self.started()
        if not started:
            return []
        me = os.getpid()
        say(f"stopping {len(started)} process(es) this command started: "
            + ", ".join(str(p.pid) for p in started[:8]) + (" ..." if len(started) > 8 else ""))
        send_signal([p for p in started if p.ppid == me], signal.SIGTERM)
        wait_gone(started, grace, reap=False)  # children reaped below, all at once
        left = [p for p in {*started, *self.started()} if p.alive()]
        if left:
            say(f"{len(left)} process(es) still running after {grace:.0f}s: SIGKILL")
            send_signal(left, signal.SIGKILL)
        stuck = wait_gone([*started, *left], KILL_WAIT_S)
        if stuck:
            say("still not gone: " + ", ".join(str(p.pid) for p in stuck))
        return started

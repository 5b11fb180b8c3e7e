"""The signal/rerun battery: a command stopped at seeded random points by SIGINT, SIGTERM
and SIGHUP, and run again after each, as a lab engineer whose job a scheduler or a closed
session stopped would. Every attempt must end cleanly (its exit code, no traceback), leave
no process of its own running once its exit status is seen, and keep what it finished; a
rerun must go on as the command's help says: `resumes` (the same command again finishes
it) or `refuses` (refused at once, naming `--resume DIR` and another `--out`, writing
nothing; `--resume DIR` then finishes it).

SIGINT goes to the command's process group (Ctrl-C in a terminal), SIGTERM to its pid (a
scheduler, `kill`), SIGHUP to its group (a closed session). The delays come from a seed
(`RUNNER_SIGNAL_SEED`, default 35, and the slow tier's further seeds), printed with any
failure so a case can be replayed, as fractions of the command's own run time, measured here
first (a fast machine and a loaded one alike: a signal falls while the command runs). The
signals of one battery fall in separate strata of that time, from its start to its end, so
each battery covers the whole run; `attempt_at_its_end` signals a command the moment it
prints its last line, where it finishes its work and exits.

The battery is for the mechanism every command shares (the command wrapper's stop). A
single command's own stop is `stop_and_go_on`: one signal at a point of the command's own
state (its first finished part, a process it started, its claimed --out) and its rerun,
checked the same way, with no timed run before it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest
from cli_support import STOP_SIGNALS, as_from_a_terminal, cli, start_runner
from shared_work import once

from runner.base.outdir import RECORD, REFUSES
from runner.base.procs import Proc, descendants

SEED = int(os.environ.get("RUNNER_SIGNAL_SEED", "35"))
MORE_SEEDS = (SEED + 1, SEED + 2)  # the slow tier's batteries of the commands stopped most
TO_GROUP = {signal.SIGINT: True, signal.SIGTERM: False, signal.SIGHUP: True}
# PYTHONFAULTHANDLER: a crash in any of its processes (the driver, a worker, a test
# process) prints "Fatal Python error" where the battery looks for it.
ENV = {**os.environ, "RUNNER_PROGRESS": "plain", "RUNNER_HEARTBEAT_STALE_S": "600",
       "PYTHONFAULTHANDLER": "1"}
CRASH = "Fatal Python error"
ATTEMPT_TIMEOUT_S = 600
EARLIEST, LATEST = 0.05, 1.0  # where in the command's run time the signals fall
_DURATIONS: dict[str, float] = {}
_LAST_LINES: dict[str, str] = {}
_SHARED: list[pytest.TempPathFactory] = []  # share_timings


def done_keys(out: Path) -> set[str]:
    """The parts an attempt recorded as finished (runner/base/outdir.py)."""
    try:
        steps = json.loads((out / RECORD).read_text()).get("steps", {})
    except (OSError, ValueError):
        return set()
    return {name for name, step in steps.items() if step.get("status") == "finished"}


@dataclass(frozen=True)
class Command:
    name: str
    argv: Callable[[Path], list[str]]  # out dir -> the command line after `runner`
    rule: str  # runner.base.outdir.RESUMES | REFUSES, as its --help says
    finished: Callable[[Path], bool]  # its complete output is there
    kept: Callable[[Path], set[str]] = done_keys  # finished work no later attempt may lose
    ok: tuple[int, ...] = (0,)
    cwd: Path | None = None


@dataclass
class Attempt:
    argv: list[str]
    sig: int | None
    delay: float
    rc: int
    stderr: str
    left: list[Proc] = field(default_factory=list)
    seed: int = SEED

    @property
    def interrupted(self) -> bool:
        """Ended by the signal: 128 + its number, or (sent while the interpreter itself
        still started, before any of the runner's code ran) killed by it, saying nothing."""
        return self.sig is not None and (self.rc == 128 + self.sig or (
            self.rc == -self.sig and not self.stderr.strip()))

    def describe(self) -> str:
        what = f"{signal.Signals(self.sig).name} after {self.delay:.2f}s" if self.sig else "-"
        return (f"runner {' '.join(self.argv)} [{what}] -> exit {self.rc} (seed {self.seed})\n"
                f"{self.stderr[-3000:]}")


def _start(cmd: Command, argv: list[str], both: bool = False) -> subprocess.Popen:
    """The command started as an interactive shell starts it; its stderr piped (and its
    stdout into the same pipe: `both`)."""
    out = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT) if both else dict(
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return start_runner(*argv, cwd=cmd.cwd, env=ENV, preexec_fn=as_from_a_terminal, **out)


def _lines(proc: subprocess.Popen) -> IO[str]:
    """The pipe the command's messages come through (read by line; a generator over it
    would close it when the reader stops early, and the command would then write into a
    closed pipe)."""
    pipe = proc.stderr or proc.stdout
    assert pipe is not None
    return pipe


def _send(proc: subprocess.Popen, sig: int) -> list[Proc]:
    """`sig` to the command as the battery sends it; the processes below it just before."""
    below = descendants(proc.pid)
    if TO_GROUP[sig]:
        os.killpg(proc.pid, sig)
    else:
        os.kill(proc.pid, sig)
    return below


def _ended(proc: subprocess.Popen, argv: list[str], sig: int | None, delay: float,
           below: list[Proc], before: str = "") -> Attempt:
    """Waits for the command's exit status (killing its group if it outlives the wait);
    `left` is every process of `below` still alive once that status is seen."""
    try:
        out, err = proc.communicate(timeout=ATTEMPT_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    left = [p for p in below if p.alive()]
    return Attempt(argv, sig, delay, proc.returncode, before + (out or "") + (err or ""), left)


def attempt(cmd: Command, argv: list[str], sig: int | None = None, delay: float = 0.0,
            seed: int = SEED) -> Attempt:
    """Runs `runner ARGV`, sends `sig` after `delay` seconds (when it still runs) and
    waits for its exit status; `seed` is the one that chose the delay, for its report."""
    proc = _start(cmd, argv)
    below: list[Proc] = []
    sent = False
    if sig is not None:
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            below, sent = _send(proc, sig), True
    ended = _ended(proc, argv, sig if sent else None, delay, below)
    return dataclasses.replace(ended, seed=seed)


def _running(pid: int, module: str) -> bool:
    """A process below `pid` runs `python -m MODULE` (it has exec'd: Python is starting)."""
    for proc in descendants(pid):
        try:
            argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if module.encode() in argv:
            return True
    return False


def attempt_as_child_starts(cmd: Command, argv: list[str], sig: int, prefix: str,
                            module: str) -> Attempt:
    """Runs `runner ARGV` and, once it has printed a line starting with `prefix`, sends
    `sig` the moment a child running `python -m MODULE` appears (still starting Python)."""
    proc = _start(cmd, argv)
    seen, below, sent, start = [], [], False, time.monotonic()
    for line in _lines(proc):
        seen.append(line)
        if line.startswith(prefix):
            while proc.poll() is None and time.monotonic() - start < ATTEMPT_TIMEOUT_S:
                if _running(proc.pid, module):
                    below, sent = _send(proc, sig), True
                    break
                time.sleep(0.002)
            break
    return _ended(proc, argv, sig if sent else None, time.monotonic() - start, below,
                  "".join(seen))


def attempt_when(cmd: Command, argv: list[str], sig: int, ready: Callable[[int], bool]
                 ) -> Attempt:
    """Runs `runner ARGV` and sends `sig` the moment `ready(its pid)` holds (polled every
    few milliseconds; a state the command itself writes, such as a stage in a file)."""
    proc = _start(cmd, argv)
    below, sent, start = [], False, time.monotonic()
    while proc.poll() is None and time.monotonic() - start < ATTEMPT_TIMEOUT_S:
        if ready(proc.pid):
            below, sent = _send(proc, sig), True
            break
        time.sleep(0.005)
    return _ended(proc, argv, sig if sent else None, time.monotonic() - start, below)


def share_timings(factory: pytest.TempPathFactory) -> None:
    """`duration` keeps its timings where every process of the pytest session sees them
    (tests/shared_work.py): each command is timed once per session, not once per worker."""
    _SHARED[:] = [factory]


def duration(cmd: Command, tmp: Path) -> float:
    """Seconds the command takes on this machine now, start to end (once per command, per
    session after `share_timings`): run to its end in a directory of its own under `tmp`,
    and checked as `finish` checks a run (clean, complete). Its last line is kept for
    `attempt_at_its_end`."""
    if cmd.name in _DURATIONS:
        return _DURATIONS[cmd.name]
    with contextlib.ExitStack() as stack:
        saved = None
        if _SHARED:
            name = "battery-timed-" + re.sub(r"\W", "-", cmd.name)
            saved = stack.enter_context(once(_SHARED[0], name)) / f"{name}.json"
        if saved is not None and saved.is_file():
            timing = json.loads(saved.read_text())
        else:
            timing = _timed(cmd, tmp)
            if saved is not None:
                saved.write_text(json.dumps(timing))
    _DURATIONS[cmd.name], _LAST_LINES[cmd.name] = timing["seconds"], timing["last_line"]
    return _DURATIONS[cmd.name]


def _timed(cmd: Command, tmp: Path) -> dict:
    """The command run to its end in `tmp`/timed, checked: its seconds and last line."""
    start = time.monotonic()
    proc = _start(cmd, cmd.argv(tmp / "timed"), both=True)
    whole = _ended(proc, cmd.argv(tmp / "timed"), None, 0.0, [])
    seconds = time.monotonic() - start
    check_clean(cmd, whole, tmp / "timed")  # as `finish` checks a run into a new dir
    assert cmd.finished(tmp / "timed"), whole.describe()
    return {"seconds": seconds, "last_line": _shape(
        whole.stderr.rstrip("\n").rsplit("\n", 1)[-1], tmp / "timed")}


def _shape(line: str, out: Path) -> str:
    """A line of output as any run of the command prints it: its out dir and its numbers
    (times, rates) left out."""
    return re.sub(r"\d+(\.\d+)?", "#", line.replace(str(out), "OUT"))


def attempt_at_its_end(cmd: Command, tmp: Path, sig: int) -> tuple[Attempt, Path]:
    """Runs the command into a new out dir and sends `sig` the moment it prints the last
    line its timed run printed (`_shape`): its work done, it is recording it and exiting (where a
    handler put back, or Python's own shutdown, once let a signal kill it by the signal
    itself or turn finished work into an exit status of 128 + N)."""
    duration(cmd, tmp)
    last, out = _LAST_LINES[cmd.name], tmp / "at-end"
    argv = cmd.argv(out)
    proc = _start(cmd, argv, both=True)
    seen, below, sent, start = [], [], False, time.monotonic()
    for line in _lines(proc):
        seen.append(line)
        if _shape(line.rstrip("\n"), out) == last:
            below, sent = _send(proc, sig), True
            break
    return _ended(proc, argv, sig if sent else None, time.monotonic() - start, below,
                  "".join(seen)), out


def check_clean(cmd: Command, a: Attempt, out: Path) -> None:
    """The attempt ended cleanly: its exit code, no traceback or crash, nothing left running."""
    assert "Traceback" not in a.stderr and CRASH not in a.stderr, a.describe()
    for log in out.rglob("*.log") if out.is_dir() else ():
        assert CRASH not in log.read_text(errors="replace"), f"{log}\n{a.describe()}"
    assert not a.left, f"left running: {a.left}\n{a.describe()}"
    assert a.interrupted or a.rc in cmd.ok, a.describe()
    if a.interrupted:  # (a signal while it still imports ends it without a word)
        assert f"interrupted ({signal.Signals(a.sig).name})" in a.stderr \
            or not a.stderr.strip(), a.describe()


def _status(out: Path) -> str | None:
    """The attempt record's status: finished, interrupted, failed (None: no record)."""
    try:
        return json.loads((out / RECORD).read_text()).get("status")
    except (OSError, ValueError):
        return None


def _snapshot(out: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} \
        if out.is_dir() else {}


def strata(rng: random.Random, n: int) -> list[float]:
    """`n` points of a command's run time (fractions from EARLIEST to LATEST), one in each
    of `n` equal strata, the strata in a seeded order: a battery's signals fall early, in
    the middle and late alike, whichever signal falls where."""
    width = (LATEST - EARLIEST) / n
    order = rng.sample(range(n), n)
    return [EARLIEST + width * (k + rng.random()) for k in order]


def run_battery(cmd: Command, tmp: Path, signals: tuple[int, ...] = STOP_SIGNALS,
                seed: int = SEED) -> list[Attempt]:
    """Each of `signals` once, at a seeded random point of its own stratum of the run, each
    followed by the command's rerun; then the last attempt run to its end (where the last
    signal missed, leaving a new out dir no attempt went into, the timed run of `duration`
    was that run into a new dir, checked as `finish` checks one). Returns every attempt,
    for the caller's checks (tests/test_signals.py signals_for says which signals each
    command gets)."""
    rng = random.Random(f"{seed}:{cmd.name}")
    seconds = duration(cmd, tmp)
    history: list[Attempt] = []
    n, out = 0, tmp / "out-0"
    argv = cmd.argv(out)
    kept: set[str] = set()
    fresh = True  # no attempt has gone into `out` yet
    for sig, at in zip(signals, strata(rng, len(signals)), strict=True):
        a = attempt(cmd, argv, sig, seconds * at, seed)
        history.append(a)
        fresh = False
        check_clean(cmd, a, out)
        now = cmd.kept(out)
        assert kept <= now, f"finished work lost: {sorted(kept - now)}\n{a.describe()}"
        kept = now
        if not a.interrupted or _status(out) == "finished":  # it finished first
            history += _rerun_finished(cmd, out, seed)
            n += 1
            out, kept, fresh = tmp / f"out-{n}", set(), True
            argv = cmd.argv(out)
            continue
        argv = _rerun_interrupted(cmd, out, history, seed)
    if not fresh:  # (a new out dir run to its end: the timed run, checked as `finish` would)
        history.append(finish(cmd, argv, out, kept, seed))
    return history


def finish(cmd: Command, argv: list[str], out: Path, kept: set[str], seed: int = SEED
           ) -> Attempt:
    """The last attempt, run to its end: clean, complete, and keeping `kept`."""
    last = attempt(cmd, argv, seed=seed)
    check_clean(cmd, last, out)
    assert last.rc in cmd.ok and cmd.finished(out), last.describe()
    assert kept <= cmd.kept(out), last.describe()
    return last


def went_on(cmd: Command, a: Attempt, out: Path) -> list[Attempt]:
    """After attempt `a` into `out` ended cleanly: finished, or (stopped before it recorded
    its work as finished) run again as the command's help says, to its end."""
    if not a.interrupted or _status(out) == "finished":
        assert cmd.finished(out), a.describe()
        return []
    history: list[Attempt] = []
    argv = _rerun_interrupted(cmd, out, history, a.seed)
    return [*history, finish(cmd, argv, out, cmd.kept(out), a.seed)]


Point = Callable[[Path, int], bool]  # (its out dir, its pid) -> the command is there now


def claimed(out: Path, pid: int) -> bool:
    """The command has claimed its --out (its attempt record is the first file it writes):
    its own work runs from here."""
    return (out / RECORD).is_file()


def _children(pid: int) -> bool:
    """A process `pid` started runs (the kernel's list of each thread's children: reading
    every process of /proc each poll would cost the test a core)."""
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            if task.read_text().strip():
                return True
    return False


def running_a_child(out: Path, pid: int) -> bool:
    """Claimed, and a process the command started runs (a tool, a test's process): the
    stop has that one to end too."""
    return claimed(out, pid) and _children(pid)


def finished_a_part(cmd: Command) -> Point:
    """The command's first finished part is recorded (`cmd.kept`): the earliest point a
    rerun's keeping shows."""
    return lambda out, pid: bool(cmd.kept(out))


def stop_and_go_on(cmd: Command, tmp: Path, sig: int, at: Point, quick: bool = False
                   ) -> list[Attempt]:
    """One command's stop, where the stop mechanism itself (the command wrapper, every
    signal, seeded points) has its battery through `runner run`: `sig` the moment the
    command reaches `at`, then checked as the battery checks an attempt (its exit code, no
    traceback or crash, nothing left running, what had finished when the signal came still
    kept), and run again into the same --out as its help says, to its end, keeping that.
    The point is the command's own state, not a fraction of its run time, so no timed run
    comes first. `quick`: the command's work after `at` takes milliseconds, so the signal
    may come once it is done, when the command ignores it (runner.base.signals.work_done)
    and ends finished; the same command into the same --out then goes on as its help says
    for a finished attempt."""
    out, seen = tmp / "out", set()

    def ready(pid: int) -> bool:
        if not at(out, pid):
            return False
        seen.update(cmd.kept(out))
        return True

    a = attempt_when(cmd, cmd.argv(out), sig, ready)
    assert a.interrupted or (quick and a.sig), f"it ended before the signal\n{a.describe()}"
    check_clean(cmd, a, out)
    now = cmd.kept(out)
    assert seen <= now, f"finished work lost: {sorted(seen - now)}\n{a.describe()}"
    if not a.interrupted:
        assert _status(out) == "finished", a.describe()
        return [a, *_rerun_finished(cmd, out, a.seed)]
    return [a, *went_on(cmd, a, out)]


def _rerun_interrupted(cmd: Command, out: Path, history: list[Attempt], seed: int
                       ) -> list[str]:
    """The command line that goes on: the same one (`resumes`), or, after checking that
    the same one is refused at once and writes nothing, `--resume DIR`."""
    argv = cmd.argv(out)
    if cmd.rule != REFUSES or not (out / RECORD).is_file():
        return argv  # (stopped before it wrote anything: nothing of it is left to refuse)
    before = _snapshot(out)
    refused = _said(cmd, argv, seed)
    history.append(refused)
    assert refused.rc == 2 and f"--resume {out}" in refused.stderr \
        and "another --out" in refused.stderr, refused.describe()
    assert _snapshot(out) == before, refused.describe()
    return _resume_argv(cmd, out)


def _resume_argv(cmd: Command, out: Path) -> list[str]:
    """`runner CMD --resume DIR`: no other flag (the attempt recorded them)."""
    return [*cmd.name.split(), "--resume", str(out)]


def _rerun_finished(cmd: Command, out: Path, seed: int) -> list[Attempt]:
    """A finished attempt run again: a refusing command says so and points to another
    --out (its --resume: nothing to do); a resuming one does it again, keeping its parts."""
    assert cmd.finished(out)
    if cmd.rule == REFUSES:
        again = _said(cmd, cmd.argv(out), seed)
        assert again.rc == 2 and "finished" in again.stderr, again.describe()
        resumed = _said(cmd, _resume_argv(cmd, out), seed)
        assert resumed.rc == 0 and ("nothing to resume" in resumed.stderr
                                    or "nothing to do" in resumed.stderr), resumed.describe()
        return [again, resumed]
    again = attempt(cmd, cmd.argv(out), seed=seed)
    assert again.rc in cmd.ok, again.describe()
    return [again]


def _said(cmd: Command, argv: list[str], seed: int) -> Attempt:
    """`runner ARGV` where it only answers, in this process (tests/cli_support.py `cli`):
    a refused rerun, or `--resume` of a finished attempt, decided from the --out before
    any work (runner/cli/output.py), is the command's words, not its process's."""
    ran = cli(*argv, cwd=cmd.cwd, env=ENV)
    return Attempt(argv, None, 0.0, ran.returncode, ran.stdout + ran.stderr, seed=seed)

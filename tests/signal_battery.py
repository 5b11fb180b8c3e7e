"""The signal/rerun battery: a command stopped at seeded random points by SIGINT, SIGTERM
and SIGHUP, and run again after each, as a lab engineer whose job a scheduler or a closed
session stopped would. Every attempt must end cleanly (its exit code, no traceback), leave
no process of its own running once its exit status is seen, and keep what it finished; a
rerun must go on as the command's help says: `resumes` (the same command again finishes
it) or `refuses` (refused at once, naming `--resume DIR` and another `--out`, writing
nothing; `--resume DIR` then finishes it).

SIGINT goes to the command's process group (Ctrl-C in a terminal), SIGTERM to its pid (a
scheduler, `kill`), SIGHUP to its group (a closed session). The delays come from
`RUNNER_SIGNAL_SEED` (default 35), printed with any failure so a case can be replayed, as
fractions of the command's own run time, measured here first (a fast machine and a loaded
one alike: a signal falls while the command runs).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runner.base.outdir import RECORD, REFUSES
from runner.base.procs import Proc, descendants

SEED = int(os.environ.get("RUNNER_SIGNAL_SEED", "35"))
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
TO_GROUP = {signal.SIGINT: True, signal.SIGTERM: False, signal.SIGHUP: True}
# PYTHONFAULTHANDLER: a crash in any of its processes (the driver, a worker, a test
# process) prints "Fatal Python error" where the battery looks for it.
ENV = {**os.environ, "RUNNER_PROGRESS": "plain", "RUNNER_HEARTBEAT_STALE_S": "600",
       "PYTHONFAULTHANDLER": "1"}
CRASH = "Fatal Python error"
ATTEMPT_TIMEOUT_S = 600
EARLIEST, LATEST = 0.1, 0.75  # where in the command's run time the signals fall
_DURATIONS: dict[str, float] = {}


def done_keys(out: Path) -> set[str]:
    """The parts an attempt recorded as finished (runner/base/outdir.py)."""
    try:
        return set(json.loads((out / RECORD).read_text()).get("done", {}))
    except (OSError, ValueError):
        return set()


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

    @property
    def interrupted(self) -> bool:
        """Ended by the signal: 128 + its number, or (sent while the interpreter itself
        still started, before any of the runner's code ran) killed by it, saying nothing."""
        return self.sig is not None and (self.rc == 128 + self.sig or (
            self.rc == -self.sig and not self.stderr.strip()))

    def describe(self) -> str:
        what = f"{signal.Signals(self.sig).name} after {self.delay:.2f}s" if self.sig else "-"
        return (f"runner {' '.join(self.argv)} [{what}] -> exit {self.rc} (seed {SEED})\n"
                f"{self.stderr[-3000:]}")


def _default_signals() -> None:
    """As an interactive shell starts a command: the three signals at their defaults (a
    test runner in the background may have SIGINT ignored, which children inherit)."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


def _start(cmd: Command, argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "runner", *argv], cwd=cmd.cwd, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_default_signals)


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
        _, err = proc.communicate(timeout=ATTEMPT_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    left = [p for p in below if p.alive()]
    return Attempt(argv, sig, delay, proc.returncode, before + err, left)


def attempt(cmd: Command, argv: list[str], sig: int | None = None, delay: float = 0.0
            ) -> Attempt:
    """Runs `runner ARGV`, sends `sig` after `delay` seconds (when it still runs) and
    waits for its exit status."""
    proc = _start(cmd, argv)
    below: list[Proc] = []
    sent = False
    if sig is not None:
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            below, sent = _send(proc, sig), True
    return _ended(proc, argv, sig if sent else None, delay, below)


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
    assert proc.stderr is not None
    seen, below, sent, start = [], [], False, time.monotonic()
    for line in proc.stderr:
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


def duration(cmd: Command, tmp: Path) -> float:
    """Seconds the command takes on this machine now, start to end (once per command):
    run to its end in a directory of its own under `tmp`."""
    if cmd.name not in _DURATIONS:
        start = time.monotonic()
        whole = attempt(cmd, cmd.argv(tmp / "timed"))
        assert whole.rc in cmd.ok, whole.describe()
        _DURATIONS[cmd.name] = time.monotonic() - start
    return _DURATIONS[cmd.name]


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
    try:
        return json.loads((out / RECORD).read_text()).get("status")
    except (OSError, ValueError):
        return None


def _snapshot(out: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} \
        if out.is_dir() else {}


def run_battery(cmd: Command, tmp: Path, signals: tuple[int, ...] = SIGNALS
                ) -> list[Attempt]:
    """Each of `signals` once, at a seeded random point, each followed by the command's
    rerun; then the last attempt run to its end. Returns every attempt, for the caller's
    checks (tests/test_signals.py signals_for says which signals each command gets)."""
    rng = random.Random(f"{SEED}:{cmd.name}")
    seconds = duration(cmd, tmp)
    history: list[Attempt] = []
    n, out = 0, tmp / "out-0"
    argv = cmd.argv(out)
    kept: set[str] = set()
    for sig in signals:
        a = attempt(cmd, argv, sig, seconds * rng.uniform(EARLIEST, LATEST))
        history.append(a)
        check_clean(cmd, a, out)
        now = cmd.kept(out)
        assert kept <= now, f"finished work lost: {sorted(kept - now)}\n{a.describe()}"
        kept = now
        if not a.interrupted or _status(out) == "finished":  # it finished first
            history += _rerun_finished(cmd, out)
            n += 1
            out, kept = tmp / f"out-{n}", set()
            argv = cmd.argv(out)
            continue
        argv = _rerun_interrupted(cmd, out, history)
    last = attempt(cmd, argv)
    history.append(last)
    check_clean(cmd, last, out)
    assert last.rc in cmd.ok and cmd.finished(out), last.describe()
    assert kept <= cmd.kept(out), last.describe()
    return history


def _rerun_interrupted(cmd: Command, out: Path, history: list[Attempt]) -> list[str]:
    """The command line that goes on: the same one (`resumes`), or, after checking that
    the same one is refused at once and writes nothing, `--resume DIR`."""
    argv = cmd.argv(out)
    if cmd.rule != REFUSES or not (out / RECORD).is_file():
        return argv  # (stopped before it wrote anything: nothing of it is left to refuse)
    before = _snapshot(out)
    refused = attempt(cmd, argv)
    history.append(refused)
    assert refused.rc == 2 and f"--resume {out}" in refused.stderr \
        and "another --out" in refused.stderr, refused.describe()
    assert _snapshot(out) == before, refused.describe()
    return _resume_argv(cmd, out)


def _resume_argv(cmd: Command, out: Path) -> list[str]:
    """`runner CMD --resume DIR`: no other flag (the attempt recorded them)."""
    return [*cmd.name.split(), "--resume", str(out)]


def _rerun_finished(cmd: Command, out: Path) -> list[Attempt]:
    """A finished attempt run again: a refusing command says so and points to another
    --out (its --resume: nothing to do); a resuming one does it again, keeping its parts."""
    assert cmd.finished(out)
    again = attempt(cmd, cmd.argv(out))
    if cmd.rule == REFUSES:
        assert again.rc == 2 and "finished" in again.stderr, again.describe()
        resumed = attempt(cmd, _resume_argv(cmd, out))
        assert resumed.rc == 0 and ("nothing to resume" in resumed.stderr
                                    or "nothing to do" in resumed.stderr), resumed.describe()
        return [again, resumed]
    assert again.rc in cmd.ok, again.describe()
    return [again]

"""Workers end when their driver dies, and a resume finds the ones that did not.

A driver (`runner run`, `runner mlperf`, `runner bench`, `runner validate`, a Slurm node
task) starts workers through a `WorkerPool`. Should it die without stopping them (kill -9,
an OOM kill, a lost ssh session), its workers must not go on writing into the run dir, nor
poll an open LoadGen queue for ever. Two mechanisms, because no single one reaches every
executor:

- parent-death signal: a local worker (and the LoadGen test process) asks the kernel, at
  start, for SIGTERM when its parent dies (Linux `prctl(PR_SET_PDEATHSIG)`), so it ends at
  once. It cannot reach through `docker run` (the container's process is not the driver's
  child) nor across Slurm nodes.
- heartbeat: the pool's driver touches `workers/driver-<host>-<pid>.heartbeat` every second
  from a daemon thread (it stops when the driver process does); every worker, local or in a
  container (the run dir is mounted), runs a watchdog thread that exits the worker once the
  heartbeat is `STALE_S` old or gone. A Slurm node's workers watch their node task's
  heartbeat (node tasks outlive their submitter by design, and are Slurm's to end).

Each worker records itself in `workers/processes/<name>.json` (pid, start time, boot id,
host, and its driver's identity; `workers/<name>.pid` holds the bare pid). A resume
(`Lifecycle.open`) first waits until a dead driver's heartbeat is stale enough that every
worker watching it has exited, then stops, by recorded pid (never by name), any worker still
alive on this host whose driver is gone, checking each pid's start time so a reused pid is
never signalled, and reports them; only then does it judge which samples are missing.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.base.dirlock import pid_start
from runner.base.fileio import atomic_write_json, atomic_write_text

BEAT_S = 1.0
# A worker gives its driver this long without a heartbeat (a driver blocked in I/O for half
# a minute is not dead); `RUNNER_HEARTBEAT_STALE_S` sets it (tests use a few seconds).
STALE_S = float(os.environ.get("RUNNER_HEARTBEAT_STALE_S", "30"))
LIFELINE_GRACE_S = 5.0
PR_SET_PDEATHSIG = 1
WORKERS_DIR = "workers"
HEARTBEAT_SUFFIX = ".heartbeat"
PROCESSES_DIR = "processes"  # workers/processes/<name>.json: each worker's identity
EXIT_DRIVER_GONE = 75  # EX_TEMPFAIL: the worker's batches go back to the queue on resume


def boot_id() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return ""


@dataclass(frozen=True)
class ProcessId:
    """A process, identified so that a pid reused after it ended is not taken for it."""

    pid: int
    start: str  # clock ticks since boot (/proc/<pid>/stat), "" where unknown
    boot: str
    host: str

    @classmethod
    def me(cls) -> ProcessId:
        return cls(os.getpid(), pid_start(os.getpid()), boot_id(), socket.gethostname())

    @classmethod
    def from_dict(cls, raw: Any) -> ProcessId | None:
        try:
            return cls(int(raw["pid"]), str(raw["start"]), str(raw["boot"]), str(raw["host"]))
        except (KeyError, TypeError, ValueError):
            return None

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "start": self.start, "boot": self.boot, "host": self.host}

    def here(self) -> bool:
        """Whether it ran on this host since its last boot (else it cannot be checked)."""
        return self.host == socket.gethostname() and self.boot == boot_id()

    def alive(self) -> bool:
        """Alive on this host, and the same process (its start time matches)."""
        if not self.here() or not self.start:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return pid_start(self.pid) == self.start and not _zombie(self.pid)


def _zombie(pid: int) -> bool:
    """Ended, not yet reaped by its parent: dead for every purpose here."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


# --- the driver's side ------------------------------------------------------------------
class Heartbeat:
    """`workers/driver-<pid>.heartbeat`, touched every `BEAT_S` by a daemon thread while the
    driver lives; removed by `stop()`. It holds the driver's identity."""

    def __init__(self, run_dir: Path):
        self.me = ProcessId.me()
        host = re.sub(r"[^A-Za-z0-9.-]", "_", self.me.host)[:64]  # Slurm nodes share the dir
        self.path = (Path(run_dir) / WORKERS_DIR
                     / f"driver-{host}-{self.me.pid}{HEARTBEAT_SUFFIX}")
        atomic_write_json(self.path, {"driver": self.me.to_dict(), "stale_s": STALE_S})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(BEAT_S):
            with contextlib.suppress(OSError):  # a full disk must not kill the driver
                os.utime(self.path)

    def task(self) -> dict[str, Any]:
        """What a worker's task file carries to watch this driver."""
        return {"heartbeat": str(self.path), "driver": self.me.to_dict(), "stale_s": STALE_S}

    def stop(self) -> None:
        self._stop.set()
        self.path.unlink(missing_ok=True)


# --- the worker's side ------------------------------------------------------------------
def die_with_parent(driver_pid: int, only_child: bool = False) -> bool:
    """When this process's parent is its driver (`driver_pid`: a local worker, the LoadGen
    test process), asks for SIGTERM when that parent dies (Linux); if it died before the
    signal was armed, exits now. Otherwise (a container's init is the parent) returns False
    and the heartbeat watchdog covers it, unless `only_child` says the driver always starts
    this process itself: then a parent that is not the driver means the driver is gone (it
    was killed while this process was still starting up), and it exits."""
    if os.getppid() != driver_pid:
        if only_child:
            os._exit(EXIT_DRIVER_GONE)
        return False
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != driver_pid:  # orphaned before the signal was armed
        os._exit(EXIT_DRIVER_GONE)
    return True


def watch_driver(lifeline: dict[str, Any] | None, say: Callable[[str], None],
                 stop: Callable[[], None] | None = None) -> None:
    """Starts the watchdog thread: ends this process once the driver's heartbeat is older
    than its `stale_s` or gone. `lifeline` is `Heartbeat.task()` (None: no driver to watch,
    a worker started by hand). `stop` ends it in order (a worker closing its device);
    should the process still run `STOP_GRACE_S` later, or without `stop`, it exits at
    once."""
    if not lifeline:
        return
    path, stale_s = Path(lifeline["heartbeat"]), float(lifeline["stale_s"])

    def watch() -> None:
        while True:
            time.sleep(min(BEAT_S, stale_s / 4))
            try:
                age = time.time() - path.stat().st_mtime
            except OSError:
                age = float("inf")  # removed: the driver stopped this execution
            if age > stale_s:
                state = "missing" if age == float("inf") else f"{age:.0f}s old"
                say(f"driver gone (heartbeat {path} {state}): exiting")
                sys.stdout.flush()
                if stop is not None:
                    stop()
                    time.sleep(LIFELINE_GRACE_S)
                os._exit(EXIT_DRIVER_GONE)

    threading.Thread(target=watch, name="driver-watchdog", daemon=True).start()


def record_worker(run_dir: Path, name: str, lifeline: dict[str, Any] | None) -> None:
    """`workers/<name>.pid` (the bare pid, for people and scripts) and
    `workers/processes/<name>.json` (its identity and its driver's, for a resume)."""
    workers = Path(run_dir) / WORKERS_DIR
    atomic_write_text(workers / f"{name}.pid", str(os.getpid()))
    atomic_write_json(workers / PROCESSES_DIR / f"{name}.json",
                      {"worker": ProcessId.me().to_dict(),
                       "driver": (lifeline or {}).get("driver")})


# --- a resume's side --------------------------------------------------------------------
@dataclass(frozen=True)
class Orphan:
    name: str
    process: ProcessId
    stopped: bool  # False: it exited by itself while we waited


def reap_orphans(run_dir: Path, say: Callable[[str], None]) -> list[Orphan]:
    """Called by the process that now holds the run's lock: waits out dead drivers'
    heartbeats, then stops (by recorded pid) the workers still alive whose driver is gone.
    Returns them; `say` reports them."""
    workers = Path(run_dir) / WORKERS_DIR
    _wait_out_heartbeats(workers, say)
    orphans = []
    for path in sorted((workers / PROCESSES_DIR).glob("*.json")):
        record = _read(path)
        worker = ProcessId.from_dict(record.get("worker"))
        driver = ProcessId.from_dict(record.get("driver"))
        if worker is None or not worker.alive() or (driver is not None and driver.alive()):
            continue
        orphans.append(Orphan(path.stem, worker, _stop(worker)))
    if orphans:
        say(f"{len(orphans)} worker(s) of a driver that died were still running; "
            + ", ".join(f"{o.name} (pid {o.process.pid}): "
                        + ("stopped" if o.stopped else "exited") for o in orphans))
    return orphans


def _wait_out_heartbeats(workers: Path, say: Callable[[str], None]) -> None:
    """Until every dead driver's heartbeat is stale, so every worker that watched it has
    exited by itself, when some of them cannot be checked from here (in a container: another
    pid namespace and host name); then the heartbeat file goes."""
    records = [_read(p) for p in (workers / PROCESSES_DIR).glob("*.json")]
    for path in sorted(workers.glob(f"*{HEARTBEAT_SUFFIX}")):
        record = _read(path)
        driver = ProcessId.from_dict(record.get("driver"))
        if driver is not None and driver.alive():
            continue  # a live driver (a Slurm node task): its workers are its own
        unseen = [r for r in records if r.get("driver") == record.get("driver")
                  and (w := ProcessId.from_dict(r.get("worker"))) is not None
                  and not w.here()]
        if not unseen:
            path.unlink(missing_ok=True)
            continue
        try:
            stale_s = float(record.get("stale_s", STALE_S))
            left = stale_s + 2 * BEAT_S - (time.time() - path.stat().st_mtime)
        except (OSError, TypeError, ValueError):
            left = 0.0
        if left > 0:
            say(f"waiting {left:.0f}s for the workers of a driver that died to notice "
                f"(its heartbeat {path.name} stopped)")
            time.sleep(left)
        path.unlink(missing_ok=True)


def _stop(worker: ProcessId) -> bool:
    """SIGTERM, then SIGKILL after a grace; True if it had to be signalled."""
    for sig, grace in ((signal.SIGTERM, LIFELINE_GRACE_S), (signal.SIGKILL, LIFELINE_GRACE_S)):
        if not worker.alive():
            return sig != signal.SIGTERM
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(worker.pid, sig)
        deadline = time.monotonic() + grace
        while worker.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
    return True


def _read(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}

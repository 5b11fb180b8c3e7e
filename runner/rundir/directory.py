"""A run directory: its layout, its manifest, its lock, and writes that survive a full disk.

Only this module knows the run dir's file names; everything else asks a `RunDir`. Its path
is made absolute once, here, because it is handed to worker processes, containers (mounted
at the same path) and Slurm nodes, none of which share the driver's working directory.

Layout:
    run.json         the manifest (runner/rundir/manifest.py), written atomically, only by the
                     driver that holds the lock
    run.lock         who drives the run now (host, pid, since, command)
    sample_ids.txt   the requested samples, one per line
    reproduce.sh     the exact commands to make this run again
    compile/         standalone profiles for compiles inside a harness image
    queue/           pending and claimed batches (runner/batch/queue.py)
    workers/         per-worker task, pid and stats files (runner/batch/worker.py)
    samples/         one verified PNG per finished sample (runner/rundir/store.py)
    logs/            per-worker and per-node logs
    slurm/           batch scripts and node state files of a Slurm run
    dataset.json, mlperf_log_accuracy.json, review/, accuracy.json, reports

The lock. A driver (`runner run`, `runner validate`, a bench run, the LoadGen driver)
creates `run.lock` with O_CREAT|O_EXCL, which is atomic on local filesystems and on
NFSv3+/Lustre/GPFS, the shared filesystems Slurm runs use (no fcntl/flock, which NFS
clients implement unreliably or not at all). The file names its holder. A second driver is
refused with an error naming host, pid and since. A lock whose holder is on this host and
no longer alive (its pid is gone, or now belongs to a process started later) is stale: it
is taken over under a short-lived `run.lock.takeover` guard (itself O_EXCL), re-read under
the guard, and replaced only if it is still the same stale lock, so two drivers that find
the same stale lock cannot both take it. A lock held on *another* host is never broken
automatically (this host cannot see that host's processes): the error says to check the
holder there and remove `run.lock` by hand once it is gone. Worker processes, containers
and Slurm node tasks never take the lock: they write only their own files (samples, claims,
stats, node state), never run.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runner.base.errors import IncompleteRun, RunnerError, is_disk_full
from runner.base.fileio import atomic_write_json, atomic_write_text
from runner.rundir.manifest import RunManifest

MANIFEST = "run.json"
LOCK = "run.lock"
TAKEOVER = "run.lock.takeover"
SAMPLE_IDS = "sample_ids.txt"
REPRODUCE = "reproduce.sh"
LOGS_DIR = "logs"
COMPILE_DIR = "compile"
# A takeover guard older than this was left by a driver that died during the takeover,
# which takes milliseconds; an unreadable lock older than this was never finished.
GUARD_SECONDS = 30.0


class DiskFull(IncompleteRun):
    """No space left while writing one of the run's files; nothing finished is lost."""

    def __init__(self, path: Path, run_dir: Path):
        self.path = path
        super().__init__(f"run incomplete: disk full while writing {path}",
                         fix=f"free space, then `runner run --resume {run_dir}`")


@dataclass(frozen=True)
class LockHolder:
    host: str
    pid: int
    since: str
    command: str
    pid_start: str = ""  # the process's start time, so a reused pid is not taken for it

    def text(self) -> str:
        return f"pid {self.pid} on {self.host} since {self.since} ({self.command})"


def pid_start(pid: int) -> str:
    """The start time (clock ticks since boot) of a process, "" where /proc has none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]


def _alive(holder: LockHolder) -> bool:
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's live process
    return not holder.pid_start or pid_start(holder.pid) in ("", holder.pid_start)


class RunDir:
    """One run directory, always by its absolute path."""

    def __init__(self, path: Path | str):
        self.path = Path(os.path.abspath(Path(path).expanduser()))
        self._holder: LockHolder | None = None

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # --- layout -----------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    @property
    def lock_path(self) -> Path:
        return self.path / LOCK

    @property
    def logs(self) -> Path:
        return self.path / LOGS_DIR

    @property
    def compile_dir(self) -> Path:
        return self.path / COMPILE_DIR

    @property
    def reproduce_path(self) -> Path:
        return self.path / REPRODUCE

    def log_path(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def exists(self) -> bool:
        return self.manifest_path.is_file()

    # --- the manifest -----------------------------------------------------------------
    def load(self) -> RunManifest:
        if not self.manifest_path.exists():
            raise RunnerError("not a run dir (no run.json)", where=str(self.path),
                              fix="pass the --out directory of an earlier `runner run`")
        from runner.inputs.jsonfile import read_json

        raw = read_json(self.manifest_path, what="run manifest")
        return RunManifest.from_dict(raw, str(self.manifest_path))

    def save(self, manifest: RunManifest) -> None:
        self.write_json(self.manifest_path, manifest.to_dict())

    # --- writes -----------------------------------------------------------------------
    @contextlib.contextmanager
    def writing(self, path: Path) -> Iterator[None]:
        """Turns a full disk while `path` is written into DiskFull, with no temp file of
        it left behind (atomic writers name theirs `.<name>.*tmp` next to the target)."""
        try:
            yield
        except OSError as e:
            if not is_disk_full(e):
                raise
            target = Path(e.filename) if isinstance(e.filename, str) else Path(path)
            self.remove_temp_files(Path(path).parent)
            raise DiskFull(target, self.path) from e

    def remove_temp_files(self, where: Path | None = None) -> list[Path]:
        """Temp files of interrupted atomic writes (`.<name>.tmp`, `.<name>.<rand>.tmp`)."""
        dirs = {where or self.path, self.path}
        found = [p for d in dirs if d.is_dir() for p in d.glob(".*tmp") if p.is_file()]
        for p in found:
            p.unlink(missing_ok=True)
        return found

    def write_json(self, path: Path, obj: Any) -> None:
        with self.writing(path):
            atomic_write_json(path, obj)

    def write_text(self, path: Path, text: str) -> None:
        with self.writing(path):
            atomic_write_text(path, text)

    def write_sample_ids(self, ids: list[int]) -> None:
        self.write_text(self.path / SAMPLE_IDS, "\n".join(map(str, ids)) + "\n")

    # --- the lock ---------------------------------------------------------------------
    def holder(self) -> LockHolder | None:
        """Who holds the lock; None if nobody (or a lock file still being written)."""
        try:
            raw = json.loads(self.lock_path.read_text())
            return LockHolder(**raw)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError):
            return LockHolder("?", 0, "?", "unreadable lock file")

    def lock(self, command: str | None = None) -> LockHolder:
        """Takes the run's lock or raises a RunnerError naming the holder."""
        self.path.mkdir(parents=True, exist_ok=True)
        me = LockHolder(socket.gethostname(), os.getpid(), time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        command or " ".join(["runner", *sys.argv[1:]])[:300],
                        pid_start(os.getpid()))
        for _ in range(5):
            try:
                fd = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._take_over_if_stale(me)
                continue
            with self.writing(self.lock_path):
                try:
                    os.write(fd, json.dumps(asdict(me)).encode())
                    os.fsync(fd)
                except BaseException:
                    os.close(fd)
                    self.lock_path.unlink(missing_ok=True)
                    raise
            os.close(fd)
            self._holder = me
            return me
        raise RunnerError("could not take the run dir's lock (it keeps changing hands)",
                          where=str(self.lock_path), fix="retry when the other driver is done")

    def _take_over_if_stale(self, me: LockHolder) -> None:
        holder = self.holder()
        if holder is None:
            return  # released meanwhile: try again
        age = _age(self.lock_path)
        unreadable = holder.pid == 0
        if unreadable and age is not None and age < GUARD_SECONDS:
            time.sleep(0.1)  # its writer is between create and write
            return
        if not unreadable and (holder.host != me.host or _alive(holder)):
            raise RunnerError(
                f"another driver holds this run: {holder.text()}", where=str(self.lock_path),
                fix=("wait for it to finish, or stop it" if holder.host == me.host else
                     f"if that process is gone (check on {holder.host}), remove "
                     f"{self.lock_path} by hand; a lock held on another host is never "
                     "broken automatically"))
        guard = self.path / TAKEOVER
        guard_age = _age(guard)
        if guard_age is not None and guard_age > GUARD_SECONDS:
            guard.unlink(missing_ok=True)
        try:
            os.close(os.open(guard, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            time.sleep(0.1)  # someone else is taking it over: try again after them
            return
        try:
            if self.holder() == holder:  # still the very lock we judged stale
                print(f"note: taking over the stale lock of {holder.text()}", file=sys.stderr)
                self.lock_path.unlink(missing_ok=True)
        finally:
            guard.unlink(missing_ok=True)

    def unlock(self) -> None:
        """Releases the lock if this process still holds it."""
        if self._holder is not None and self.holder() == self._holder:
            self.lock_path.unlink(missing_ok=True)
        self._holder = None

    @property
    def locked(self) -> bool:
        return self._holder is not None


def _age(path: Path) -> float | None:
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return None

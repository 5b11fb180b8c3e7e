"""One driver per directory: a lock file created with O_EXCL, taken over when stale.

A run dir (`run.lock`, runner/rundir/directory.py) and every command's `--out`
(`attempt.lock`, runner/base/outdir.py) are locked the same way. The file is created with
O_CREAT|O_EXCL, which is atomic on local filesystems and on NFSv3+/Lustre/GPFS, the shared
filesystems Slurm runs use (no fcntl/flock, which NFS clients implement unreliably or not at
all), and names its holder. A second driver is refused with an error naming host, pid and
since. A lock whose holder is on this host and no longer alive (its pid is gone, or now
belongs to a process started later) is stale: it is taken over under a short-lived
`<lock>.takeover` guard (itself O_EXCL), re-read under the guard, and replaced only if it is
still the same stale lock, so two drivers that find the same stale lock cannot both take it.
A lock held on *another* host is never broken automatically (this host cannot see that
host's processes): the error says to check the holder there and remove the file by hand.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from runner.base.errors import BadInput

# A takeover guard older than this was left by a driver that died during the takeover,
# which takes milliseconds; an unreadable lock older than this was never finished.
GUARD_SECONDS = 30.0


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


def alive(holder: LockHolder) -> bool:
    """Whether the holder's process still runs (on this host; a reused pid is not it)."""
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's live process
    return not holder.pid_start or pid_start(holder.pid) in ("", holder.pid_start)


def current_command() -> str:
    return " ".join(["runner", *sys.argv[1:]])[:300]


class DirLock:
    """The lock file at `path` (its directory is created when the lock is taken)."""

    def __init__(self, path: Path, what: str = "directory"):
        self.path = Path(path)
        self.what = what  # "run", "out dir": how an error names what is locked
        self._holder: LockHolder | None = None

    def holder(self) -> LockHolder | None:
        """Who holds the lock; None if nobody (or a lock file still being written)."""
        try:
            raw = json.loads(self.path.read_text())
            return LockHolder(**raw)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError):
            return LockHolder("?", 0, "?", "unreadable lock file")

    def lock(self, command: str | None = None) -> LockHolder:
        """Takes the lock or raises a RunnerError naming the holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        me = LockHolder(socket.gethostname(), os.getpid(), time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        command or current_command(), pid_start(os.getpid()))
        for _ in range(5):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._take_over_if_stale(me)
                continue
            try:
                os.write(fd, json.dumps(asdict(me)).encode())
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                self.path.unlink(missing_ok=True)
                raise
            os.close(fd)
            self._holder = me
            return me
        raise BadInput(f"could not take the {self.what}'s lock (it keeps changing hands)",
                       where=str(self.path), fix="retry when the other driver is done")

    def _take_over_if_stale(self, me: LockHolder) -> None:
        holder = self.holder()
        if holder is None:
            return  # released meanwhile: try again
        age = _age(self.path)
        unreadable = holder.pid == 0
        if unreadable and age is not None and age < GUARD_SECONDS:
            time.sleep(0.1)  # its writer is between create and write
            return
        if not unreadable and (holder.host != me.host or alive(holder)):
            raise BadInput(
                f"another driver holds this {self.what}: {holder.text()}",
                where=str(self.path),
                fix=("wait for it to finish, or stop it" if holder.host == me.host else
                     f"if that process is gone (check on {holder.host}), remove "
                     f"{self.path} by hand; a lock held on another host is never "
                     "broken automatically"))
        guard = self.path.with_name(self.path.name + ".takeover")
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
                self.path.unlink(missing_ok=True)
        finally:
            guard.unlink(missing_ok=True)

    def unlock(self) -> None:
        """Releases the lock if this process still holds it."""
        if self._holder is not None and self.holder() == self._holder:
            self.path.unlink(missing_ok=True)
        self._holder = None

    @property
    def locked(self) -> bool:
        return self._holder is not None


def _age(path: Path) -> float | None:
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return None


def drop_locks_of(host: str, roots: list[Path], names: tuple[str, ...]) -> list[Path]:
    """Removes the lock files named `names` under `roots` that `host` holds: for a host that
    is known to be gone (a container that was killed and removed, whose host name was its
    own), since a lock held on another host is otherwise never broken. Returns them."""
    dropped = []
    for root in roots:
        for dirpath, _, files in os.walk(root):
            for name in set(files) & set(names):
                lock = DirLock(Path(dirpath, name))
                holder = lock.holder()
                if holder is not None and holder.host == host:
                    lock.path.unlink(missing_ok=True)
                    dropped.append(lock.path)
    return dropped

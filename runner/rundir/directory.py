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
holds `run.lock` (runner/base/dirlock.py: O_EXCL, taken over only when its holder on this
host is gone, never across hosts). Worker processes, containers and Slurm node tasks never
take the lock: they write only their own files (samples, claims, stats, node state), never
run.json.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runner.base.dirlock import DirLock, LockHolder
from runner.base.errors import IncompleteRun, RunnerError, is_disk_full
from runner.base.fileio import atomic_write_json, atomic_write_text
from runner.rundir.manifest import RunManifest

MANIFEST = "run.json"
RUN_LOCK = "run.lock"
SAMPLE_IDS = "sample_ids.txt"
REPRODUCE = "reproduce.sh"
LOGS_DIR = "logs"
COMPILE_DIR = "compile"


class DiskFull(IncompleteRun):
    """No space left while writing one of the run's files; nothing finished is lost."""

    def __init__(self, path: Path, run_dir: Path):
        self.path = path
        super().__init__(f"run incomplete: disk full while writing {path}",
                         fix=f"free space, then `runner run --resume {run_dir}`")


def not_a_run_dir(path: Path) -> RunnerError:
    """The error for a RUN_DIR argument that is no run dir: a file, a path that is not
    there (with the likeliest name meant), or a directory without a run.json."""
    from runner.inputs.paths import no_such_path

    fix = "pass the --out directory of an earlier `runner run`"
    if path.is_file():
        return RunnerError("a file, where a run dir (the --out of `runner run`) is expected",
                           where=str(path), fix=f"{fix} ({path.parent}, if it is that one)")
    if not path.exists():
        return RunnerError("not a run dir: no such directory", where=str(path),
                           fix=no_such_path(path).fix)
    return RunnerError("not a run dir (no run.json)", where=str(path), fix=fix)


class _Entry:
    """One of a run dir's fixed entries, read as an attribute (`run.logs`): its path below
    that run dir. The layout is a table of names (MANIFEST, LOGS_DIR, ...), each joined to
    the run's path in this one place."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, run: RunDir, owner: object = None) -> Path:
        return run.path / self.name


class RunDir:
    """One run directory, always by its absolute path."""

    def __init__(self, path: Path | str):
        self.path = Path(os.path.abspath(Path(path).expanduser()))
        self._lock = DirLock(self.path / RUN_LOCK, "run")

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # --- layout -----------------------------------------------------------------------
    manifest_path = _Entry(MANIFEST)
    lock_path = _Entry(RUN_LOCK)
    logs = _Entry(LOGS_DIR)
    compile_dir = _Entry(COMPILE_DIR)
    reproduce_path = _Entry(REPRODUCE)

    def log_path(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def exists(self) -> bool:
        return self.manifest_path.is_file()

    # --- the manifest -----------------------------------------------------------------
    def load(self) -> RunManifest:
        if not self.manifest_path.exists():
            raise not_a_run_dir(self.path)
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
        return self._lock.holder()

    def lock(self, command: str | None = None) -> LockHolder:
        """Takes the run's lock or raises a RunnerError naming the holder."""
        with self.writing(self.lock_path):
            return self._lock.lock(command)

    def unlock(self) -> None:
        """Releases the lock if this process still holds it."""
        self._lock.unlock()

    @property
    def locked(self) -> bool:
        return self._lock.locked


"""Executors start worker processes; the orchestrator does not care where they run.

Each returns handles with `poll()` and `kill()`, and can describe the exact command it runs
(environment included) for the run's `reproduce.sh`.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

from runner.layout import Worker


class WorkerHandle(Protocol):
    def poll(self) -> int | None: ...
    def kill(self) -> None: ...


def worker_argv(worker: Worker, task: Path, python: str = sys.executable) -> list[str]:
    return [*worker.command_prefix, python, "-m", "runner.batch.worker", "--task", str(task)]


class LocalExecutor:
    """Worker processes on this host, with the worker's visibility env and log file."""

    name = "local"

    def start(self, worker: Worker, task: Path, log_path: Path) -> subprocess.Popen:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            return subprocess.Popen(worker_argv(worker, task), env={**os.environ, **worker.env},
                                    stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)

    def compiler(self, work_dir: Path, dry_run: bool = False):
        """How this executor's modules are compiled: by this host's iree-compile."""
        from runner.compiled_model import compile_model

        return compile_model

    def describe(self, worker: Worker, task: Path) -> str:
        env = [f"{k}={v}" for k, v in worker.env.items()]
        argv = worker_argv(worker, task, "python3")
        return shlex.join(["env", *env, *argv] if env else argv)


def covering_mounts(paths: list[tuple[Path, bool]]) -> list[tuple[str, bool]]:
    """Each directory once, nested ones dropped (a read-write parent wins over a child)."""
    out: dict[str, bool] = {}
    for path, read_only in sorted(((p.resolve(), ro) for p, ro in paths), key=lambda x: x[0]):
        parent = next((Path(m) for m in out if path.is_relative_to(m)), None)
        if parent is None:
            out[str(path)] = read_only
        elif not read_only:
            out[str(parent)] = False
    return list(out.items())


class DockerContainer:
    """A worker's container as a handle: its output goes to the worker's log when it ends."""

    def __init__(self, container, log_path: Path):
        self.container, self.log_path = container, log_path

    def poll(self) -> int | None:
        from runner.docker.container import logs, poll

        rc = poll(self.container)
        if rc is not None:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(logs(self.container))
            self.container.remove(force=True)
        return rc

    def kill(self) -> None:
        from runner.docker.container import kill

        kill(self.container)


class DockerExecutor:
    """One container per worker from a harness image (see runner/docker/container.py for
    why per worker). Host paths are mounted at the same paths, so task files need no
    translation: the run dir read-write; the compile cache, model and captions read-only."""

    name = "docker"

    def __init__(self, image: str, run_dir: Path, read_only: list[Path]):
        from runner.paths import cache_dir

        self.image = image
        self.mounts = covering_mounts([(run_dir, False), (cache_dir(), True),
                                        *[(p, True) for p in read_only]])

    def spec(self, worker: Worker, task: Path, name: str | None = None):
        from runner.docker.container import worker_container_spec

        return worker_container_spec(
            self.image, worker, ["python3", "-m", "runner.batch.worker", "--task", str(task)],
            self.mounts, name=name)

    def start(self, worker: Worker, task: Path, log_path: Path) -> DockerContainer:
        from runner.docker.container import start

        log_path.parent.mkdir(parents=True, exist_ok=True)
        # Unique per attempt: a killed run's containers may still exist under older names.
        name = f"runner-{worker.name}-{os.getpid()}-{int(time.time())}"
        return DockerContainer(start(self.spec(worker, task, name)), log_path)

    def compiler(self, work_dir: Path, dry_run: bool = False):
        """How this executor's modules are compiled: by the image's own iree-compile, so the
        runtime in the image loads what its compiler wrote (runner/docker/in_image.py)."""
        from runner.docker.in_image import ImageCompiler

        return ImageCompiler(self.image, Path(work_dir) / "compile", dry_run)

    def describe(self, worker: Worker, task: Path) -> str:
        from runner.docker.container import run_command_text

        return run_command_text(self.spec(worker, task), detach=False, remove=True)

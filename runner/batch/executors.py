"""Executors start worker processes; the orchestrator does not care where they run.

Each returns handles with `poll()` and `kill()`, and can describe the exact command it runs
(environment included) for the run's `reproduce.sh`.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
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

    def describe(self, worker: Worker, task: Path) -> str:
        env = [f"{k}={v}" for k, v in worker.env.items()]
        argv = worker_argv(worker, task, "python3")
        return shlex.join(["env", *env, *argv] if env else argv)

"""The executor protocol: where a run's work happens, behind one interface.

The lifecycle (runner/lifecycle.py) fills a run's queue and then asks its executor to
`start` working through it; it never asks which executor it has. An executor returns an
`Execution` that the lifecycle (or a caller driving several runs at once, like a Slurm
bench sweep) polls until it is over, stops on Ctrl-C, and reads an `Executed` from.

- `LocalExecutor` (here): one worker process per planned worker on this host.
- `DockerExecutor` (runner/batch/docker_executor.py): one container per worker from a harness
  image.
- `SlurmExecutor` (runner/batch/slurm.py): one sbatch array task per node; each node task
  plans its own workers and runs them with a local or docker launcher.

Local and docker workers are both a `WorkerPool` over a `WorkerLauncher` (how one worker
process or container starts, and the exact command for reproduce.sh). A Slurm node task
runs the same pool on its node.

Every path handed to a worker, container or node is absolute (`RunDir` resolves its path
once): none of them shares the driver's working directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runner.base import shellscript
from runner.base.procs import KILL_WAIT_S, STOP_GRACE_S
from runner.base.progress import Progress, echo
from runner.base.signals import start_child
from runner.batch.lifeline import Heartbeat
from runner.batch.queue import WorkQueue
from runner.batch.run import log_tail
from runner.batch.worker import stats_path, task_path, write_task
from runner.config.layout import Plan, Worker
from runner.model.compiled_model import CompiledModel
from runner.rundir.directory import RunDir
from runner.rundir.store import SampleStore

if TYPE_CHECKING:
    from runner.rundir.manifest import RunManifest

CompileFn = Callable[..., CompiledModel]  # (profile, batch_size, vae_batch_size) -> model
WORKER_PROBE_TIMEOUT_S = 300  # a cold container or a loaded node imports slowly; a hung one is not


class WorkerHandle(Protocol):
    def poll(self) -> int | None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


def stop_workers(handles: list[WorkerHandle], grace: float = STOP_GRACE_S) -> None:
    """SIGTERM to every worker, then waits for each: a worker writes its finished samples
    and closes its IREE device (a GPU's memory is free once it has exited); one still
    running after `grace` is killed, and waited for too. Nothing of them runs on after."""
    for handle in handles:
        handle.terminate()
    deadline = time.monotonic() + grace
    left = _wait_all(handles, deadline)
    for handle in left:
        handle.kill()
    _wait_all(left, time.monotonic() + KILL_WAIT_S)


def _wait_all(handles: list[WorkerHandle], deadline: float) -> list[WorkerHandle]:
    """The handles still running at `deadline` (polling also reaps, or removes a
    container)."""
    left = list(handles)
    while left:
        left = [h for h in left if h.poll() is None]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    return left


@dataclass
class Executed:
    """What one execution did: its wall time from `started` (epoch seconds), the workers
    that ran (by name, for their stats files), the deaths and the exact worker commands."""

    started: float
    seconds: float
    workers: list[str] = field(default_factory=list)
    deaths: list[dict[str, Any]] = field(default_factory=list)
    commands: dict[str, str] = field(default_factory=dict)


class Execution(Protocol):
    @property
    def interval(self) -> float:
        """Seconds between polls."""

    def poll(self) -> bool:
        """One look: records what ended, hands dead workers' batches back; False once
        nothing of this execution is alive any more."""

    def stop(self) -> None:
        """Stops everything still running (a signal, an error) and waits for it, so nothing
        writes on, nor holds a device, once it returns."""

    def result(self) -> Executed: ...


class Executor(Protocol):
    name: str

    @property
    def on_this_host(self) -> bool:
        """Whether the work runs on this machine (processes, containers): runs that are
        compared (a bench sweep) then take turns, each with the machine to itself; runs
        elsewhere (Slurm nodes) are all started, then waited for together."""

    def compiler(self, work_dir: Path, dry_run: bool = False) -> CompileFn:
        """How this executor's modules are compiled (the harness image's own compiler for
        containers, so its runtime loads what its compiler wrote)."""

    def image_info(self) -> dict[str, Any] | None:
        """The harness image the workers run in, as recorded in the manifest."""

    def check(self, plan: Plan, where: str, dry_run: bool = False) -> list[str]:
        """Refuses a plan this executor cannot run, before anything is created or compiled
        (a layout too big for a Slurm node task, an image the docker engine lacks). A dry
        run gets what this host cannot check (no docker engine, no Slurm commands) back as
        notes to print; the run itself is refused for it."""

    def probe_worker(self, plan: Plan) -> WorkerProbe:
        """A worker's environment asked, as a worker is started, whether it can import what
        a worker imports (`python -m runner.batch.worker --check DRIVER`)."""
        ...

    def keeps_queue(self, run: RunDir, manifest: RunManifest) -> bool:
        """Whether work of an earlier attempt still runs (Slurm node tasks outlive their
        submitter): then the queue is topped up, never replaced."""

    def start(self, run: RunDir, manifest: RunManifest, plan: Plan) -> Execution: ...

    def commands(self, run_dir: Path, plan: Plan) -> list[str]:
        """The exact commands `start` would run for `plan` (a dry run prints them)."""


class WorkerLauncher(Protocol):
    name: str

    def start_worker(self, run: Path, worker: Worker, task: Path) -> WorkerHandle: ...
    def describe(self, run: Path, worker: Worker, task: Path) -> str: ...


def worker_argv(worker: Worker, task: Path, python: str = sys.executable) -> list[str]:
    return [*worker.command_prefix, python, "-m", "runner.batch.worker", "--task", str(task)]


def probe_argv(worker: Worker, python: str = sys.executable) -> list[str]:
    """The worker's own command, asking only whether it could start (`--check`)."""
    return [*worker.command_prefix, python, "-m", "runner.batch.worker", "--check",
            worker.driver]


@dataclass(frozen=True)
class WorkerProbe:
    """What starting a worker's environment with `--check` gave: the command as a user
    would type it, its exit code (None: not started from here, e.g. on Slurm nodes, where
    `command` is what checks one; `output` then says why) and its output."""

    command: str
    returncode: int | None
    output: str = ""


def run_probe(argv: list[str], env: dict[str, str], shown: str) -> WorkerProbe:
    """`argv` run to its end (a short process: imports only), its output kept."""
    try:
        proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=WORKER_PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return WorkerProbe(shown, -1, str(e))
    return WorkerProbe(shown, proc.returncode, (proc.stdout + proc.stderr).strip())


def worker_commands(launcher: WorkerLauncher, run_dir: Path, plan: Plan) -> list[str]:
    """Each worker's command as `launcher` starts it (WorkerPool's workers)."""
    run = Path(run_dir).resolve()
    return [launcher.describe(run, w, task_path(run, w.name)) for w in plan.workers]


class WorkerPool:
    """Workers over one run's queue until it is drained; a dead worker's claimed batches go
    back to the queue for the survivors."""

    interval = 0.2

    def __init__(self, run_dir: Path, plan: Plan, compiled: CompiledModel, captions: str,
                 launcher: WorkerLauncher, requested: set[int]):
        self.run_dir = Path(run_dir).resolve()
        self.store, self.queue = SampleStore(self.run_dir), WorkQueue(self.run_dir)
        self.requested = requested
        self.progress = Progress("run", len(requested), unit="samples",
                                 already=len(self.store.done_ids() & requested))
        self.names = [w.name for w in plan.workers]
        self.deaths: list[dict[str, Any]] = []
        self.commands: dict[str, str] = {}
        self.alive: dict[str, WorkerHandle] = {}
        self.started = time.time()
        self._t0 = time.monotonic()
        self._seconds: float | None = None
        # The workers end with this process (runner.batch.lifeline).
        self.heartbeat = Heartbeat(self.run_dir)
        try:
            for worker in plan.workers:
                task = write_task(self.run_dir, worker.to_dict(), compiled, captions,
                                  self.heartbeat.task())
                stats_path(self.run_dir, worker.name).unlink(missing_ok=True)
                self.commands[worker.name] = launcher.describe(self.run_dir, worker, task)
                self.alive[worker.name] = launcher.start_worker(self.run_dir, worker, task)
        except BaseException:
            self.stop()
            raise

    def poll(self) -> bool:
        for name, handle in list(self.alive.items()):
            rc = handle.poll()
            if rc is None:
                continue
            del self.alive[name]
            if rc != 0:
                returned = self.queue.release(name)
                tail = log_tail(RunDir(self.run_dir).log_path(name))
                self.deaths.append({"worker": name, "exit_code": rc, "requeued": returned,
                                    "log_tail": tail})
                echo(f"worker {name} died (exit {rc}); {len(returned)} batch(es) back "
                     f"in the queue for the others. Last log lines:\n{tail}")
        done = len(self.store.done_ids() & self.requested)
        if not self.alive:
            self.heartbeat.stop()
            self._seconds = time.monotonic() - self._t0
            self.progress.finish(extra="workers alive: 0", done=done)
            return False
        self.progress.update(done, extra=f"workers alive: {len(self.alive)}")
        return True

    def stop(self) -> None:
        """Stops the workers still running and waits for them (`stop_workers`)."""
        try:
            stop_workers(list(self.alive.values()))
        finally:
            self.alive.clear()
            self.heartbeat.stop()

    def result(self) -> Executed:
        seconds = self._seconds if self._seconds is not None else time.monotonic() - self._t0
        return Executed(self.started, seconds, list(self.names), self.deaths, self.commands)


def watch(executions: list[Execution]) -> None:
    """Polls every execution until none is alive. Any exception (Ctrl-C here, SIGTERM on a
    Slurm node) stops them all before it propagates, so nothing keeps writing into a run
    dir behind the caller."""
    active = list(executions)
    try:
        while active:
            active = [e for e in active if e.poll()]
            if active:
                time.sleep(min(e.interval for e in active))
    except BaseException:
        for e in executions:
            e.stop()
        raise


class LocalExecutor:
    """Worker processes on this host, with the worker's visibility env and log file."""

    name = "local"
    on_this_host = True

    def start_worker(self, run: Path, worker: Worker, task: Path) -> subprocess.Popen:
        log_path = RunDir(run).log_path(worker.name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            return start_child(worker_argv(worker, task), env={**os.environ, **worker.env},
                               stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def describe(self, run: Path, worker: Worker, task: Path) -> str:
        env = [f"{k}={v}" for k, v in worker.env.items()]
        argv = worker_argv(worker, task, "python3")
        return shellscript.join(["env", *env, *argv] if env else argv)

    def compiler(self, work_dir: Path, dry_run: bool = False) -> CompileFn:
        """By this host's iree-compile."""
        import functools

        from runner.model.compiled_model import compile_model

        return functools.partial(compile_model, dry_run=dry_run) if dry_run else compile_model

    def image_info(self) -> dict[str, Any] | None:
        return None

    def check(self, plan: Plan, where: str, dry_run: bool = False) -> list[str]:
        return []

    def probe_worker(self, plan: Plan) -> WorkerProbe:
        """This python with the first worker's prefix and environment, as it starts one."""
        worker = plan.workers[0]
        env = [f"{k}={v}" for k, v in worker.env.items()]
        shown = shellscript.join(["env", *env, *probe_argv(worker)] if env
                                 else probe_argv(worker))
        return run_probe(probe_argv(worker), {**os.environ, **worker.env}, shown)

    def keeps_queue(self, run: RunDir, manifest: RunManifest) -> bool:
        return False

    def start(self, run: RunDir, manifest: RunManifest, plan: Plan) -> WorkerPool:
        return WorkerPool(run.path, plan, CompiledModel.from_dict(manifest.compiled),
                          manifest.captions, self, set(manifest.sample_ids))

    def commands(self, run_dir: Path, plan: Plan) -> list[str]:
        return worker_commands(self, run_dir, plan)


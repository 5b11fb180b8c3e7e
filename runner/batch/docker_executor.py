"""The docker executor: one container per worker from a harness image.

See runner/docker/container.py for why one container per worker. Host paths are mounted at
the same (absolute) paths, so task files need no translation: the run dir read-write; the
compile cache, model and captions read-only. Its modules come from the image's own
iree-compile (runner/docker/in_image.py).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from runner.base.errors import RunnerError, ServiceUnreachable
from runner.base.paths import cache_dir
from runner.batch.executors import (
    WORKER_PROBE_TIMEOUT_S,
    CompileFn,
    WorkerPool,
    WorkerProbe,
    probe_argv,
    worker_commands,
)
from runner.config.layout import Plan, Worker
from runner.config.profile import Profile
from runner.docker.container import covering_mounts
from runner.docker.in_image import ImageCompiler
from runner.model.compiled_model import CompiledModel
from runner.rundir.directory import RunDir
from runner.rundir.manifest import RunManifest


def read_only_inputs(profile: Profile, captions: Path) -> list[Path]:
    """What a worker reads besides the run dir and the compile cache: the model dir,
    tokenizer, captions and local weights."""
    model = profile.model
    paths = [model.base_dir, Path(model.resolve(model.tokenizer_dir)),
             Path(captions).resolve().parent]
    paths += [Path(model.resolve(sub.weights)).parent
              for sub in model.submodels.values() if sub.weights and "://" not in sub.weights]
    return paths


class DockerContainer:
    """A worker's container as a handle: its output goes to the worker's log when it ends."""

    def __init__(self, container: Any, log_path: Path):
        self.container, self.log_path = container, log_path

    def poll(self) -> int | None:
        from runner.docker.container import logs, poll

        rc = poll(self.container)
        if rc is not None:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(logs(self.container))
            self.container.remove(force=True)
        return rc

    def terminate(self) -> None:
        """SIGTERM to the worker (the container's first process, which handles it)."""
        from docker.errors import APIError, NotFound

        with contextlib.suppress(APIError, NotFound):  # ended meanwhile: poll() says so
            self.container.kill(signal="SIGTERM")

    def kill(self) -> None:
        from runner.docker.container import kill

        kill(self.container)


class DockerExecutor:
    name = "docker"
    on_this_host = True

    def __init__(self, image: str, read_only: list[Path]):
        self.image = image
        self.read_only = list(read_only)

    def mounts(self, run: Path) -> list[tuple[str, bool]]:
        return covering_mounts([(Path(run).resolve(), False), (cache_dir(), True),
                                *[(p, True) for p in self.read_only]])

    def spec(self, run: Path, worker: Worker, task: Path, name: str | None = None,
             planned: bool = False):
        from runner.docker.container import worker_container_spec

        return worker_container_spec(
            self.image, worker,
            ["python3", "-m", "runner.batch.worker", "--task", str(Path(task).resolve())],
            self.mounts(run), name=name, planned=planned)

    def start_worker(self, run: Path, worker: Worker, task: Path) -> DockerContainer:
        from runner.docker.container import start

        log_path = RunDir(run).log_path(worker.name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # Unique per attempt: a killed run's containers may still exist under older names.
        name = f"runner-{worker.name}-{os.getpid()}-{int(time.time())}"
        return DockerContainer(start(self.spec(run, worker, task, name)), log_path)

    def describe(self, run: Path, worker: Worker, task: Path) -> str:
        from runner.docker.container import run_command_text

        return run_command_text(self.spec(run, worker, task, planned=True), detach=False,
                                remove=True)

    def compiler(self, work_dir: Path, dry_run: bool = False) -> CompileFn:
        """By the image's own iree-compile, so the runtime in the image loads what its
        compiler wrote."""
        return ImageCompiler(self.image, Path(work_dir).resolve() / "compile", dry_run)

    def image_info(self) -> dict[str, Any] | None:
        from runner.docker.image import image_info

        return image_info(self.image)

    def check(self, plan: Plan, where: str, dry_run: bool = False) -> list[str]:
        """The image is in the docker engine (where the workers and the compile run)."""
        from runner.base.errors import BadInput
        from runner.docker.engine import connect
        from runner.docker.image import image_info

        try:
            client = connect(timeout=10)
        except RunnerError as e:
            if dry_run:
                return [f"image {self.image}: not checked, {e.message}"]
            raise
        try:
            image_info(self.image, client=client, provenance=False)
        except RunnerError as e:
            raise BadInput(e.message, where="--image",
                           fix="build it with `runner image build`, `docker pull` it, or "
                           "pass an image the engine has (`docker images`)") from None
        return []

    def probe_worker(self, plan: Plan) -> WorkerProbe:
        """The image's python in the first worker's container (its devices and env), with
        nothing mounted: the check imports, it reads no file of the run."""
        from runner.docker.container import (
            kill,
            logs,
            run_command_text,
            start,
            wait,
            worker_container_spec,
        )

        worker = plan.workers[0]
        name = f"runner-check-{os.getpid()}-{int(time.time())}"
        spec = worker_container_spec(self.image, worker, probe_argv(worker, "python3"),
                                     name=name)
        shown = run_command_text(spec, detach=False, remove=True)
        try:
            container = start(spec)
        except ServiceUnreachable as e:  # a dry run without an engine (check() says so)
            return WorkerProbe(shown, None, e.message)
        except RunnerError as e:
            return WorkerProbe(shown, -1, e.message)
        try:
            code = wait(container, timeout=WORKER_PROBE_TIMEOUT_S)
            output = logs(container).strip()
        finally:
            kill(container)
        if code == 2 and "arguments are required: --task" in output:
            return WorkerProbe(shown, None, "the image's runner predates the worker's "
                               "--check; an image built by `runner image build` now has it")
        return WorkerProbe(shown, -1 if code is None else code, output)

    def keeps_queue(self, run: RunDir, manifest: RunManifest) -> bool:
        return False

    def start(self, run: RunDir, manifest: RunManifest, plan: Plan) -> WorkerPool:
        run.path.mkdir(parents=True, exist_ok=True)  # mounted into every container
        return WorkerPool(run.path, plan, CompiledModel.from_dict(manifest.compiled),
                          manifest.captions, self, set(manifest.sample_ids))

    def commands(self, run_dir: Path, plan: Plan) -> list[str]:
        return worker_commands(self, run_dir, plan)

"""The executor a run names (`--executor local|docker|slurm`): one choice for `runner run`,
bench, mlperf, validate and a Slurm node's own launcher."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.base.errors import BadInput
from runner.batch.executors import Executor, LocalExecutor
from runner.config.mlperf_data import CAPTIONS_FILE
from runner.config.profile import Profile

EXECUTORS = ("local", "docker", "slurm")  # what `--executor` takes


def executor_for(name: str, profile: Profile, *, image: str | None = None,
                 captions: Path | None = None, slurm: Any = None) -> Executor:
    """The executor called `name`: `local`, `docker` (needs the harness image tag) or
    `slurm` (needs SlurmOptions; its node tasks use a local or docker launcher)."""
    if name == "local":
        return LocalExecutor()
    if name == "docker":
        if not image:
            raise BadInput("the docker executor needs a harness image", where="--image",
                           fix="build one with `runner image build --iree wheels:3.13.0` "
                           "and pass its tag")
        from runner.batch.docker_executor import DockerExecutor, read_only_inputs

        return DockerExecutor(image, read_only_inputs(profile, captions or CAPTIONS_FILE))
    if name == "slurm":
        from runner.batch.cluster import SlurmOptions
        from runner.batch.slurm import SlurmExecutor

        options = (slurm or SlurmOptions()).validated()
        node = executor_for(options.node_executor, profile, image=options.image,
                            captions=captions)
        return SlurmExecutor(options, node)
    raise BadInput(f"unknown executor {name!r}", where="--executor",
                   fix=f"use one of {', '.join(EXECUTORS)}")

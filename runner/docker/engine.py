"""The connection to the docker engine, with one clear error when there is none.

No engine runs by default on these machines, so the
commonest failure is not a bug but a missing setup step; the error says which script to run.
"""

from __future__ import annotations

import os
from typing import Any

from runner.base.errors import ServiceUnreachable, ToolFailed
from runner.base.paths import DOCKER_SETUP_SCRIPT

# Builds stream for minutes between log lines (pip downloading a 300 MB wheel, ninja linking
# libIREECompiler.so), and the SDK's socket timeout applies to each read, so it must outlast
# the longest silent step, not the whole build.
BUILD_READ_TIMEOUT_S = 6 * 3600


def _docker():
    try:
        import docker
    except ImportError as e:
        raise ToolFailed("the docker SDK is not installed", where="python: import docker",
                         fix="pip install -e '.[docker]'") from e
    return docker


def connect(timeout: float = 120.0) -> Any:
    """A `docker.DockerClient` that has answered a ping.

    The SDK fails lazily and with transport-level messages (a FileNotFoundError deep inside
    urllib3 for a missing socket); callers get one RunnerError naming the engine address and
    the setup script instead.
    """
    docker = _docker()
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except Exception as e:  # DockerException, requests' ConnectionError, socket errors
        raise ServiceUnreachable(
            f"no docker engine answers at {host}: {_short(e)}",
            where="DOCKER_HOST" if "DOCKER_HOST" in os.environ else "docker engine",
            fix=f"run `sudo bash {DOCKER_SETUP_SCRIPT}` (installs docker.io and starts "
            "dockerd), or point DOCKER_HOST at a running engine") from e
    return client


def engine_version(client: Any) -> str:
    return str(client.version().get("Version", "unknown"))


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[-1][:300] if text else type(e).__name__

"""Fixtures and helpers for tests that need a real docker engine.

Import the fixtures into a test module (`from docker_support import docker_client, ...`);
pytest then provides them there. The engine is brought up once per session by
scripts/docker_setup.sh (idempotent). A test skips only if that truly cannot work here (not
root and no engine); under CI (`CI` set) that is a failure instead, so a broken setup can
never turn the docker suite into a row of skips. Images are built once per session and are
content-addressed, so a later session on the same engine finds them in seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from repo_support import REPO

from runner.base.errors import RunnerError
from runner.docker.engine import connect
from runner.docker.image import BuildResult, build_image, parse_source

SETUP = REPO / "scripts" / "docker_setup.sh"
WHEEL_VERSION = "3.13.0"

_setup_error: list[str | None] = []


def ensure_engine() -> str | None:
    """Run the setup script once per process; None when the engine and base image are
    ready, else why not. The script is run even when an engine answers: a fresh engine (CI)
    answers but has no base image yet, and on a ready machine the script takes 0.1 s."""
    if not _setup_error:
        proc = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True,
                              check=False, timeout=900)
        if proc.returncode != 0:
            _setup_error.append(f"{SETUP} failed (exit {proc.returncode}):\n"
                                f"{proc.stderr[-2000:]}")
        else:
            try:
                connect(timeout=10)
                _setup_error.append(None)
            except RunnerError as e:
                _setup_error.append(str(e))
    return _setup_error[0]


@pytest.fixture(scope="session")
def docker_client() -> Any:
    error = ensure_engine()
    if error is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have a docker engine: {error}")
        pytest.skip(f"no docker engine can be started here: {error}")
    return connect()


def _log(line: str) -> None:
    # Shown by pytest only for failing tests (captured), which is when it is wanted.
    print(line)


@pytest.fixture(scope="session")
def project_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runner checkout as it is when the session starts, installed into test images.

    Others may edit runner/ while the suite runs; building from a snapshot keeps one
    session's images (and their content tags) stable, so "unchanged inputs" really are.
    """
    root = tmp_path_factory.mktemp("project")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).is_file():
            shutil.copy2(REPO / name, root / name)
    shutil.copytree(REPO / "runner", root / "runner",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


def build(spec: str, client: Any, project: Path, **kwargs: Any) -> BuildResult:
    """build_image for tests: from the session's project snapshot, log captured by pytest."""
    kwargs.setdefault("progress", _log)
    return build_image(parse_source(spec), client=client, project_dir=project, **kwargs)


@pytest.fixture(scope="session")
def wheels_image(docker_client: Any, project_snapshot: Path) -> BuildResult:
    """iree-base-compiler + iree-base-runtime 3.13.0 on runner-base:bookworm."""
    return build(f"wheels:{WHEEL_VERSION}", docker_client, project_snapshot)


def make_build_tree(root: Path) -> Path:
    """An IREE build tree with the real layout, assembled from the installed wheels.

    `compiler/bindings/python/iree/compiler` and `runtime/bindings/python/iree/{runtime,
    _runtime,_runtime_libs}` are the wheels' own packages; `tools/` holds the wheels' native
    tools. `tools/iree-compile` is a relative symlink into the compiler bindings' _mlir_libs,
    as build trees do hold symlinks: the binary finds libIREECompiler.so through RUNPATH
    $ORIGIN, which resolves through the link, so the 335 MB library is not duplicated.
    Files are hard-linked from site-packages where the filesystem allows.
    """
    site = Path(sysconfig.get_paths()["purelib"]) / "iree"
    if not (site / "compiler").is_dir() or not (site / "runtime").is_dir():
        pytest.skip("iree-base-compiler and iree-base-runtime must be installed on the host")
    build = root / "build"
    compiler_py = build / "compiler/bindings/python/iree"
    runtime_py = build / "runtime/bindings/python/iree"
    _copy(site / "compiler", compiler_py / "compiler")
    for name in ("runtime", "_runtime", "_runtime_libs"):
        _copy(site / name, runtime_py / name)
    tools = build / "tools"
    tools.mkdir(parents=True)
    (tools / "iree-compile").symlink_to(
        "../compiler/bindings/python/iree/compiler/_mlir_libs/iree-compile")
    for tool in ("iree-run-module", "iree-benchmark-module"):
        shutil.copy2(site / "_runtime_libs" / tool, tools / tool)
    return build


def _copy(src: Path, dst: Path) -> None:
    def link(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=link,
                    ignore=shutil.ignore_patterns("__pycache__"))


@pytest.fixture(scope="session")
def build_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_build_tree(tmp_path_factory.mktemp("iree-build-tree"))


@pytest.fixture(scope="session")
def build_dir_image(docker_client: Any, build_tree: Path, project_snapshot: Path) -> BuildResult:
    return build(f"build-dir:{build_tree}", docker_client, project_snapshot)


def run_in_image(client: Any, image: str, argv: list[str], **kwargs: Any) -> tuple[int, str]:
    """Run argv in a fresh container of `image`; (exit code, stdout+stderr)."""
    container = client.containers.run(image, argv, detach=True, network_mode="host", **kwargs)
    try:
        code = int(container.wait(timeout=300)["StatusCode"])
        return code, container.logs(stdout=True, stderr=True).decode(errors="replace")
    finally:
        container.remove(force=True)

"""Shared fixtures: the tiny model compiled once per session through the real compile cache,
and real IREE release wheels. Each is made once whichever pytest-xdist worker asks first
(tests/shared_work.py); the others find it in the runner's caches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def _share_the_cores_between_workers() -> None:
    """Under N pytest-xdist workers, each worker (and every process it starts) gets its share
    of the cores for OpenMP, MKL and OpenBLAS pools: torch's OpenMP threads spin while they
    wait, so two workers each running cores-many of them burn the cores spinning (one
    scoring test took 269 s of CPU beside another worker, 61 s alone). Set before torch is
    imported, and inherited by the runner processes the tests start."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers > 1:
        share = str(max(1, (os.cpu_count() or 1) // workers))
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ.setdefault(name, share)


_share_the_cores_between_workers()


import pytest  # noqa: E402  (after the thread shares: numpy reads them when imported)
from lab_support import lab_home  # noqa: E402
from shared_work import once, shared_dir  # noqa: E402

from runner.base.paths import cache_dir  # noqa: E402
from runner.config.profile import Profile, load_profile  # noqa: E402
from runner.model.compiled_model import CompiledModel, compile_model  # noqa: E402

# What each test costs in wall and CPU seconds (--suite-cost PATH; scripts/suite_cost.py), and
# what a test that hangs was doing when its time ran out (--test-timeout SECONDS).
pytest_plugins = ("suite_cost", "watchdog")


# 3.11.0's tiny-model images are 1 LSB off the other two's (which make the same bytes)
WHEEL_VERSIONS = ("3.11.0", "3.12.0", "3.13.0")


@pytest.fixture(scope="session")
def tiny_profile() -> Profile:
    return load_profile("tiny")


@pytest.fixture(scope="session")
def tiny_compiled(tiny_profile: Profile, tmp_path_factory) -> dict[int, CompiledModel]:
    """Batch size -> compiled tiny model (real iree-compile, cached across sessions)."""
    with once(tmp_path_factory, "tiny-compile"):
        return {b: compile_model(tiny_profile, b) for b in tiny_profile.model.batch_sizes}


@pytest.fixture(scope="session")
def small_run(tmp_path_factory) -> Path:
    """A finished run of two samples on the cpu profile, unscored, for the tests that only
    read a run (dry runs of the commands that take one): made once per session."""
    from cli_support import cli

    def build(out: Path) -> None:
        proc = cli("run", "--profile", "cpu", "--count", "2", "--no-score", "--out",
                   out / "run")
        assert proc.returncode == 0, proc.stderr
    return shared_dir(tmp_path_factory, "small-run", build) / "run"


@pytest.fixture(scope="session")
def small_checkpoint(tmp_path_factory) -> Path:
    """A small diffusers-format SDXL checkpoint (the tiny model's shapes, SDXL's layout and
    exporter path), written once per session. Read only."""
    from diffusers_support import write_checkpoint

    return shared_dir(tmp_path_factory, "small-checkpoint", write_checkpoint)


@pytest.fixture
def lab_profiles(small_checkpoint, tmp_path, monkeypatch) -> Path:
    """This test's HOME holds the lab profiles' checkpoint (the caches stay where they are).
    Returns the HOME."""
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(cache_dir()))
    home = lab_home(tmp_path, small_checkpoint)
    monkeypatch.setenv("HOME", str(home))
    return home


# The dispatch bench's --out: a user's --out reaches commands and files.
DISPATCH_BENCH_OUT = "out $(touch pwned) 'q\" dir"


def bench_dispatches(out: Path, stages: tuple[str, ...] = ()) -> dict:
    """A real `runner bench --dispatches 5` of the tiny model's `stages` (default: the GPU
    check's) into `out`, on one core per device (a second test worker slows a two-thread
    executor for as long as it takes one of the two cores); its bench.json."""
    from runner.cli.main import main
    from runner.gpucheck.plan import BENCH_STAGES

    argv = ["bench", "--profile", "tiny", "--set", "layout.cores_per_device=1",
            "--no-throughput", "--repetitions", "3", "--min-time", "5x", "--dispatches", "5",
            "--out", str(out)]
    for stage in stages or BENCH_STAGES:
        argv += ["--stage", stage]
    assert main(argv) == 0
    return json.loads((out / "bench.json").read_text())


@pytest.fixture(scope="session")
def tiny_dispatch_bench(tmp_path_factory) -> Path:
    """One real `runner bench --dispatches` of the tiny CLIP, UNet step and VAE, both ways
    (the HAL profiler, and every dispatch of a recorded call timed alone), once per
    session: tests/test_dispatch_profile.py reads its profiles, tests/test_dispatch_replay.py
    holds the two against each other. Read only. It compiles the batch size it benches
    (1), not every one tiny_compiled does; a module another worker is compiling the compile
    cache waits for."""
    return shared_dir(tmp_path_factory, DISPATCH_BENCH_OUT, bench_dispatches)


@pytest.fixture(scope="session")
def dispatch_bench():
    """bench_dispatches, for a test that measures a stage again."""
    return bench_dispatches


@pytest.fixture(scope="session")
def release_wheels(tmp_path_factory) -> dict[str, list[Path]]:
    """Real iree-base-compiler/runtime wheels of three releases, downloaded once (pip's
    cache, then ours) and kept under the runner's cache across sessions."""
    with once(tmp_path_factory, "release-wheels"):
        return _download_wheels()


def _download_wheels() -> dict[str, list[Path]]:
    out = {}
    for version in WHEEL_VERSIONS:
        directory = cache_dir() / "test-wheels" / version
        if len(list(directory.glob("*.whl"))) < 2:
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d",
                 str(directory), f"iree-base-compiler=={version}",
                 f"iree-base-runtime=={version}"], capture_output=True, text=True,
                check=False, timeout=900)
            assert proc.returncode == 0, proc.stderr[-2000:]
        out[version] = sorted(directory.glob("*.whl"))
    return out


# Tests that the docker engine or the Slurm cluster serves run on one pytest-xdist worker, in
# turn: the images they build are the same (built once) and a run takes every slot of the
# cluster (its node tasks wait, then are withdrawn, beside another run). One group for both:
# a test that uses both (a Slurm sweep over a docker-built IREE) must run beside neither.
# A test is in it by its marker or its fixture.
SERIAL_GROUP = "docker-and-slurm"
SERIAL_NEEDS = {"docker": "docker_client", "slurm": "slurm_cluster"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups into the nodeids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """How pytest-xdist's `--dist loadgroup` (scripts/test.sh) shares the tests out: those of
    a module that share a module-scoped fixture stay on one worker, which builds it once;
    a test that shares none goes to whichever worker is free."""
    for item in items:
        group = SERIAL_GROUP if any(item.get_closest_marker(marker) or fixture in
                                    item.fixturenames for marker, fixture in
                                    SERIAL_NEEDS.items()) else None
        if group is None and _uses_module_fixture(item):
            group = item.nodeid.split("::", 1)[0]
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))


def _uses_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(
        defs[-1].scope in ("module", "class", "package")
        for defs in info.name2fixturedefs.values() if defs)

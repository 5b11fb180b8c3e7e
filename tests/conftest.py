"""Shared fixtures: the tiny model compiled once per session through the real compile cache,
and real IREE release wheels."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runner.base.paths import cache_dir
from runner.config.profile import Profile, load_profile
from runner.model.compiled_model import CompiledModel, compile_model

REPO = Path(__file__).resolve().parent.parent
# 3.11.0's tiny-model images are 1 LSB off the other two's (which make the same bytes)
WHEEL_VERSIONS = ("3.11.0", "3.12.0", "3.13.0")


@pytest.fixture(scope="session")
def tiny_profile() -> Profile:
    return load_profile("tiny")


@pytest.fixture(scope="session")
def tiny_compiled(tiny_profile: Profile) -> dict[int, CompiledModel]:
    """Batch size -> compiled tiny model (real iree-compile, cached across sessions)."""
    return {b: compile_model(tiny_profile, b) for b in tiny_profile.model.batch_sizes}


@pytest.fixture(scope="session")
def release_wheels() -> dict[str, list[Path]]:
    """Real iree-base-compiler/runtime wheels of three releases, downloaded once (pip's
    cache, then ours) and kept under the runner's cache across sessions."""
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

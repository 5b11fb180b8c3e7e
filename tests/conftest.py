"""Shared fixtures: the tiny model compiled once per session through the real compile cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.config.profile import Profile, load_profile
from runner.model.compiled_model import CompiledModel, compile_model

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def tiny_profile() -> Profile:
    return load_profile("tiny")


@pytest.fixture(scope="session")
def tiny_compiled(tiny_profile: Profile) -> dict[int, CompiledModel]:
    """Batch size -> compiled tiny model (real iree-compile, cached across sessions)."""
    return {b: compile_model(tiny_profile, b) for b in tiny_profile.model.batch_sizes}

"""Compile flags across IREE builds (runner/base/iree_flags.py): every shipped profile's flags
in the spelling of the build that compiles, checked against the real releases at both ends
of the tested range; a flag a build cannot take is refused before anything compiles."""

from __future__ import annotations

from pathlib import Path

import pytest
from repo_support import REPO

from runner.base.errors import RunnerError
from runner.base.iree_flags import RENAMES, Spelling, known_flags, spelled_for
from runner.base.iree_range import NEWEST, OLDEST, release
from runner.base.iree_tools import CompilerInfo, compiler_info
from runner.config.profile import load_profile
from runner.model.compile import compile_mlir

TINY = REPO / "runner" / "assets" / "tiny"
PROFILES = sorted(p.stem for p in (REPO / "configs").glob("*.yaml"))
SUBMODELS = ("clip", "unet", "unet_pipeline", "vae")
LAB_FLAGS = ("--iree-hal-target-device=hip", "--iree-rocm-target=gfx942",
             "--iree-rocm-waves-per-eu=2", "--iree-llvmgpu-prefetch-num-stages=2",
             "--iree-opt-level=O3")
CHIP_FLAGS = ("--iree-rocm-target", "--iree-hip-target", "--iree-cuda-target",
              "--iree-llvmcpu-target-cpu")


def by_version(version: str) -> CompilerInfo:
    """A compiler known only by its version (as a machine without one looks up modules
    compiled elsewhere): the table decides."""
    return CompilerInfo("iree-compile", version, "unknown")


def test_a_build_before_the_renames_gets_the_old_spellings():
    assert spelled_for(LAB_FLAGS, by_version("3.10.0rc20260107"), "here") == (
        "--iree-hal-target-device=hip", "--iree-hip-target=gfx942",
        "--iree-hip-waves-per-eu=2", "--iree-llvmgpu-enable-prefetch=true",
        "--iree-opt-level=O3")
    assert spelled_for(LAB_FLAGS, by_version("3.13.0"), "here") == LAB_FLAGS
    # a profile in the old spelling, compiled by a newer build: the new one
    assert spelled_for(("--iree-hip-waves-per-eu=2", "--iree-llvmgpu-enable-prefetch"),
                       by_version("3.12.0"), "here") == (
        "--iree-rocm-waves-per-eu=2", "--iree-llvmgpu-prefetch-num-stages=2")
    assert spelled_for(("--iree-llvmgpu-prefetch-num-stages=0",), by_version("3.9.0"),
                       "here") == ("--iree-llvmgpu-enable-prefetch=false",)


def test_a_value_with_no_older_spelling_is_refused_naming_flag_build_and_fix():
    with pytest.raises(RunnerError) as e:
        spelled_for(("--iree-llvmgpu-prefetch-num-stages=3",), by_version("3.9.0"),
                    "configs/x.yaml: target.compile_flags")
    text = str(e.value)
    assert e.value.where == "configs/x.yaml: target.compile_flags"
    assert "IREE 3.9.0 (`iree-compile`) does not know `--iree-llvmgpu-prefetch-num-stages=3`" \
        in text and "--iree-llvmgpu-enable-prefetch" in text
    assert "RENAMES" in e.value.fix


def test_the_installed_build_is_asked_and_refuses_what_it_does_not_know():
    """The compiler at hand is asked (`--help-list-hidden`), so a typo or a flag of another
    build stops before any compile, with the spelling it knows."""
    compiler = compiler_info()
    assert "--iree-opt-level" in known_flags(compiler.path)
    with pytest.raises(RunnerError) as e:
        spelled_for(("--iree-opt-levle=O3",), compiler, "--set target.compile_flags")
    assert "does not know `--iree-opt-levle=O3`: it knows --iree-opt-level" in str(e.value)
    with pytest.raises(RunnerError, match="no flag it knows is close"):
        spelled_for(("--no-such-flag-at-all",), compiler, "here")
    assert Spelling(compiler).knows("--iree-rocm-target")


@pytest.fixture(scope="module", params=[OLDEST, NEWEST])
def release_compiler(request) -> CompilerInfo:
    """The real iree-compile of a release at an end of the tested range, installed as a
    bisect installs a build (a venv under $RUNNER_CACHE_DIR/builds/, made once)."""
    from runner.base.iree_tools import _compiler_at
    from runner.bisect.builds import Sources, parse_build
    from runner.bisect.envs import ensure_env

    env = ensure_env(parse_build(f"wheels:{request.param}", Sources()), Sources())
    (binary,) = Path(env.python).parent.parent.glob(
        "lib/python*/site-packages/iree/compiler/_mlir_libs/iree-compile")
    return _compiler_at(str(binary))


@pytest.mark.slow
def test_the_rename_table_is_what_each_release_knows(release_compiler):
    known = known_flags(release_compiler.path)
    built = release(release_compiler.version)
    assert built is not None
    for rename in RENAMES:
        since = release(rename.since)
        assert since is not None
        if built < since:
            assert rename.old in known and rename.new not in known, rename
        else:
            assert rename.new in known, rename
        # the table alone (no compiler at hand) gives what the build itself says
        assert Spelling(by_version(release_compiler.version)).knows(rename.new) == (
            rename.new in known)


@pytest.mark.slow
def test_every_shipped_profile_compiles_with_the_oldest_and_newest_release(release_compiler):
    """Each profile's flags for each submodel, spelled for the release, compile the tiny
    prompt encoder retargeted to the profile's backend and chip. (IREE 3.9 and 3.10 cannot
    lower the tiny UNet's and VAE's attention for a GPU whatever the flags, so the encoder
    carries every submodel's flags.) Flag sets that differ only by chip compile once: the
    chip itself is checked by runner/model/gpu_targets.py."""
    compiled: dict[tuple[str, ...], str] = {}
    for name in PROFILES:
        target = load_profile(name, {"model": "builtin:tiny"}).target
        for submodel in SUBMODELS:
            flags = target.flags_for(submodel, release_compiler)
            assert all(f.partition("=")[0] in known_flags(release_compiler.path)
                       for f in flags if f.startswith("-")), (name, submodel, flags)
            same = tuple(f for f in flags if f.partition("=")[0] not in CHIP_FLAGS)
            if same not in compiled:
                result = compile_mlir(TINY / "clip_bs1.mlir", flags, compiler=release_compiler)
                assert Path(result.vmfb).stat().st_size > 0
                compiled[same] = name
    assert len(compiled) >= 9  # cpu, and the hip and cuda profiles' four submodels each

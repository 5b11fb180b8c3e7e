"""A CUDA/HIP chip or LLVM CPU the installed iree-compile does not know is refused before
compiling, naming the targets it knows (runner/model/gpu_targets.py), with the real
compiler: compiling for a GPU target needs no GPU. IREE 3.13 crashes on
`--iree-cuda-target=h100` and stops on `sm_90` with an IR dump; the runner says instead
what it knows and what to do."""

from __future__ import annotations

import dataclasses
import json
import shlex

import pytest
from cli_support import cli

from runner.base.errors import RunnerError
from runner.base.iree_tools import compiler_info
from runner.base.paths import cache_dir, caches_read_only
from runner.cli.main import main
from runner.config.profile import load_profile
from runner.model.gpu_targets import (
    CANDIDATES,
    ChipFlag,
    check_gpu_target,
    documented_chip,
    probe_chip,
)


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """One cache of probe answers for the module: each target is probed once."""
    cache = tmp_path_factory.mktemp("gpu-targets-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RUNNER_CACHE_DIR", str(cache))
        yield cache


def test_an_unknown_cuda_name_is_refused_before_compiling_naming_what_is_known(probed,
                                                                               capsys):
    """`h100` makes iree-compile 3.13 segfault with a stack dump: the dry run already says
    no, lists the CUDA targets the compiler knows (sm_80 among them) and the fix."""
    assert main(["compile", "--profile", "h100-seeded", "--set", "target.chip=h100",
                 "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "does not know the CUDA target 'h100'" in err, err
    known = err.split("it knows ", 1)[1].split("\n", 1)[0].split(", ")
    assert "sm_80" in known and "sm_90" not in known and set(known) <= set(CANDIDATES["cuda"])
    assert "Stack dump" not in err and "Please report issues" not in err
    # It names the profile's key, not the first MLIR file compiled, and suggests the chip
    # the project's CUDA profile compiles for (not the newest this compiler knows, sm_89).
    assert f"{load_profile('h100-seeded').path}: target.chip: " in err
    assert ".mlir" not in err.split("fix:", 1)[0]
    fix = err.split("fix:", 1)[1]
    assert "--set target.chip=sm_80" in fix and "JIT" in fix and "sm_89" not in fix
    assert documented_chip("cuda") == ("sm_80", str(load_profile("h100").path))


def test_answers_are_cached_per_compiler_version_and_commit(probed):
    """After one probe, the answer comes from $RUNNER_CACHE_DIR/gpu-targets/: a compiler of
    the same version and commit at a path that does not exist answers the same (no process
    runs), and another version probes afresh (and cannot, here: the path is missing)."""
    real = compiler_info()
    check_gpu_target(("--iree-cuda-target=sm_80",), real, "probe")
    with pytest.raises(RunnerError, match="does not know the CUDA target 'sm_90'"):
        check_gpu_target(("--iree-cuda-target=sm_90",), real, "probe")
    (cached,) = (cache_dir() / "gpu-targets").glob("*.json")
    answers = json.loads(cached.read_text())
    assert real.commit in cached.name and real.version in cached.name
    assert answers["--iree-cuda-target=sm_80"] is True
    assert answers["--iree-cuda-target=sm_90"] is False
    ghost = dataclasses.replace(real, path="/nonexistent/iree-compile")
    check_gpu_target(("--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"), ghost, "x")
    with pytest.raises(RunnerError, match=r"it knows .*sm_80"):
        check_gpu_target(("--iree-cuda-target=sm_90",), ghost, "x")
    other = dataclasses.replace(ghost, version="0.0.1")
    with pytest.raises(FileNotFoundError):
        check_gpu_target(("--iree-cuda-target=sm_80",), other, "x")


def test_a_probe_stopped_by_a_signal_is_not_cached_as_an_unknown_chip(probed, tmp_path):
    """The real iree-compile, stopped from outside (SIGTERM, as Ctrl-C or a kill would): no
    answer, nothing cached, and the check lets the compile itself run; the same chip probed
    to the end is known."""
    real = compiler_info()
    stopper = tmp_path / "stopped-iree-compile"
    stopper.write_text(f"#!/bin/sh\n{shlex.quote(real.path)} \"$@\" &\nkill -TERM $!\n"
                       "wait $!\n")
    stopper.chmod(0o755)
    stopped = dataclasses.replace(real, path=str(stopper), commit="stopped")
    flag = ChipFlag("cuda", "--iree-cuda-target=", "sm_86")
    assert probe_chip(stopped, flag) is None
    check_gpu_target((flag.flag,), stopped, "x")  # no verdict: the compile would tell
    assert not any("stopped" in p.name for p in (cache_dir() / "gpu-targets").glob("*"))
    assert probe_chip(real, flag) is True


def test_hip_targets_are_checked_the_same_way(probed):
    real = compiler_info()
    check_gpu_target(("--iree-hal-target-device=hip", "--iree-rocm-target=gfx942"), real, "x")
    with pytest.raises(RunnerError) as err:
        check_gpu_target(("--iree-rocm-target=cdna3",), real, "model.mlir")
    text = str(err.value)
    assert text.startswith("model.mlir: ") and "does not know the HIP target 'cdna3'" in text
    assert "gfx942" in text.split("it knows ", 1)[1] and "gfx950" in text
    assert "set target.chip=gfx942" in text.split("fix:", 1)[1]


def test_a_flag_the_compiler_lacks_is_left_to_the_compile(probed):
    """`--iree-hip-target` (a spelling IREE 3.13 dropped) makes the probe say nothing about
    the chip, so the compile itself reports the flag."""
    real = compiler_info()
    check_gpu_target(("--iree-hip-target=gfx942",), real, "x")
    (cached,) = (cache_dir() / "gpu-targets").glob("*.json")
    assert "--iree-hip-target=gfx942" not in json.loads(cached.read_text())


def test_a_cpu_the_backend_does_not_know_is_refused_by_the_dry_run(probed, tmp_path):
    """`target.chip=gfx9999` on the cpu profile becomes `--iree-llvmcpu-target-cpu=gfx9999`:
    the dry run refuses it as the real run would, naming CPUs the compiler knows, and
    writes nothing; `host` and a named x86 CPU pass."""
    real = compiler_info()
    check_gpu_target(("--iree-hal-target-device=local", "--iree-llvmcpu-target-cpu=host"),
                     real, "x")
    check_gpu_target(("--iree-llvmcpu-target-cpu=x86-64-v3",), real, "x")
    out = tmp_path / "run"
    for argv in (["run", "--profile", "cpu", "--count", "2", "--out", out, "--dry-run"],
                 ["compile", "--profile", "cpu", "--dry-run"]):
        ran = cli(*argv, "--set", "target.chip=gfx9999")
        assert ran.returncode == 2, ran.stderr
        assert "does not know the LLVM CPU target 'gfx9999'" in ran.stderr
        assert "fix: set target.chip to a CPU it knows: host" in ran.stderr
        assert "Traceback" not in ran.stderr and not out.exists()


def test_a_hostile_chip_name_is_one_argument_and_refused(probed, tmp_path, capsys,
                                                          monkeypatch):
    """A chip name with shell syntax reaches iree-compile as one argument (no shell) and is
    refused like any unknown name; the cache file's name comes from the compiler alone."""
    monkeypatch.chdir(tmp_path)
    chip = "sm_80 $(touch pwned)'\"\n;x"
    with pytest.raises(RunnerError, match="does not know the CUDA target"):
        check_gpu_target((f"--iree-cuda-target={chip}",), compiler_info(), "x")
    assert not (tmp_path / "pwned").exists()
    assert [p.name for p in (cache_dir() / "gpu-targets").iterdir()] == [
        p.name for p in (cache_dir() / "gpu-targets").glob("*.json")]


def test_a_dry_run_asks_the_compiler_once_per_chip_and_writes_no_answer(tmp_path,
                                                                         monkeypatch):
    """A dry run writes no cache, so it keeps its answers in its process, per compiler
    version and commit as the cache does: every compile it plans for a chip asks the real
    iree-compile once (a bench dry run over four layouts asked it 30 times), an unknown
    chip's candidates once too; a real run still probes a chip the cache lacks and writes
    its answer there."""
    real = compiler_info()
    calls = tmp_path / "calls $(touch pwned)"
    counting = tmp_path / "iree-compile"
    counting.write_text(f"#!/bin/sh\necho x >> {shlex.quote(str(calls))}\n"
                        f"exec {shlex.quote(real.path)} \"$@\"\n")
    counting.chmod(0o755)
    compiler = dataclasses.replace(real, path=str(counting), commit="counted")  # its own key
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))

    def asked() -> int:
        return len(calls.read_text().splitlines()) if calls.exists() else 0

    with caches_read_only():
        for _ in range(3):
            check_gpu_target(("--iree-llvmcpu-target-cpu=host",), compiler, "x")
        assert asked() == 1
        for _ in range(2):
            with pytest.raises(RunnerError, match="does not know the CUDA target 'sm_90'"):
                check_gpu_target(("--iree-cuda-target=sm_90",), compiler, "x")
        assert asked() == 1 + len(CANDIDATES["cuda"])  # sm_90, then each other candidate
    assert not (tmp_path / "cache").exists() and not (tmp_path / "pwned").exists()
    check_gpu_target(("--iree-llvmcpu-target-cpu=host",), compiler, "x")
    assert asked() == 2 + len(CANDIDATES["cuda"])
    (cached,) = (tmp_path / "cache" / "gpu-targets").glob("*.json")
    assert json.loads(cached.read_text()) == {"--iree-llvmcpu-target-cpu=host": True}


def test_a_dry_run_asks_about_its_chip_once_and_keeps_the_answer_to_itself(tmp_path,
                                                                          monkeypatch):
    """A dry run writes no cache, yet its compile plan checks the chip for each of the
    model's files: it asks the real iree-compile (through a wrapper that logs each call)
    once at most, and the next dry run in the same process not at all; the cache stays empty."""
    real = compiler_info()
    tools, calls = tmp_path / "tools dir", tmp_path / "calls.log"
    tools.mkdir()
    wrapper = tools / "iree-compile"
    wrapper.write_text(f"#!/bin/sh\necho \"$*\" >> {shlex.quote(str(calls))}\n"
                       f"exec {shlex.quote(real.path)} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))

    def probes() -> int:
        lines = calls.read_text().splitlines() if calls.exists() else []
        return sum("--compile-to=executable-targets" in line for line in lines)

    seen = []
    for _ in range(2):
        ran = cli("--iree-tools", tools, "compile", "--profile", "h100-seeded", "--dry-run")
        assert ran.returncode == 0, ran.stderr
        assert "--iree-cuda-target=sm_80" in ran.stdout + ran.stderr
        seen.append(probes())
    # once at most: not at all where an earlier test of this process asked this compiler
    # (the answers are kept per compiler version and commit, the exact count is the test above's)
    assert seen[0] <= 1 and seen[1] == seen[0]
    assert not (tmp_path / "cache" / "gpu-targets").exists()

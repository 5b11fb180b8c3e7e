"""The compile cache with the real iree-compile, and the per-version ROCm chip flag."""

from pathlib import Path

import pytest
from lab_support import LAB_CHECKPOINT

from runner.base.errors import RunnerError
from runner.base.iree_flags import rocm_chip_flag
from runner.base.iree_tools import CompilerInfo, compiler_info
from runner.config.profile import load_profile
from runner.model.compile import compile_key, compile_mlir
from runner.model.compiled_model import compile_model

TINY = Path(__file__).resolve().parent.parent / "runner" / "assets" / "tiny"
CPU_FLAGS = ("--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
             "--iree-llvmcpu-target-cpu=host")


def test_second_compile_is_a_cache_hit(tiny_profile, tiny_compiled):
    again = compile_model(tiny_profile, 1)
    assert all(r.cached for r in again.compiled)
    assert [r.vmfb for r in again.compiled] == [r.vmfb for r in tiny_compiled[1].compiled]
    assert all(Path(r.vmfb).is_file() for r in again.compiled)
    assert all(len(r.vmfb_sha256) == 64 for r in again.compiled)


def test_uncached_sdxl_artifacts_are_a_clear_error():
    with pytest.raises(RunnerError) as err:
        compile_model(load_profile("sdxl"), 1)
    assert "not in the download cache" in str(err.value)
    assert "configs/models/sdxl.yaml: submodels.clip.mlir" in str(err.value)


def test_key_changes_with_flags_compiler_and_flag_files(tmp_path):
    mlir = TINY / "vae_bs1.mlir"
    compiler = compiler_info()
    base = compile_key(mlir, CPU_FLAGS, compiler)
    assert compile_key(mlir, (*CPU_FLAGS, "--iree-opt-level=O3"), compiler) != base
    other = CompilerInfo(compiler.path, "3.12.0", "abc")
    assert compile_key(mlir, CPU_FLAGS, other) != base
    spec = tmp_path / "spec.mlir"
    spec.write_text("module {}\n")
    flags = (*CPU_FLAGS, f"--iree-codegen-tuning-spec-path={spec}")
    before = compile_key(mlir, flags, compiler)
    spec.write_text("module { }\n")
    assert compile_key(mlir, flags, compiler) != before


def test_rocm_chip_flag_is_spelled_per_compiler_version():
    assert rocm_chip_flag("gfx942", CompilerInfo("x", "3.10.0", "c")) == "--iree-hip-target=gfx942"
    assert rocm_chip_flag("gfx942", CompilerInfo("x", "3.13.0rc1", "c")) == (
        "--iree-rocm-target=gfx942")


@pytest.mark.slow
def test_lab_compile_path_for_gfx942_runs_for_real():
    """Compiling for a GPU needs no GPU: the hip flags the mi325x profile uses really compile."""
    profile = load_profile("sdxl", {"model": "builtin:tiny", "target.compile_flags": [],
                                    "target.submodel_flags": {}})
    flags = profile.target.flags_for("vae", compiler_info())
    assert "--iree-rocm-target=gfx942" in flags
    result = compile_mlir(TINY / "vae_bs1.mlir", flags)
    assert Path(result.vmfb).stat().st_size > 0


def test_compile_failure_shows_the_command(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("this is not mlir\n")
    with pytest.raises(RunnerError) as err:
        compile_mlir(bad, CPU_FLAGS)
    assert "iree-compile failed" in str(err.value) and "bad.mlir" in str(err.value.fix)


def test_dry_run_prints_commands_without_files():
    compiled = compile_model(load_profile("sdxl"), 1, dry_run=True)
    commands = [r.command for r in compiled.compiled]
    assert len(commands) == 4  # clip, unet + its pipeline module, vae
    assert all("--iree-rocm-target=gfx942" in c for c in commands)
    assert all("downloads" in c[1] for c in commands)


def test_lab_dry_run_prints_the_export_then_batch_32_compiles(lab_profiles, capsys):
    """mi325x runs batch 32: with no export yet, the exact export command comes first; its
    VAE decodes in fp16, as AMD's harness does (configs/mi325x.yaml)."""
    ckpt = lab_profiles / LAB_CHECKPOINT
    profile = load_profile("mi325x")
    compiled = compile_model(profile, 32, dry_run=True)
    assert capsys.readouterr().out.split("\n")[0] == (
        f"runner export sdxl --from {ckpt} --batch-sizes 32 --vae-batch-sizes 32 --dtype fp16 "
        "--vae-dtype fp16")
    names = [Path(r.command[1]).name for r in compiled.compiled]
    assert names == ["clip_bs32.mlir", "unet_bs32.mlir", "unet_pipeline_bs32.mlir",
                     "vae_bs32.mlir"]
    assert all("--iree-rocm-target=gfx942" in r.command for r in compiled.compiled)


SDXL_SUITE = (Path(__file__).resolve().parent / "fixtures" / "iree-test-suites" /
              "sharktank_models" / "quality_tests" / "sdxl")
REPORTING_FLAGS = "--iree-scheduling-dump-statistics-"  # IREE CI's reporting, not codegen


@pytest.mark.parametrize("profile_name", ["sdxl", "mi300x", "mi325x", "mi355x", "sdxl-seeded"])
@pytest.mark.parametrize(("flags_key", "test_file", "field"), [
    ("clip", "clip_rocm.json", "compiler_flags"),
    ("unet", "unet_fp16_rocm.json", "compiler_flags"),
    ("unet_pipeline", "unet_fp16_rocm.json", "pipeline_compiler_flags"),
    ("vae", "vae_rocm.json", "compiler_flags"),
])
def test_sdxl_profiles_carry_iree_ci_rocm_flags_exactly(profile_name, flags_key, test_file,
                                                        field):
    """Same flags in the same order as IREE CI's quality tests; only the chip flag (which
    IREE CI adds per runner) is ours, and the device flag leads."""
    import json

    ci = [f for f in json.loads((SDXL_SUITE / test_file).read_text())[field]
          if not f.startswith(REPORTING_FLAGS)]
    profile = load_profile(profile_name)
    ours = list(profile.target.flags_for(flags_key, CompilerInfo("x", "3.13.0", "c")))
    assert ours[:2] == ["--iree-hal-target-device=hip",
                        f"--iree-rocm-target={profile.target.chip}"]
    device = "--iree-hal-target-device=hip"
    assert device in ci
    assert ours[2:] == [f for f in ci if f != device]


def test_rocm_and_hip_are_one_backend():
    rocm = load_profile("sdxl", {"target.backend": "rocm"})
    hip = load_profile("sdxl")
    assert rocm.target == hip.target and rocm.layout == hip.layout
    with pytest.raises(RunnerError) as err:
        load_profile("sdxl", {"target.backend": "roc"})
    assert "target.backend" in str(err.value) and "rocm" in str(err.value.fix)


def test_a_hung_compiler_is_retried_then_reported(monkeypatch, tmp_path):
    """A compiler that never answers (here a real `sleep`) is given up on twice, clearly."""
    from runner.model.compile import _run_compiler

    monkeypatch.setenv("RUNNER_COMPILE_TIMEOUT", "0.2")
    with pytest.raises(RunnerError) as err:
        _run_compiler(["sleep", "30"], tmp_path / "m.mlir")
    assert "did not finish within 0s, twice" in str(err.value)
    assert "RUNNER_COMPILE_TIMEOUT" in str(err.value.fix)


@pytest.mark.slow
def test_a_compiler_that_uses_no_cpu_is_taken_as_hung_before_its_limit(monkeypatch, tmp_path,
                                                                       capsys):
    """The hang iree-compile was seen in sits at 0% CPU: a compile that uses no CPU (here a
    real `sleep` below a shell) for RUNNER_COMPILE_STALL seconds is stopped and tried again,
    not waited on for the hour of its limit; one that works (a busy child, its CPU counted
    through the shell) is left to finish however long it takes."""
    import sys

    from runner.model.compile import _run_compiler

    monkeypatch.setenv("RUNNER_COMPILE_TIMEOUT", "600")
    monkeypatch.setenv("RUNNER_COMPILE_STALL", "1.5")
    with pytest.raises(RunnerError) as err:
        _run_compiler(["sh", "-c", "sleep 600; :"], tmp_path / "m.mlir")
    said = capsys.readouterr().err
    assert said.count("used no CPU for 2s (hung)") == 2 and "(attempt 2 of 2)" in said
    assert "hung: no CPU used for 2s" in str(err.value)
    busy = ("import time\nt = time.process_time()\n"
            "while time.process_time() - t < 4: pass\nprint('done')")
    done = _run_compiler(["sh", "-c", f'{sys.executable} -c "$0"; :', busy], tmp_path / "m.mlir")
    assert done.returncode == 0 and done.stdout == "done\n"
    assert "hung" not in capsys.readouterr().err


SMALL_MLIR = """func.func @double(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = arith.addf %a, %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""


def _flock_waiters() -> int:
    """This process's blocked flock requests (`->` lines of /proc/locks)."""
    import os

    lines = Path("/proc/locks").read_text().splitlines()
    return sum(1 for f in map(str.split, lines)
               if f[1:3] == ["->", "FLOCK"] and f[5] == str(os.getpid()))


def test_a_module_another_process_is_compiling_is_waited_for_not_compiled_again(
        tmp_path, monkeypatch, capsys):
    """Two runner processes (two test workers, two commands on one cache) needing the same
    module: the second waits for the first's compile and takes its vmfb, no second
    iree-compile. Here the first is this test holding the module's lock, and its compile
    lands (a real vmfb of the same key) while the second waits."""
    import fcntl
    import threading

    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))
    mlir = tmp_path / "double.mlir"
    mlir.write_text(SMALL_MLIR)
    made = compile_mlir(mlir, CPU_FLAGS)
    vmfb = Path(made.vmfb)
    kept = vmfb.replace(tmp_path / "made.vmfb")
    capsys.readouterr()
    got: list = []
    with open(vmfb.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        second = threading.Thread(target=lambda: got.append(compile_mlir(mlir, CPU_FLAGS)))
        second.start()
        while second.is_alive() and not _flock_waiters():
            second.join(0.01)
        kept.replace(vmfb)  # the first compile lands
    second.join()
    (result,) = got
    assert result.cached and result.vmfb == made.vmfb
    assert result.vmfb_sha256 == made.vmfb_sha256
    said = capsys.readouterr().err
    assert "compiled double.mlir" not in said
    assert f"another process is compiling {vmfb.name}; waiting for it" in said

"""The NVIDIA H100 profiles (configs/h100.yaml, h100-seeded.yaml): the exact compile commands
of a dry run, one worker per GPU through CUDA_VISIBLE_DEVICES, and IREE's CUDA backend
compiling the tiny model with the profile's flags for real (no GPU needed to compile)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from runner.base.errors import RunnerError
from runner.base.iree_tools import compiler_info
from runner.base.paths import cache_dir
from runner.batch.run import plan_for
from runner.cli.main import main
from runner.config.profile import load_profile
from runner.model.compile import compile_mlir

TINY = Path(__file__).resolve().parent.parent / "runner" / "assets" / "tiny"
SDXL_SUITE = (Path(__file__).resolve().parent / "fixtures" / "iree-test-suites" /
              "sharktank_models" / "quality_tests" / "sdxl")
ROCM_ONLY = ("--iree-hal-target-device=hip", "--iree-rocm-waves-per-eu=")
CUDA_DEVICE = ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"]


def iree_ci_flags(test_file: str, field: str = "compiler_flags") -> list[str]:
    """IREE CI's SDXL flags for ROCm less the ROCm-only ones and the reporting flags."""
    flags = json.loads((SDXL_SUITE / test_file).read_text())[field]
    return [f for f in flags if not f.startswith((*ROCM_ONLY, "--iree-scheduling-dump-"))]


def test_compile_dry_run_prints_the_export_then_cuda_compiles(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["compile", "--profile", "h100-seeded", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("runner export sdxl --seeded --batch-sizes 8 --vae-batch-sizes 8 "
                        "--dtype fp16 --vae-dtype fp32")
    profile = load_profile("h100-seeded")
    export = profile.model.base_dir
    assert export.parent == cache_dir() / "exports"
    expected = {
        "clip_bs8.mlir": iree_ci_flags("clip_rocm.json"),
        "unet_bs8.mlir": iree_ci_flags("unet_fp16_rocm.json"),
        "unet_pipeline_bs8.mlir": iree_ci_flags("unet_fp16_rocm.json",
                                                "pipeline_compiler_flags"),
        "vae_bs8.mlir": iree_ci_flags("vae_rocm.json"),
    }
    placeholder = str(cache_dir() / "vmfb" / "<key[:2]>" / "<key: sha256 of the MLIR, flags and "
                      "compiler>.vmfb")
    assert [shlex.split(line) for line in lines[1:]] == [
        [compiler_info().path, str(export / name), *CUDA_DEVICE, *flags, "-o", placeholder]
        for name, flags in expected.items()]


def test_bench_dry_run_of_a_model_not_exported_prints_its_export_and_each_stage(
        capsys, monkeypatch, tmp_path):
    """What the real bench would do first (export the seeded model at each batch size), then
    every stage's benchmark planned from the config that export writes: exit 0, nothing
    written (it read the export's model.json, absent before any export, and exited 2)."""
    cache, out = tmp_path / "cache", tmp_path / "bench"
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(cache))
    assert main(["bench", "--profile", "h100-seeded", "--batch-size", "4,8", "--out", str(out),
                 "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for bs in (4, 8):
        stages = lines.index(f"# stages at batch {bs} (inputs recorded from one pipeline pass "
                             f"into {out / 'stages' / f'bs{bs}'})")
        assert lines[stages - 1] == (f"runner export sdxl --seeded --batch-sizes {bs} "
                                     f"--vae-batch-sizes {bs} --dtype fp16 --vae-dtype fp32")
        benchmarks = [shlex.split(line) for line in lines[stages:]
                      if "iree-benchmark-module" in line][:4]
        assert [next(w for w in argv if w.startswith("--function=")) for argv in benchmarks] \
            == ["--function=encode_prompts", "--function=run_forward",
                "--function=produce_image_latents", "--function=decode"]
        assert f"--input=@{out / 'stages' / f'bs{bs}' / 'vae' / 'input0.npy'}" in \
            benchmarks[3]
    assert not cache.exists() and not out.exists()


def test_plan_gives_each_worker_one_gpu():
    plan = plan_for(load_profile("h100-seeded"))
    assert [(w.device_id, w.device_uri, w.env) for w in plan.workers] == [
        (d, "cuda://0", {"CUDA_VISIBLE_DEVICES": str(d)}) for d in range(8)]
    assert plan.layout.partition is None and plan.layout.batch_size == 8
    assert any("CUDA_VISIBLE_DEVICES=<id>" in note for note in plan.notes)
    h100 = load_profile("h100")
    assert h100.target.driver == "cuda" and h100.model.source.startswith("checkpoint:")
    with pytest.raises(RunnerError, match="scoring refused"):
        load_profile("h100-seeded").model.check_scorable()


@pytest.mark.slow
def test_cuda_backend_compiles_the_tiny_model_with_the_profiles_flags(tmp_path, monkeypatch):
    """Real iree-compile, CUDA target, no GPU: the h100 profile's clip flags (IREE CI's,
    with pad-to-intrinsics preprocessing) on the tiny prompt encoder give a CUDA vmfb. And
    the reason the profile's chip is sm_80, not the H100's sm_90: this IREE has no Hopper
    entry in its GPU target table and refuses sm_90, which the runner says before compiling
    (runner/model/gpu_targets.py), naming sm_80 among the targets it knows (when it stops
    refusing, set configs/h100.yaml's chip to sm_90)."""
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))
    target = load_profile("h100").target
    flags = target.flags_for("clip", compiler_info())
    result = compile_mlir(TINY / "clip_bs1.mlir", flags)
    assert b"cuda-nvptx-fb" in Path(result.vmfb).read_bytes()  # IREE's CUDA executable format
    hopper = tuple(f.replace("=sm_80", "=sm_90") for f in flags)
    with pytest.raises(RunnerError, match="does not know the CUDA target 'sm_90'") as err:
        compile_mlir(TINY / "clip_bs1.mlir", hopper)
    assert re.search(r"it knows [\w, ]*\bsm_80\b", str(err.value)), err.value

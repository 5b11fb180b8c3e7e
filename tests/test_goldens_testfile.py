"""IREE CI's test JSONs: every real SDXL fixture parses; both schemas; errors name file+field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repo_support import REPO

from runner.base.errors import RunnerError
from runner.goldens.select import Selection, backend_name
from runner.goldens.testfile import (
    find_test_files,
    load_benchmark_file,
    load_test_file,
    load_tests,
)

SUITES = REPO / "tests" / "fixtures" / "iree-test-suites" / "sharktank_models"
QUALITY = SUITES / "quality_tests"
SDXL_FILES = sorted((QUALITY / "sdxl").glob("*.json"))


def write(path: Path, obj: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=4))
    return path


@pytest.mark.parametrize("path", SDXL_FILES, ids=lambda p: p.stem)
def test_every_real_sdxl_fixture_parses(path):
    raw = json.loads(path.read_text())
    (test,) = load_test_file(path)
    assert test.schema == "quality" and test.model == "sdxl"
    assert test.modules[0].mlir == raw["mlir"] and test.backend == path.stem.rsplit("_", 1)[1]
    assert [r.source for r in test.outputs] == [o["source"] for o in raw.get("outputs", [])]
    assert test.modules[0].compiler_flags == tuple(raw.get("compiler_flags", []))
    assert test.kind == "quality" and test.markers == ("quality", test.backend)
    assert test.run_function == raw.get("run_function", "main")
    assert test.device == raw.get("device", {"cpu": "local-task", "rocm": "hip"}[test.backend])
    for ref in (*test.inputs, *test.outputs):
        assert ref.spec is not None or ref.name.endswith(".npy")


def test_fixture_details():
    punet = load_test_file(QUALITY / "sdxl" / "punet_int8_fp16_rocm.json")[0]
    assert punet.submodel == "punet_int8_fp16" and punet.compile_chip_expecting_to_fail == (
        "gfx90a",)
    assert punet.tuner_file["mi300"] == "attention_and_matmul_spec_punet_mi300.mlir"
    assert str(punet.outputs[0].spec) == "1x4x128x128xf16"
    assert punet.outputs[0].name == "punet_fp16_out_v2.0.bin"
    unet = load_test_file(QUALITY / "sdxl" / "unet_fp16_cpu.json")[0]
    pipeline = unet.modules[1]
    assert pipeline.load and pipeline.mlir.endswith("bench_f16.mlir")
    assert pipeline.compiler_flags == ("--iree-hal-local-target-device-backends=llvm-cpu",
                                            "--iree-hal-target-device=local")
    scheduler = load_test_file(QUALITY / "sdxl" / "scheduler_cpu.json")[0]
    assert scheduler.compile_only and not scheduler.inputs and scheduler.device == "local-task"
    odd = load_test_file(QUALITY / "sdxl" / "unet_fp16_960_1024_cpu.json")[0]
    # A field IREE CI's quality runner reads (only to name its download folder).
    assert odd.extra == {} and odd.unknown == ()
    assert odd.inputs[0].spec is None  # .npy carries its own type


def test_selection_like_run_thresholds():
    everything = load_tests([QUALITY], Selection(model="sdxl"))
    assert len(everything) == len(SDXL_FILES) == 12
    clips = load_tests([QUALITY], Selection(model="sdxl", submodel="clip"))
    assert [t.name for t in clips] == ["sdxl/clip_cpu", "sdxl/clip_rocm"]
    assert [t.name for t in load_tests([QUALITY], Selection(
        model="sdxl", submodel="punet*", backend="rocm"))] == ["sdxl/punet_int8_fp16_rocm",
                                                               "sdxl/punet_int8_fp8_rocm"]
    assert len(load_tests([QUALITY / "sdxl"], Selection(backend="cpu"))) == 5
    with pytest.raises(RunnerError, match="no test matches"):
        load_tests([QUALITY], Selection(model="sdxl", submodel="nothing"))
    with pytest.raises(RunnerError, match="unknown backend"):
        backend_name("tpu", "--backend")


def test_benchmark_files_parse_separately():
    files = sorted((SUITES / "benchmarks" / "sdxl").glob("*.json"))
    assert files
    for path in files:
        bench = load_benchmark_file(path)
        assert bench.function and bench.inputs and bench.golden_time_ms
        with pytest.raises(RunnerError, match="benchmark file, not a quality test"):
            load_test_file(path)
    clip = load_benchmark_file(SUITES / "benchmarks" / "sdxl" / "clip_rocm.json")
    assert clip.golden_time_ms["mi300"] == 7.65 and str(clip.inputs[0]) == "1x64xi64"
    assert clip.golden_dispatch["mi308"] == 792 and clip.backend == "rocm"


REGRESSION = {
    "inputs": [{"source": "https://example.com/sdxl/in.0.bin", "value": "1x4x128x128xf16"}],
    "outputs": [{"source": "https://example.com/sdxl/punet_fp16_out.0.bin",
                 "value": "1x4x128x128xf16"}],
    "real_weights": "https://example.com/sdxl/punet_weights.irpa",
    "mlir": "https://example.com/sdxl/punet_fp16.mlir",
    "cpu_compiler_flags": ["--iree-llvmcpu-target-cpu-features=host"],
    "rocm_compiler_flags": ["--iree-opt-const-eval=false"],
    "rocm_pipeline_compiler_flags": ["--verify=false"],
    "cpu_threshold_args": ["--expected_f16_threshold=0.5f"],
    "rocm_threshold_args": ["--expected_f16_threshold=0.2f"],
    "run_cpu_function": "main",
    "run_rocm_function": "main_rocm",
    "rocm_run_test_expecting_to_fail": True,
    "rocm_compile_chip_expecting_to_fail": ["gfx90a"],
    "tuner_file": {"mi300": "external_test_files/spec_mi300.mlir"},
}


def test_regression_schema_gives_one_test_per_backend(tmp_path):
    path = write(tmp_path / "regression_tests" / "sdxl" / "punet_fp16.json", REGRESSION)
    cpu, rocm = load_test_file(path)
    assert (cpu.schema, cpu.backend, rocm.backend) == ("regression", "cpu", "rocm")
    assert cpu.submodel == rocm.submodel == "punet_fp16" and cpu.model == "sdxl"
    # IREE CI's regression runner appends the target backend to each backend's flags.
    assert cpu.modules[0].compiler_flags == ("--iree-llvmcpu-target-cpu-features=host",
                                             "--iree-hal-target-backends=llvm-cpu")
    assert rocm.modules[0].compiler_flags == ("--iree-opt-const-eval=false",
                                              "--iree-hal-target-backends=rocm")
    assert len(rocm.modules) == 1  # no pipeline_mlir
    assert cpu.threshold_args == ("--expected_f16_threshold=0.5f",)
    assert (cpu.run_function, rocm.run_function) == ("main", "main_rocm")
    assert (cpu.run_test_expecting_to_fail, rocm.run_test_expecting_to_fail) == (False, True)
    assert rocm.compile_chip_expecting_to_fail == ("gfx90a",) and cpu.tuner_file == {}
    assert (cpu.device, rocm.device) == ("local-task", "hip")
    only = write(tmp_path / "r2" / "sdxl" / "clip.json", {**REGRESSION, "rocm_tests_only": True})
    assert [t.backend for t in load_test_file(only)] == ["rocm"]


@pytest.mark.parametrize(("change", "message", "field"), [
    ({"mlir": None}, "missing required field `mlir`", "mlir"),
    ({"mlir": 3}, "`mlir` must be a non-empty string", "mlir"),
    ({"compiler_flags": "--x"}, "`compiler_flags` must be a list of strings", "compiler_flags"),
    ({"compile_only": "yes"}, "`compile_only` must be true or false", "compile_only"),
    ({"outputs": [{"value": "1xf16"}]}, "each entry needs a `source`", "outputs[0]"),
    ({"outputs": [{"source": "o.bin", "value": "1xq7"}]}, "cannot read tensor type",
     "outputs[0].value"),
    ({"inputs": [{"source": "in.bin"}]}, "a raw blob needs a `value`", "inputs[0].value"),
    ({"tuner_file": ["a.mlir"]}, "`tuner_file` must be a mapping", "tuner_file"),
    ({"add_pipeline_module": True}, "there is no `pipeline_mlir`", "add_pipeline_module"),
])
def test_errors_name_file_and_field(tmp_path, change, message, field):
    raw = {"mlir": "m.mlir", "device": "local-task"}
    raw.update(change)
    raw = {k: v for k, v in raw.items() if v is not None}
    path = write(tmp_path / "tiny" / "bad_cpu.json", raw)
    with pytest.raises(RunnerError, match=message) as e:
        load_test_file(path)
    assert f"{path}: {field}" in str(e.value)


def test_unreadable_files(tmp_path):
    bad = tmp_path / "x_cpu.json"
    bad.write_text("{not json")
    with pytest.raises(RunnerError, match="not valid JSON") as e:
        load_test_file(bad)
    assert str(bad) in str(e.value)
    write(tmp_path / "m" / "weird.json", {"mlir": "m.mlir"})
    with pytest.raises(RunnerError, match="cannot tell the backend"):
        load_test_file(tmp_path / "m" / "weird.json")
    empty = tmp_path / "m" / "empty"
    empty.mkdir()
    with pytest.raises(RunnerError, match="no test files"):
        find_test_files([empty])

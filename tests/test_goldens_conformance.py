"""Every rule IREE CI's own test-suite runners enforce (iree-test-suites, see
runner/goldens/fields.py for the commit), encoded as a test of ours: random weights made as
pytest_iree/irpa_gen.py makes them, the exact iree-run-module / iree-benchmark-module
arguments test_base.py builds, what runs through the real tools, tolerance_factor, the older
runners' xfail/skip/None semantics and benchmark rules, and unknown fields. The same rules were
checked side by side with IREE's runners (scripts/iree_conformance.py, docs/goldens.md)."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest
from repo_support import REPO

from runner.base.errors import RunnerError
from runner.base.fileio import sha256_file
from runner.bench import benchmark_module as bm
from runner.bench.goldens import GoldenOptions, GoldenResult, _verdicts, check_benchmark
from runner.cli.main import main
from runner.config.sources import resolve_source
from runner.goldens.check import run_test
from runner.goldens.plan import CheckOptions
from runner.goldens.random_weights import generate_random_weights, random_weights
from runner.goldens.testfile import (
    load_benchmark_file,
    load_test_file,
)

GOLDENS = REPO / "goldens"
TINY_TORCH = GOLDENS / "tiny-torch"
TINY = GOLDENS / "tiny"
CLIP_MLIR = REPO / "runner" / "assets" / "tiny" / "clip_bs1.mlir"
# sha256 of the archive IREE's runner generated for (clip_bs1.mlir, seed 7), measured with
# scripts/iree_conformance.py (case torch-random-weights) at iree-test-suites 612f936, and
# the one it writes for MLIR below with seed 3 (every element type it generates).
IREE_MLIR_SEED3_SHA256 = "fe564b129e39eb2921703f2574d08387fb89aa6c3c7132cfd741fb1f82edacb5"
IREE_CLIP_SEED7_SHA256 = "fa451843f86e87ee3c289f7482e7728b2d1983a1efa094875a1fa7bd9b70f69c"

MLIR = """module @m {
  util.global private @a = #flow.parameter.named<"model"::"a"> : tensor<3x4xf32>
  util.global private @b = #stream.parameter.named<"b"> : tensor<5xf16>
  util.global private @n = dense<1.0> : tensor<2xf32>
  util.global private @c = #flow.parameter.named<"model"::"c"> : tensor<2x2xbf16>
  util.global private @d = #flow.parameter.named<"model"::"d"> : tensor<7xi8>
  util.global private @e = #flow.parameter.named<"model"::"e"> : tensor<3xui16>
  util.global private @f = #flow.parameter.named<"model"::"f"> : tensor<4xf8E4M3FNUZ>
  util.global private @g = #flow.parameter.named<"model"::"g"> : tensor<2xi64>
  func.func @main() -> tensor<3x4xf32> {
    %0 = util.global.load @a : tensor<3x4xf32>
    return %0 : tensor<3x4xf32>
  }
}
"""


def archive(path: Path) -> dict[str, bytes]:
    import iree.runtime as rt

    index = rt.ParameterIndex()
    index.load(str(path))
    return {key: bytes(entry.file_view) for key, entry in index.items()}


# --- random weights -------------------------------------------------------------------------

def test_random_weights_are_irpa_gen_draws_in_global_order(tmp_path):
    """One default_rng(seed) for the archive; globals in order; floats normal(0, 0.01) cast,
    integers integers(min, max) in their type; non-parameter globals skipped."""
    import ml_dtypes

    mlir = tmp_path / "m.mlir"
    mlir.write_text(MLIR)
    out = tmp_path / "p.irpa"
    assert generate_random_weights(mlir, 3, out, "t") == 7
    rng = np.random.default_rng(3)
    want = {}
    for name, shape, dtype in (("a", (3, 4), np.float32), ("b", (5,), np.float16),
                               ("c", (2, 2), ml_dtypes.bfloat16), ("d", (7,), np.int8),
                               ("e", (3,), np.uint16), ("f", (4,), ml_dtypes.float8_e4m3fnuz),
                               ("g", (2,), np.int64)):
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            want[name] = rng.integers(info.min, info.max, size=shape, dtype=dtype).tobytes()
        else:
            want[name] = rng.normal(0.0, 0.01, size=shape).astype(dtype).tobytes()
    assert archive(out) == want
    assert sha256_file(out) == IREE_MLIR_SEED3_SHA256
    other = tmp_path / "q.irpa"
    generate_random_weights(mlir, 4, other, "t")
    assert archive(other) != want


def test_random_weights_refuse_what_irpa_gen_refuses(tmp_path):
    mlir = tmp_path / "m.mlir"
    mlir.write_text(MLIR.replace("tensor<7xi8>", "tensor<7xi1>"))
    with pytest.raises(RunnerError, match="element type i1"):
        generate_random_weights(mlir, 0, tmp_path / "x.irpa", "t.json: weights[0]")
    mlir.write_text("module { not mlir")
    with pytest.raises(RunnerError, match="cannot parse the MLIR"):
        generate_random_weights(mlir, 0, tmp_path / "x.irpa", "t")


def test_random_weights_match_iree_runners_bytes(tmp_path, monkeypatch):
    """The tiny clip's archive for seed 7 is byte for byte the one IREE's runner wrote, and
    is cached by (MLIR, seed)."""
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path))
    path = random_weights(CLIP_MLIR, 7, "t")
    assert sha256_file(path) == IREE_CLIP_SEED7_SHA256
    mtime = path.stat().st_mtime_ns
    assert random_weights(CLIP_MLIR, 7, "t") == path and path.stat().st_mtime_ns == mtime
    assert random_weights(CLIP_MLIR, 8, "t") != path


# --- the torch_models schema --------------------------------------------------------------

def write_torch(folder: Path, name: str, raw: dict) -> Path:
    """A test file in a copy of tiny-torch's layout (modules found by name as in the suite)."""
    suite = folder / "tiny-torch"
    if not (suite / "modules").is_dir():
        (suite / "modules").mkdir(parents=True)
        for module in (TINY_TORCH / "modules").glob("*.json"):
            m = json.loads(module.read_text())
            # the runner's assets
            m["mlir"] = str(resolve_source(m["mlir"], base_dir=module.parent))
            (suite / "modules" / module.name).write_text(json.dumps(m))
        for blob in TINY_TORCH.glob("*.bin"):  # a test file names files beside it only
            shutil.copyfile(blob, suite / blob.name)
    path = suite / f"{name}.json"
    path.write_text(json.dumps(raw))
    return path


def tiny(name: str) -> dict:
    raw = json.loads((TINY_TORCH / f"{name}.json").read_text())
    for w in raw.get("weights", []):
        w["url"] = str(resolve_source(w["url"], base_dir=TINY_TORCH))
    return raw


def test_torch_fields_read_as_iree_reads_them(tmp_path):
    raw = tiny("clip_quality_cpu")
    raw["weights"] += [{"type": "random", "module": "tiny-torch/modules/clip_cpu", "seed": 5,
                        "scope": "extra"}]
    raw["outputs"] = [{"value": "@o.npy"}, {"url": "https://example.com/o1.npy"}]
    raw["inputs"][0] = {"value": "1x64xi64=0"}
    test = load_test_file(write_torch(tmp_path, "t_cpu", raw))[0]
    assert [(w.kind, w.scope, w.seed) for w in test.weights] == [
        ("url", "model", None), ("random", "extra", 5)]
    assert test.weights[1].module.mlir == str(CLIP_MLIR)
    assert [(s.value, s.url) for s in test.output_specs] == [
        ("@o.npy", None), (None, "https://example.com/o1.npy")]
    assert test.input_specs[0].url is None and test.inputs == ()  # a literal: tool only
    assert test.run_args == tuple(raw["run_args"]) and not test.unknown
    bench = tiny("vae_benchmark_cpu")
    assert load_benchmark_file(write_torch(tmp_path, "b_cpu", bench)) \
        .golden_time_tolerance_multiplier == {"*": 1.1}  # benchmark_test.py's default
    bench["tolerance_factor"] = 2.5
    assert load_benchmark_file(write_torch(tmp_path, "b_cpu", bench)) \
        .golden_time_tolerance_multiplier == {"*": 2.5}


@pytest.mark.parametrize(("weight", "message", "field"), [
    ({"url": "w.irpa", "scope": "model"}, "weights of type None", "weights[0].type"),
    ({"type": "url", "url": "w.irpa"}, "missing `scope`", "weights[0].scope"),
    ({"type": "random", "module": "tiny-torch/modules/clip_cpu", "scope": "model"},
     "`seed` must be a whole number", "weights[0].seed"),
    ({"type": "random", "seed": 1, "scope": "model", "module": "nope/modules/x"},
     "module file nope/modules/x.json not found", "weights[0].module"),
    ({"type": "splat", "scope": "model"}, "IREE CI's runner knows `url` and `random`",
     "weights[0].type"),
])
def test_bad_weights_name_the_field(tmp_path, weight, message, field):
    raw = {**tiny("clip_quality_cpu"), "weights": [weight]}
    path = write_torch(tmp_path, "t_cpu", raw)
    with pytest.raises(RunnerError, match=message) as e:
        load_test_file(path)
    assert f"{path}: {field}" in str(e.value)


def test_an_argspec_needs_url_or_value(tmp_path):
    raw = {**tiny("clip_quality_cpu"), "inputs": [{"shape": "1x64xi64"}]}
    path = write_torch(tmp_path, "t_cpu", raw)
    with pytest.raises(RunnerError, match="needs a `url` or a `value`") as e:
        load_test_file(path)
    assert f"{path}: inputs[0]" in str(e.value)


def test_unknown_fields_are_named_everywhere(tmp_path):
    raw = tiny("clip_quality_cpu")
    raw.update(owner="me", golden_time_ms=3.0)
    raw["weights"][0]["sha"] = "x"
    raw["inputs"][1]["comment"] = "y"
    path = write_torch(tmp_path, "t_cpu", raw)
    module = tmp_path / "tiny-torch" / "modules" / "clip_cpu.json"
    module.write_text(json.dumps({**json.loads(module.read_text()), "notes": "z"}))
    unknown = load_test_file(path)[0].unknown
    assert any(f"{path}: unknown field `owner` (not a field" in u for u in unknown)
    assert any("`golden_time_ms` (IREE CI's torch_models runner reads it only for another"
               in u for u in unknown)
    assert any(f"{path}: weights[0]: unknown field `sha`" in u for u in unknown)
    assert any(f"{path}: inputs[1]: unknown field `comment`" in u for u in unknown)
    assert any(f"{module}: unknown field `notes`" in u for u in unknown)
    stat = write_torch(tmp_path, "s_cpu", {**json.loads(
        (TINY_TORCH / "clip_compstat_cpu.json").read_text()), "weights": []})
    assert any("`weights` (IREE CI's torch_models runner reads it only for another"
               in u for u in load_test_file(stat)[0].unknown)


def test_older_layouts_unknown_and_unset_fields(tmp_path):
    raw = json.loads((TINY / "clip_cpu.json").read_text())
    raw.update(custom_real_weights_group="g", owner="me")
    raw.pop("run_function")
    raw["outputs"][0]["note"] = 1
    path = tmp_path / "tiny" / "clip_cpu.json"
    path.parent.mkdir()
    path.write_text(json.dumps(raw))
    test = load_test_file(path)[0]
    assert [u.split(": unknown field ")[1].split(" ")[0] for u in test.unknown] == [
        "`owner`", "`note`"]
    assert test.unset == ("run_function",)
    bench = json.loads((GOLDENS / "tiny-bench" / "clip_cpu.json").read_text())
    bench.update(benchmark_repetitions=3, speed="x")
    bench.pop("device")
    bpath = tmp_path / "b" / "clip_cpu.json"
    bpath.parent.mkdir()
    bpath.write_text(json.dumps(bench))
    b = load_benchmark_file(bpath)
    assert [u.split("`")[1] for u in b.unknown] == ["speed"] and b.unset == ("device",)


# --- what runs, and how (real compiles, cached) ---------------------------------------------

def check(path: Path, **opts) -> object:
    return run_test(load_test_file(path)[0], CheckOptions(**opts))


def test_dry_run_shows_iree_runners_exact_arguments(tmp_path, monkeypatch):
    """test_base.py: iree-run-module, the modules, --parameters=<scope>=<file> per weight,
    --input / --output / --expected_output as <value>=@<file>, then run_args as written."""
    monkeypatch.setenv("RUNNER_OFFLINE", "1")
    raw = tiny("clip_quality_cpu")
    raw["weights"].append({"type": "url", "url": raw["weights"][0]["url"], "scope": "other"})
    raw["outputs"] = [{"value": "-"}]
    path = write_torch(tmp_path, "t_cpu", raw)
    r = check(path, dry_run=True)
    run = r.commands[-1]
    weights, suite = raw["weights"][0]["url"], path.parent
    assert run[0] == "iree-run-module" and run[1].startswith("--module=")
    assert run[2:] == [
        f"--parameters=model={weights}", f"--parameters=other={weights}",
        *(f"--input=1x64xi64=@{suite}/clip_input{i}_v1.0.bin" for i in range(4)),
        "--output=-",
        f"--expected_output=2x64x96xf32=@{suite}/clip_out0_v1.0.bin",
        f"--expected_output=2x64xf32=@{suite}/clip_out1_v1.0.bin",
        *raw["run_args"]]
    assert r.tool and "outputs" in r.tool


@pytest.mark.parametrize(("change", "status", "why"), [
    (lambda t: t["run_args"].append("--device_allocator=caching"), "passed",
     "run_args it does not read"),
    (lambda t: t["run_args"].append("--no_such_flag=1"), "failed", "run_args it does not"),
    (lambda t: t.update(run_args=[a for a in t["run_args"] if "--function" not in a]),
     "passed", "no --function"),
    (lambda t: t["weights"][0].update(scope="params"), "failed", "weights other than"),
])
@pytest.mark.slow
def test_runs_iree_cannot_do_in_process_go_through_the_tool(tmp_path, change, status, why):
    raw = tiny("vae_quality_cpu")
    change(raw)
    r = check(write_torch(tmp_path, "t_cpu", raw))
    assert r.status == status, r.message
    assert why in r.tool
    assert r.status == "passed" or "iree-run-module failed (exit" in r.message


def test_outputs_are_written_by_the_tool(tmp_path):
    """`outputs` go to iree-run-module as --output=: one per result, written unless expected
    outputs are compared (the tool's own rules, followed because the tool runs it)."""
    raw = tiny("clip_quality_cpu")
    raw["outputs"] = [{"value": f"@{tmp_path}/o0.npy"}, {"value": f"@{tmp_path}/o1.npy"}]
    r = check(write_torch(tmp_path, "t_cpu", raw))
    assert r.status == "passed" and not (tmp_path / "o1.npy").exists()
    raw.pop("expected_outputs")
    r = check(write_torch(tmp_path, "u_cpu", raw))
    assert r.status == "passed", r.message
    expected = np.fromfile(TINY_TORCH / "clip_out1_v1.0.bin", np.float32).reshape(2, 64)
    np.testing.assert_allclose(np.load(tmp_path / "o1.npy"), expected, atol=1e-4)
    raw["outputs"].pop()
    assert check(write_torch(tmp_path, "v_cpu", raw)).status == "failed"


def test_random_weights_are_used_by_the_run(tmp_path, monkeypatch):
    """Random weights instead of the real ones: the run no longer matches the goldens;
    without goldens it runs and passes, in-process (one `model` archive)."""
    raw = tiny("clip_quality_cpu")
    raw["weights"] = [{"type": "random", "module": "tiny-torch/modules/clip_cpu", "seed": 7,
                       "scope": "model"}]
    r = check(write_torch(tmp_path, "t_cpu", raw))
    assert r.status == "failed" and r.tool is None and r.outputs
    raw.pop("expected_outputs")
    r = check(write_torch(tmp_path, "u_cpu", raw))
    assert r.status == "passed" and r.warnings  # compared nothing: a warning


def test_expected_outputs_must_cover_every_result(tmp_path):
    """iree-run-module: `expected 1 list elements but 2 provided`."""
    raw = tiny("clip_quality_cpu")
    raw["expected_outputs"].pop()
    r = check(write_torch(tmp_path, "t_cpu", raw))
    assert r.status == "failed" and "1 expected outputs but encode_prompts returned 2" \
        in r.message


def older(tmp_path: Path, name: str, **change) -> Path:
    """A copy of goldens/tiny's test `name` with `change`: its blobs copied beside it (a test
    file names files inside its own directory), the MLIR and weights the runner's assets."""
    raw = json.loads((TINY / f"{name}.json").read_text())
    for key in ("mlir", "real_weights"):
        raw[key] = str(resolve_source(raw[key], base_dir=TINY))
    raw.update(change)
    raw = {k: v for k, v in raw.items() if v is not None}
    path = tmp_path / "tiny" / f"{name}.json"
    path.parent.mkdir(exist_ok=True)
    for entry in (*raw.get("inputs", []), *raw.get("outputs", [])):
        shutil.copyfile(TINY / entry["source"], path.parent / entry["source"])
    path.write_text(json.dumps(raw))
    return path


def test_older_runners_verdicts(tmp_path):
    """model_quality_run.py: compile_chip_expecting_to_fail xfails before compiling (any
    backend); compile_only skips the run; run_test_expecting_to_fail xfails before running;
    an unset run_function or device is passed as None and the run fails."""
    r = check(older(tmp_path, "vae_cpu", compile_chip_expecting_to_fail=["gfx942"]))
    assert (r.status, r.phase, r.commands) == ("xfailed", "compile", [])
    assert check(older(tmp_path, "vae_cpu", compile_chip_expecting_to_fail=["gfx942"]),
                 rocm_chip="gfx950").status == "passed"
    r = check(older(tmp_path, "vae_cpu", compile_only=True))
    assert (r.status, r.phase, r.run_seconds) == ("skipped", "run", 0.0)
    r = check(older(tmp_path, "vae_cpu", run_test_expecting_to_fail=True))
    assert (r.status, r.phase, r.actual) == ("xfailed", "run", ())
    for unset in ("run_function", "device"):
        r = check(older(tmp_path, "vae_cpu", **{unset: None}))
        assert r.status == "failed" and f"`{unset}` not set" in r.message
    r = check(older(tmp_path, "clip_cpu", threshold_args=["--expected_f32_threshold=0.0001",
                                                         "--device_allocator=caching"]))
    assert r.status == "passed" and "threshold_args it does not read" in r.tool
    assert "--device_allocator=caching" in r.commands[-1]


@pytest.mark.slow
def test_regression_runner_has_no_splat_weights_and_xfails_only_rocm(tmp_path):
    """test_model_threshold.py passes --parameters only with real_weights, and applies
    rocm_compile_chip_expecting_to_fail to the rocm test alone."""
    raw = json.loads(older(tmp_path, "vae_cpu").read_text())
    reg = {k: raw[k] for k in ("inputs", "outputs", "mlir")}
    reg.update(cpu_compiler_flags=["--iree-llvmcpu-target-cpu=host"],
               run_cpu_function="decode", rocm_compile_chip_expecting_to_fail=["gfx942"],
               cpu_threshold_args=raw["threshold_args"])
    path = tmp_path / "tiny" / "vae_regression.json"  # beside the blobs older() copied
    path.write_text(json.dumps(reg))
    cpu, rocm = load_test_file(path)
    r = run_test(cpu, CheckOptions())
    assert r.status == "failed" and not any("--parameters" in a for a in r.commands[-1])
    assert run_test(rocm, CheckOptions()).status == "xfailed"


def test_unknown_fields_warn_and_fail_under_strict(tmp_path):
    path = older(tmp_path, "vae_cpu", owner="me")
    r = check(path)
    assert r.status == "passed" and any("unknown field `owner`" in w for w in r.warnings)
    r = check(path, strict=True)
    assert r.status == "failed" and "(--strict)" in r.message and "`owner`" in r.message


# --- benchmarks ------------------------------------------------------------------------------

def latency(min_ms: float, mean_ms: float, mean_row: bool = True) -> bm.Latency:
    return bm.Latency(mean_ms, mean_ms, 0.0, min_ms, 5, 10, mean_row)


def judged(bench, measured: bm.Latency, sku: str = "cpu") -> GoldenResult:
    result = GoldenResult("t", "t.json", sku, "f", latency=measured, dispatch_count=100,
                          size_bytes=1000)
    _verdicts(bench, result)
    return result


def test_torch_benchmark_rule_fastest_times_tolerance_factor(tmp_path):
    """benchmark_test.py: min real_time <= golden_time_ms x tolerance_factor (1.1)."""
    raw = tiny("vae_benchmark_cpu")
    raw["golden_time_ms"] = 10.0
    bench = load_benchmark_file(write_torch(tmp_path, "b_cpu", raw))
    (line,) = judged(bench, latency(10.9, 50.0), "*").checks
    assert (line.limit, line.ok) == (pytest.approx(11.0), True)  # the mean does not count
    assert not judged(bench, latency(11.1, 11.1), "*").checks[0].ok
    raw["tolerance_factor"] = 1.0
    bench = load_benchmark_file(write_torch(tmp_path, "b_cpu", raw))
    assert not judged(bench, latency(10.5, 10.5), "*").checks[0].ok


def older_bench(tmp_path: Path, **change) -> object:
    raw = json.loads((GOLDENS / "tiny-bench" / "clip_cpu.json").read_text())
    raw.update(change)
    path = tmp_path / "tiny" / "clip_cpu.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({k: v for k, v in raw.items() if v is not None}))
    return load_benchmark_file(path)


def test_older_benchmark_rules(tmp_path):
    """model_benchmark_run.py: the mean x golden_time_tolerance_multiplier[sku]; a golden of 0
    is not checked; dispatches and size <= their goldens; no multiplier for the SKU fails."""
    bench = older_bench(tmp_path)
    checks = {c.name: c for c in judged(bench, latency(1.0, 5.5)).checks}
    assert checks["time_ms"].limit == pytest.approx(5.61) and checks["time_ms"].ok
    assert checks["dispatch_count"].ok and checks["size_bytes"].ok
    assert not judged(bench, latency(1.0, 5.7)).checks[0].ok
    zero = older_bench(tmp_path, golden_time_ms={"cpu": 0}, golden_dispatch={"cpu": 0},
                       golden_size={"cpu": 0})
    assert judged(zero, latency(1.0, 1.0)).checks == []
    bad = older_bench(tmp_path, golden_time_tolerance_multiplier=None)
    with pytest.raises(RunnerError, match="golden_time_tolerance_multiplier does not"):
        judged(bad, latency(1.0, 1.0))


def test_older_benchmark_skip_and_unset(tmp_path):
    """specific_chip_to_ignore skips whatever the backend; an unset function_run fails."""
    opts = GoldenOptions(sku="cpu", quality_dir=TINY, dry_run=True)
    r = check_benchmark(older_bench(tmp_path, specific_chip_to_ignore=["gfx942"]), opts)
    assert r.status == "skipped"
    r = check_benchmark(older_bench(tmp_path, function_run=None),
                        GoldenOptions(sku="cpu", quality_dir=TINY))
    assert r.status == "error" and "`function_run` not set" in r.message


def test_older_benchmark_needs_a_mean_row(tmp_path):
    """One repetition gives no `mean` aggregate: IREE CI's runner fails."""
    r = check_benchmark(older_bench(tmp_path), GoldenOptions(sku="cpu", quality_dir=TINY,
                                                             repetitions=1))
    assert r.status == "error" and "no `mean` row" in r.message


def test_torch_benchmark_feeds_files_and_passes_everything(tmp_path, capsys, monkeypatch):
    """An input with a url is fed (`--input=<value>=@<file>`), expected outputs and weights
    of any scope are passed, run_args as written; the benchmark then really runs it."""
    monkeypatch.setenv("RUNNER_OFFLINE", "1")
    raw = tiny("vae_benchmark_cpu")
    raw["inputs"][0]["url"] = "vae_input0_v1.0.bin"
    raw["expected_outputs"] = [{"url": "vae_out0_v1.0.bin", "value": "1x3x128x128xf32"}]
    path = write_torch(tmp_path, "b_cpu", raw)
    suite = path.parent
    assert main(["bench", "goldens", str(path), "--dry-run"]) == 0
    cmd = next(shlex.split(line) for line in capsys.readouterr().out.splitlines()
               if line.startswith("iree-benchmark-module"))
    weights = raw["weights"][0]["url"]
    assert cmd[1] == "--benchmark_format=json" and cmd[2].startswith("--module=")
    assert cmd[3:] == [f"--parameters=model={weights}",
                       f"--input=1x4x16x16xf32=@{suite}/vae_input0_v1.0.bin",
                       f"--expected_output=1x3x128x128xf32=@{suite}/vae_out0_v1.0.bin",
                       *raw["run_args"]]
    raw["inputs"][0]["url"] = "clip_input0_v1.0.bin"  # the wrong size
    r = check_benchmark(load_benchmark_file(write_torch(tmp_path, "w_cpu", raw)),
                        GoldenOptions(repetitions=2, warmup=0.0))
    assert r.status == "error" and "iree-benchmark-module failed" in r.message


def test_a_file_without_type_is_passed_over_like_iree_does(tmp_path, capsys):
    """conftest.py: a JSON without `type` is "not a valid JSON test file" and yields no
    test; here it is passed over with a warning (named on its own, it is an error)."""
    from runner.goldens.testfile import load_tests

    write_torch(tmp_path, "s_cpu", json.loads((TINY_TORCH / "clip_compstat_cpu.json")
                                              .read_text()))
    untyped = {k: v for k, v in tiny("clip_quality_cpu").items() if k != "type"}
    path = write_torch(tmp_path, "q_cpu", untyped)
    assert [t.submodel for t in load_tests([tmp_path / "tiny-torch"])] == ["s_cpu"]
    assert f"{path}: no `type`: not a test" in capsys.readouterr().err
    with pytest.raises(RunnerError, match="missing required field `type`"):
        load_tests([path])

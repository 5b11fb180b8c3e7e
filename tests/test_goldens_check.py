"""`runner goldens check` for real: iree-compile, the IREE runtime, IREE's own tools agreeing."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from repo_support import REPO

from runner.base.iree_tools import tool_path
from runner.cli.main import main
from runner.config.sources import download_path, resolve_source
from runner.goldens.check import check, run_test
from runner.goldens.plan import CheckOptions
from runner.goldens.testfile import load_test_file, load_tests
from runner.history.extract import extract
from runner.model.tensors import TensorSpec, read_tensor, write_tensor

TINY = REPO / "goldens" / "tiny"
QUALITY = REPO / "tests" / "fixtures" / "iree-test-suites" / "sharktank_models" / \
    "quality_tests"
IDENTITY_MLIR = ("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                 "  %0 = arith.addf %a, %a : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n")


def copy_suite(dest: Path, only: tuple[str, ...] = ("clip", "unet", "vae")) -> Path:
    """The tiny suite elsewhere: blobs copied, model references made absolute paths."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in only:
        raw = json.loads((TINY / f"{name}_cpu.json").read_text())
        for key in ("mlir", "real_weights"):
            raw[key] = str(resolve_source(raw[key], base_dir=TINY))
        for ref in raw["inputs"] + raw["outputs"]:
            shutil.copy(TINY / ref["source"], dest / ref["source"])
        (dest / f"{name}_cpu.json").write_text(json.dumps(raw, indent=4) + "\n")
    return dest


def corrupt(path: Path, value: str, flat_index: int, delta: float) -> tuple[int, ...]:
    spec = TensorSpec.parse(value)
    array = read_tensor(path, spec).copy()
    array.flat[flat_index] += delta
    write_tensor(path, array)
    return tuple(int(i) for i in np.unravel_index(flat_index, spec.shape))


def run_cli(*args: str) -> int:
    return main(["goldens", *args])


def test_tiny_suite_passes_on_cpu(tmp_path, capsys):
    assert run_cli("check", str(TINY), "--out", str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert out.count("PASS ") == 3 and "tiny/unet_cpu" in out
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    assert suite.get("tests") == "3" and suite.get("failures") == "0"
    assert sorted(c.get("name") for c in suite.iter("testcase")) == ["clip_cpu", "unet_cpu",
                                                                     "vae_cpu"]
    summary = (tmp_path / "summary.md").read_text()
    assert "| tiny/vae_cpu | PASS |" in summary and "1x3x128x128xf32" in summary
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["exit_code"] == 0 and len(results["results"]) == 3
    # what the results store keeps of it: each test's verdict, the compiler that made it
    (kept,) = extract(tmp_path)
    assert (kept.command, kept.verdict, kept.compiler_version) == (
        "goldens check", "pass", results["compiler"]["version"])
    assert {(m.subject, m.value, m.verdict) for m in kept.metrics if m.name == "passed"} == {
        (f"tiny/{name}", 1.0, "passed") for name in ("clip_cpu", "unet_cpu", "vae_cpu")}


def test_corrupted_golden_fails_with_worst_elements(tmp_path, capsys):
    suite = copy_suite(tmp_path / "suite")
    where = corrupt(suite / "vae_out0_v1.0.bin", "1x3x128x128xf32", 20000, 0.5)
    assert run_cli("check", str(suite), "--out", str(tmp_path / "out")) == 1
    out = capsys.readouterr().out
    assert "FAIL  suite/vae_cpu" in out and out.count("PASS ") == 2
    assert "1/49152 elements over tolerance" in out
    assert f"at {list(where)}: expected" in out  # the corrupted element, named
    junit = ET.parse(tmp_path / "out" / "junit.xml").getroot()
    assert junit.get("failures") == "1"
    failure = next(c for c in junit.iter("testcase") if c.get("name") == "vae_cpu").find(
        "failure")
    assert failure is not None and str(list(where)) in failure.text
    assert "FAIL" in (tmp_path / "out" / "summary.md").read_text()
    actual = np.load(tmp_path / "out" / "suite__vae_cpu" / "actual_output0.npy")
    assert actual.shape == (1, 3, 128, 128)  # the module's result, kept for a look


def test_iree_run_module_agrees_with_the_printed_command(tmp_path):
    """The `iree-run-module` line check prints is real: IREE's tool gives the same verdict."""
    suite = copy_suite(tmp_path / "suite", ("clip", "unet"))
    corrupt(suite / "unet_out0_v1.0.bin", "1x4x16x16xf32", 7, 0.1)
    report = check(load_tests([suite]), CheckOptions(), echo=False)
    verdicts = {r.test.submodel: r.status for r in report.results}
    assert verdicts == {"clip": "passed", "unet": "failed"}
    for r in report.results:
        cmd = r.commands[-1]
        # the bare name, as IREE CI's runner builds the line; run here by the tool
        # runner.base.iree_tools resolves, as check itself runs it
        assert cmd[0] == "iree-run-module" and any(
            a.startswith("--parameters=model=") for a in cmd)
        tool = subprocess.run([tool_path("iree-run-module"), *cmd[1:]], capture_output=True,
                              text=True, check=False)
        assert (tool.returncode == 0) == (r.status == "passed"), tool.stdout + tool.stderr


def test_expected_outputs_cover_every_result_or_fail(tmp_path):
    """iree-run-module (what IREE CI's runners call) fails when expected outputs do not cover
    every result; so does the in-process run, and the exact command shown fails for real."""
    suite = copy_suite(tmp_path / "suite", ("clip",))
    raw = json.loads((suite / "clip_cpu.json").read_text())
    raw["outputs"] = raw["outputs"][:1]
    (suite / "clip_cpu.json").write_text(json.dumps(raw))
    (result,) = check(load_tests([suite]), CheckOptions(), echo=False).results
    assert result.status == "failed" and "1 expected outputs but encode_prompts returned 2" \
        in result.message
    proc = subprocess.run(result.commands[-1], capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "expected 1 list elements but 2 provided" in (
        proc.stdout + proc.stderr)


def test_dry_run_renders_every_real_sdxl_fixture(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RUNNER_OFFLINE", "1")  # a dry run never needs the network
    tuners = tmp_path / "tuners"
    tuners.mkdir()
    for name in ("attention_and_matmul_spec_punet_mi300.mlir",
                 "attention_and_matmul_spec_unet_fp16_mi308.mlir"):
        (tuners / name).write_text("module {}\n")
    for sku in ("mi300", "mi308"):
        assert run_cli("check", str(QUALITY), "--model", "sdxl", "--dry-run", "--sku", sku,
                       "--tuner-dir", str(tuners)) == 0
        out = capsys.readouterr().out
        blocks = out.split("PLAN  ")[1:]
        assert len(blocks) == 12
        for block in blocks:
            name = block.split()[0]
            (test,) = load_test_file(QUALITY / f"{name}.json")
            commands = [shlex.split(line) for line in block.splitlines()
                        if line.startswith(("/", "iree-"))]
            compile_cmd = commands[0]
            assert Path(compile_cmd[0]).name == "iree-compile"
            assert compile_cmd[1] == str(download_path(test.modules[0].mlir))
            for flag in test.modules[0].compiler_flags:
                if "dump-statistics-file" not in flag:
                    assert flag in compile_cmd
            assert ("--iree-rocm-target=gfx942" in compile_cmd) == (test.backend == "rocm")
            spec = test.tuner_file.get(sku)
            tdl = f"--iree-codegen-transform-dialect-library={tuners / spec}" if spec else None
            assert (tdl in compile_cmd) if tdl else not any(
                "transform-dialect-library" in a for a in compile_cmd)
            if test.compile_only:
                assert len(commands) == 1
                continue
            run = commands[-1]
            assert run[:2] == ["iree-run-module", f"--device={test.device}"]
            assert f"--function={test.run_function}" in run
            for ref in test.inputs:
                value = f"{ref.value}=" if ref.value else ""
                assert f"--input={value}@{download_path(ref.source)}" in run
            for ref in test.outputs:
                value = f"{ref.value}=" if ref.value else ""
                assert f"--expected_output={value}@{download_path(ref.source)}" in run
            assert f"--parameters=model={download_path(test.weights[0].source)}" in run
            assert all(a in run for a in test.threshold_args)
            if len(test.modules) > 1 and test.modules[1].load:
                assert run[-1].startswith("--module=") and len(commands) == 3


def rocm_test(folder: Path, **fields) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    mlir = folder / "m.mlir"
    if not mlir.exists():
        mlir.write_text(IDENTITY_MLIR)
    raw = {"mlir": "m.mlir", "device": "hip", "compiler_flags": ["--iree-hal-target-device=hip"],
           **fields}
    path = folder / "tiny_rocm.json"
    path.write_text(json.dumps(raw))
    return path


def test_rocm_compiles_for_real_and_chip_expectations(tmp_path):
    """Compiling for gfx942 needs no GPU: the chip flag in 3.13's spelling is accepted. A
    chip IREE CI expects to fail is not compiled (its runner xfails before compiling)."""
    path = rocm_test(tmp_path / "ok", compile_only=True)
    (r,) = check(load_tests([path]), CheckOptions(), echo=False).results
    assert r.status == "skipped" and "--iree-rocm-target=gfx942" in r.commands[0]
    path = rocm_test(tmp_path / "ok", compile_only=True, compile_chip_expecting_to_fail=["gfx942"])
    (r,) = check(load_tests([path]), CheckOptions(), echo=False).results
    assert r.status == "xfailed" and r.commands == [] and "not compiled" in r.message
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "m.mlir").write_text("this is not MLIR\n")
    path = rocm_test(tmp_path / "broken", compile_chip_expecting_to_fail=["gfx942"])
    report = check(load_tests([path]), CheckOptions(), echo=False)
    assert report.results[0].status == "xfailed" and report.exit_code == 0
    report = check(load_tests([path]), CheckOptions(rocm_chip="gfx90a"), echo=False)
    assert report.results[0].status == "failed" and report.results[0].phase == "compile"
    assert "iree-compile failed" in report.results[0].message and report.exit_code == 1


def test_run_expected_to_fail(tmp_path):
    suite = copy_suite(tmp_path / "suite", ("unet",))
    raw = json.loads((suite / "unet_cpu.json").read_text())
    (suite / "unet_cpu.json").write_text(json.dumps({**raw, "run_test_expecting_to_fail": True}))
    report = check(load_tests([suite]), CheckOptions(), echo=False)
    (r,) = report.results
    # IREE CI's runner xfails it after the compile, without running it.
    assert (r.status, r.phase, r.actual, r.run_seconds) == ("xfailed", "run", (), 0.0)
    assert Path(r.commands[0][0]).name == "iree-compile" and report.exit_code == 0


def test_compile_only_and_splat_weights(tmp_path):
    """No real_weights: IREE CI's files are then compile-only; a run uses splat weights."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    write_tensor(folder / "latent.bin", np.zeros((1, 4, 16, 16), np.float32))
    raw = {"mlir": str(TINY.parent.parent / "runner" / "assets" / "tiny" / "vae_bs1.mlir"),
           "device": "local-task", "run_function": "decode",
           "compiler_flags": ["--iree-hal-target-device=local",
                              "--iree-hal-local-target-device-backends=llvm-cpu",
                              "--iree-llvmcpu-target-cpu=host"],
           "inputs": [{"source": "latent.bin", "value": "1x4x16x16xf32"}]}
    (folder / "vae_cpu.json").write_text(json.dumps(raw))
    (r,) = check(load_tests([folder]), CheckOptions(), echo=False).results
    assert r.status == "passed" and any("splat weights" in n for n in r.notes)
    assert r.actual[0].shape == (1, 3, 128, 128)
    assert any("--iree-parameter-splat=" in " ".join(c) for c in r.commands)
    (folder / "vae_cpu.json").write_text(json.dumps({**raw, "compile_only": True}))
    (r,) = check(load_tests([folder]), CheckOptions(), echo=False).results
    assert r.status == "skipped" and r.message.startswith("compile_only") and r.actual == ()


BATCH_MATMUL_SPEC = """\
module @cpu_spec attributes {transform.with_named_sequence} {
  transform.named_sequence @apply_op_config(%op: !transform.any_op {transform.readonly},
                                            %config: !transform.any_param {transform.readonly}) {
    transform.annotate %op "compilation_info" = %config : !transform.any_op, !transform.any_param
    transform.yield
  }
  transform.named_sequence @match_bmm(%op: !transform.any_op {transform.readonly})
      -> (!transform.any_op, !transform.any_param) {
    transform.match.operation_name %op ["linalg.batch_matmul"] : !transform.any_op
    %config = transform.param.constant #iree_codegen.compilation_info<
      lowering_config = #iree_cpu.lowering_config<distribution = [1, 16, 16, 0],
        vector_common_parallel = [1, TILE, TILE, 0], vector_reduction = [0, 0, 0, TILE]>,
      translation_info = #iree_codegen.translation_info<
        pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>> -> !transform.any_param
    transform.yield %op, %config : !transform.any_op, !transform.any_param
  }
  transform.named_sequence @__kernel_config(%variant: !transform.any_op {transform.consumed})
      -> !transform.any_op attributes { iree_codegen.tuning_spec_entrypoint } {
    %res = transform.foreach_match in %variant @match_bmm -> @apply_op_config
      : (!transform.any_op) -> !transform.any_op
    transform.yield %res : !transform.any_op
  }
}
"""


@pytest.mark.slow
def test_tuning_spec_really_tunes_cpu_codegen(tmp_path):
    """A transform-dialect spec works on llvm-cpu: it changes the code, not the numbers;
    an edited spec recompiles; IREE CI's per-SKU `tuner_file` takes the same spec."""
    suite = copy_suite(tmp_path / "suite", ("clip",))
    spec = tmp_path / "spec.mlir"
    spec.write_text(BATCH_MATMUL_SPEC.replace("TILE", "4"))
    (test,) = load_tests([suite])
    plain = run_test(test, CheckOptions())
    tuned = run_test(test, CheckOptions(tuning_spec=spec))
    assert plain.status == tuned.status == "passed"
    assert f"--iree-codegen-tuning-spec-path={spec}" in tuned.commands[0]
    plain_vmfb, tuned_vmfb = (Path(r.commands[0][-1]) for r in (plain, tuned))
    assert plain_vmfb != tuned_vmfb  # another cache key ...
    assert plain_vmfb.read_bytes() != tuned_vmfb.read_bytes()  # ... and other code
    spec.write_text(BATCH_MATMUL_SPEC.replace("TILE", "2"))  # edited in place
    edited = run_test(test, CheckOptions(tuning_spec=spec))
    assert edited.status == "passed" and not edited.compile_cached
    assert Path(edited.commands[0][-1]) not in (plain_vmfb, tuned_vmfb)
    # The SKU's tuner file, next to the test, as --iree-codegen-transform-dialect-library.
    spec.write_text(BATCH_MATMUL_SPEC.replace("TILE", "4"))
    shutil.copy(spec, suite / "clip_spec_mi300.mlir")
    raw = json.loads((suite / "clip_cpu.json").read_text())
    raw["tuner_file"] = {"mi300": "clip_spec_mi300.mlir"}
    (suite / "clip_cpu.json").write_text(json.dumps(raw))
    (sku_test,) = load_tests([suite])
    by_sku = run_test(sku_test, CheckOptions(sku="mi300"))
    flag = f"--iree-codegen-transform-dialect-library={suite / 'clip_spec_mi300.mlir'}"
    assert by_sku.status == "passed" and flag in by_sku.commands[0]
    assert Path(by_sku.commands[0][-1]).read_bytes() == tuned_vmfb.read_bytes()
    assert not any("transform-dialect" in a
                   for a in run_test(sku_test, CheckOptions(sku="mi250")).commands[0])
    # iree-compile ignores a transform library it cannot parse; check refuses it up front.
    (suite / "clip_spec_mi300.mlir").write_text("not a spec\n")
    broken = run_test(sku_test, CheckOptions(sku="mi300"))
    assert broken.status == "failed" and "tuning spec does not parse" in broken.message


def test_sources_over_http_go_through_the_cache(tmp_path, monkeypatch):
    from test_sources import BlobServer

    from runner.base.paths import cache_dir

    shared_vmfbs = cache_dir() / "vmfb"  # downloads isolated, compiled modules shared
    shared_vmfbs.mkdir(parents=True, exist_ok=True)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "vmfb").symlink_to(shared_vmfbs)
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))
    server = BlobServer()
    try:
        raw = json.loads((TINY / "unet_cpu.json").read_text())
        for ref in raw["inputs"] + raw["outputs"]:
            ref["source"] = server.put(f"/sharkpublic/tiny/{ref['source']}",
                                       (TINY / ref["source"]).read_bytes())
        for key in ("mlir", "real_weights"):
            raw[key] = str(resolve_source(raw[key], base_dir=TINY))
        (tmp_path / "t").mkdir()
        (tmp_path / "t" / "unet_cpu.json").write_text(json.dumps(raw))
        (r,) = check(load_tests([tmp_path / "t"]), CheckOptions(), echo=False).results
        assert r.status == "passed", r.message
        fetched = download_path(raw["outputs"][0]["source"])
        assert fetched.is_file() and f"@{fetched}" in " ".join(r.commands[-1])
        monkeypatch.setenv("RUNNER_OFFLINE", "1")
        raw["outputs"][0]["source"] = server.url("/sharkpublic/tiny/never_uploaded_v9.bin")
        (tmp_path / "t" / "unet_cpu.json").write_text(json.dumps(raw))
        report = check(load_tests([tmp_path / "t"]), CheckOptions(), echo=False)
        assert report.results[0].status == "error" and report.exit_code == 1
        assert "not in the download cache and the runner is offline" in report.results[0].message
    finally:
        server.close()


def test_bad_input_exits_2(capsys):
    assert run_cli("check", "nowhere") == 2
    err = capsys.readouterr().err
    assert "error: nowhere: no such test file or suite directory" in err and "  fix: " in err
    assert run_cli("check", str(TINY), "--backend", "tpu") == 2
    assert "error: --backend: unknown backend 'tpu'" in capsys.readouterr().err

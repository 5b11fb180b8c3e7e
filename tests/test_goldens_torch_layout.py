"""IREE CI's torch_models layout (`type`, `markers`, shared `modules/`): the real SDXL files
rendered, the tiny-torch suite compiled and run for real, markers/-k/env selection, compstat
goldens, generate + bump, --strict and --timeout."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from repo_support import REPO

from runner.base.errors import RunnerError
from runner.cli.main import main
from runner.config.sources import download_path
from runner.goldens.select import Expression, Selection
from runner.goldens.testfile import load_benchmark_file, load_test_file, load_tests

TORCH = REPO / "tests" / "fixtures" / "iree-test-suites" / "torch_models"
SDXL = TORCH / "sdxl"
TINY_TORCH = REPO / "goldens" / "tiny-torch"
STATS_FLAGS = ("--iree-scheduling-dump-statistics-format=json",
               "--iree-scheduling-dump-statistics-file=")


def goldens(*args: str) -> int:
    return main(["goldens", *args])


def blocks(out: str) -> dict[str, list[list[str]]]:
    """`--dry-run` output: test name -> its commands, split like a shell would."""
    found: dict[str, list[list[str]]] = {}
    name = None
    for line in out.splitlines():
        if line.startswith("PLAN  "):
            name = line.split()[1]
            found[name] = []
        elif name and line.startswith(("/", "iree-")):
            found[name].append(shlex.split(line))
    return found


def test_real_files_parse_into_the_one_model():
    clip = load_test_file(SDXL / "clip_quality_cpu.json")[0]
    raw = json.loads((SDXL / "clip_quality_cpu.json").read_text())
    assert (clip.schema, clip.kind, clip.backend, clip.name) == (
        "torch", "quality", "cpu", "sdxl/clip_quality_cpu")
    assert clip.markers == ("quality", "cpu", "local-task")
    (module,) = clip.modules
    module_raw = json.loads((SDXL / "modules" / "clip_cpu.json").read_text())
    assert module.name == "sdxl/modules/clip_cpu" and module.mlir == module_raw["mlir"]
    assert module.compiler_flags == tuple(module_raw["compiler_flags"]) and module.stats
    assert (clip.run_function, clip.device) == ("encode_prompts", "local-task")
    assert clip.threshold_args == ("--expected_f16_threshold=1.0f",)
    assert [r.source for r in clip.inputs] == [i["url"] for i in raw["inputs"]]
    assert [r.source for r in clip.outputs] == [o["url"] for o in raw["expected_outputs"]]
    assert clip.weights[0].source == raw["weights"][0]["url"]
    rocm = load_test_file(SDXL / "vae_quality_gfx942.json")[0]
    assert rocm.backend == "rocm" and rocm.modules[0].chip == "gfx942"
    stat = load_test_file(SDXL / "clip_compstat_gfx942.json")[0]
    assert (stat.kind, stat.golden_dispatch_count, stat.golden_binary_size) == (
        "compstat", 790, 470000)
    assert not stat.runs and not stat.inputs
    bench = load_benchmark_file(SDXL / "clip_benchmark_mi325.json")
    assert bench.module_test is not None and bench.time_statistic == "min"
    assert bench.golden_time_ms == {"*": 7.3} and bench.function == "encode_prompts"
    assert [str(s) for s in bench.inputs] == ["1x64xi64"] * 4
    assert bench.benchmark_flags == ("--benchmark_repetitions=10",
                                     "--benchmark_min_warmup_time=3.0",
                                     "--device_allocator=caching")


def test_dry_run_renders_every_real_quality_and_compstat_file(capsys, monkeypatch):
    """What used to fail: "missing required field mlir", "cannot tell the backend", the
    chip flag twice. Now each module compiles once with its flags and the statistics dump."""
    monkeypatch.setenv("RUNNER_OFFLINE", "1")  # a dry run never needs the network
    assert goldens("check", str(TORCH), "--dry-run") == 0
    found = blocks(capsys.readouterr().out)
    assert sorted(found) == ["sdxl/clip_compstat_cpu", "sdxl/clip_compstat_gfx942",
                             "sdxl/clip_quality_cpu", "sdxl/clip_quality_gfx942",
                             "sdxl/vae_compstat_gfx942", "sdxl/vae_quality_cpu",
                             "sdxl/vae_quality_gfx942"]  # benchmarks: `bench goldens`
    for name, commands in found.items():
        (test,) = load_test_file(TORCH / f"{name}.json")
        compile_cmd = commands[0]
        assert compile_cmd[1] == str(download_path(test.modules[0].mlir))
        for flag in test.modules[0].compiler_flags:
            if not flag.startswith(STATS_FLAGS[1]):
                assert flag in compile_cmd
        chips = [a for a in compile_cmd if a.startswith("--iree-rocm-target=")]
        assert chips == (["--iree-rocm-target=gfx942"] if test.backend == "rocm" else [])
        for flag in STATS_FLAGS:
            assert sum(a.startswith(flag) for a in compile_cmd) == 1, (name, flag)
        if test.kind == "compstat":
            assert len(commands) == 1
            continue
        run = commands[1]  # IREE's runner: the modules first, then weights, tensors, run_args
        assert run[0] == "iree-run-module" and run[1].startswith("--module=")
        assert f"--device={test.device}" in run and f"--function={test.run_function}" in run
        for ref in test.inputs:
            assert f"--input={ref.value}=@{download_path(ref.source)}" in run
        for ref in test.outputs:
            assert f"--expected_output={ref.value}=@{download_path(ref.source)}" in run
        assert f"--parameters=model={download_path(test.weights[0].source)}" in run
    # Quality and compstat tests of one module share its compile (one vmfb, one stats file).
    assert found["sdxl/clip_quality_cpu"][0] == found["sdxl/clip_compstat_cpu"][0]


def test_bench_goldens_renders_the_real_mi325_benchmark(capsys, monkeypatch):
    """It used to fail with a hint about --allow-subset."""
    monkeypatch.setenv("RUNNER_OFFLINE", "1")
    assert main(["bench", "goldens", str(SDXL / "clip_benchmark_mi325.json"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "PLANNED   sdxl/clip_benchmark_mi325 [mi325] encode_prompts" in out
    bench = next(shlex.split(line) for line in out.splitlines()
                 if line.startswith("iree-benchmark-module"))
    assert "--device=hip" in bench and "--function=encode_prompts" in bench
    assert bench.count("--input=1x64xi64") == 4 and "--benchmark_repetitions=10" in bench
    weights = json.loads((SDXL / "clip_benchmark_mi325.json").read_text())["weights"][0]["url"]
    assert f"--parameters=model={download_path(weights)}" in bench
    compile_cmd = next(shlex.split(line) for line in out.splitlines() if "iree-compile" in line)
    assert compile_cmd.count("--iree-rocm-target=gfx942") == 1


def test_bad_input_names_the_file_and_field(tmp_path, capsys):
    assert goldens("check", str(SDXL / "modules" / "clip_gfx942.json"), "--dry-run") == 2
    err = capsys.readouterr().err
    assert "modules/clip_gfx942.json: this is a module definition" in err
    assert "clip_quality_gfx942.json" in err  # a test that uses it, as the fix
    assert goldens("check", str(REPO / "goldens" / "tiny-bench")) == 2
    assert "only benchmark tests here" in capsys.readouterr().err
    suite = tmp_path / "m"
    (suite / "modules").mkdir(parents=True)
    (suite / "modules" / "a_cpu.json").write_text(json.dumps(
        {"mlir": "a.mlir", "compiler_flags": []}))
    cases = [
        ({"type": "quality", "markers": ["cpu"], "modules": ["m/modules/nope"]},
         "module file m/modules/nope.json not found", "modules[0]"),
        ({"type": "quality", "markers": ["cpu"], "modules": []},
         "the test names no module", "modules"),
        ({"type": "compstat", "markers": ["cpu"]}, "the test names no module", "module"),
        ({"type": "speed", "markers": ["cpu"], "modules": ["m/modules/a_cpu"]},
         "unknown test type 'speed'", "type"),
        ({"markers": ["cpu"], "modules": ["m/modules/a_cpu"]}, "missing required field `type`",
         "type"),
        ({"type": "quality", "modules": ["m/modules/a_cpu"]},
         "missing required field `markers`", "markers"),
        ({"type": "quality", "markers": ["cpu"], "modules": ["m/modules/a_cpu"],
          "weights": [{"type": "random", "seed": 1, "scope": "model"}]},
         "a module is named by a string", "weights[0].module"),
        ({"type": "compstat", "markers": ["cpu"], "module": "m/modules/a_cpu",
          "golden_dispatch_count": "many"}, "`golden_dispatch_count` must be a whole number",
         "golden_dispatch_count"),
    ]
    for raw, message, field in cases:
        path = suite / "t.json"
        path.write_text(json.dumps(raw))
        with pytest.raises(RunnerError, match=message) as e:
            load_test_file(path)
        assert f"{path}: {field}" in str(e.value), (raw, str(e.value))


def test_markers_and_keywords_select_like_pytest(monkeypatch):
    expr = Expression("hip and (gfx942 or gfx950) and not compstat", "--marker")
    assert expr.matches({"hip", "gfx942", "quality"}.__contains__)
    assert not expr.matches({"hip", "gfx942", "compstat"}.__contains__)
    assert not expr.matches({"cpu"}.__contains__)
    for bad in ("hip and", "(cpu", "and cpu", "cpu )"):
        with pytest.raises(RunnerError, match="cannot read"):
            Expression(bad, "--marker")

    def names(**kw) -> list[str]:
        flag = {"marker": "--marker", "keyword": "-k"}
        sel = Selection(**{k: (Expression(v, flag[k]) if k in flag else v)
                           for k, v in kw.items()})
        return [t.name.split("/")[1] for t in load_tests([TORCH], sel)]

    assert names(marker="gfx942") == ["clip_compstat_gfx942", "clip_quality_gfx942",
                                      "vae_compstat_gfx942", "vae_quality_gfx942"]
    assert names(marker="quick or compstat") == ["clip_compstat_cpu", "clip_compstat_gfx942",
                                                 "vae_compstat_gfx942"]
    assert names(keyword="clip and not gfx942") == ["clip_compstat_cpu", "clip_quality_cpu"]
    assert names(backend="cpu", marker="quality") == ["clip_quality_cpu", "vae_quality_cpu"]
    # A chip chosen explicitly leaves out files marked for another chip; cpu files stay.
    assert names(rocm_chip="gfx950") == ["clip_compstat_cpu", "clip_quality_cpu",
                                         "vae_quality_cpu"]
    with pytest.raises(RunnerError, match="no test has markers matching 'gfx950'") as e:
        names(marker="gfx950")
    assert "--marker" in str(e.value) and "gfx942, hip, local-task, quality" in str(e.value)
    with pytest.raises(RunnerError, match="no test name matches 'unet'"):
        names(keyword="unet")
    # The older layout's tests carry their kind and backend as markers.
    older = TORCH.parent / "sharktank_models" / "quality_tests"
    rocm = load_tests([older], Selection(marker=Expression("quality and rocm", "--marker")))
    assert len(rocm) == 7 and {t.backend for t in rocm} == {"rocm"}


def test_environment_variables_as_iree_ci_reads_them(capsys, monkeypatch):
    monkeypatch.setenv("RUNNER_OFFLINE", "1")
    monkeypatch.setenv("BACKEND", "rocm")
    monkeypatch.setenv("ROCM_CHIP", "gfx950")
    assert goldens("check", str(TORCH), "--dry-run") == 2  # rocm tests are all gfx942
    assert "no test matches the selection (backend rocm, ROCm chip gfx950)" in \
        capsys.readouterr().err
    monkeypatch.setenv("ROCM_CHIP", "gfx942")
    assert goldens("check", str(TORCH), "--dry-run") == 0
    assert sorted(blocks(capsys.readouterr().out)) == [
        "sdxl/clip_compstat_gfx942", "sdxl/clip_quality_gfx942", "sdxl/vae_compstat_gfx942",
        "sdxl/vae_quality_gfx942"]
    # A flag wins over its variable.
    assert goldens("check", str(TORCH), "--dry-run", "--backend", "cpu", "-k", "vae") == 0
    assert list(blocks(capsys.readouterr().out)) == ["sdxl/vae_quality_cpu"]
    monkeypatch.setenv("BACKEND", "tpu")
    assert goldens("check", str(TORCH), "--dry-run") == 2
    assert "$BACKEND: unknown backend 'tpu'" in capsys.readouterr().err


def tiny_torch_copy(tmp_path: Path) -> Path:
    """goldens/tiny-torch byte for byte elsewhere: it runs as it is (the model is
    `builtin:tiny/...`, the runner's shipped copy)."""
    suite = tmp_path / "goldens" / "tiny-torch"
    shutil.copytree(TINY_TORCH, suite)
    return suite


def test_tiny_torch_suite_passes_on_cpu(tmp_path, capsys):
    assert goldens("check", str(TINY_TORCH), "--out", str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert out.count("PASS ") == 4
    assert "dispatch_count 136, golden 136 (delta +0) ok" in out
    results = json.loads((tmp_path / "results.json").read_text())
    by_name = {r["name"]: r for r in results["results"]}
    stats = {s["name"]: s for s in by_name["tiny-torch/vae_compstat_cpu"]["compile_stats"]}
    assert stats["dispatch_count"]["measured"] == 129 and stats["dispatch_count"]["ok"]
    assert 0 < stats["binary_size"]["measured"] <= stats["binary_size"]["golden"]
    assert stats["binary_size"]["delta"] == (stats["binary_size"]["measured"]
                                             - stats["binary_size"]["golden"])
    # One compile per module: the quality and compstat tests name the same vmfb.
    assert by_name["tiny-torch/clip_quality_cpu"]["commands"][0] == \
        by_name["tiny-torch/clip_compstat_cpu"]["commands"][0]
    summary = (tmp_path / "summary.md").read_text()
    assert "## Compile statistics" in summary and "| tiny-torch/clip_compstat_cpu | PASS | 136 |" \
        in summary
    junit = ET.parse(tmp_path / "junit.xml").getroot()
    assert junit.get("tests") == "4" and junit.get("failures") == "0"


def test_compstat_over_its_golden_fails_and_no_golden_warns(tmp_path, capsys):
    suite = tiny_torch_copy(tmp_path)
    path = suite / "clip_compstat_cpu.json"
    raw = json.loads(path.read_text())
    path.write_text(json.dumps({**raw, "golden_dispatch_count": 135}))
    assert goldens("check", str(path)) == 1
    out = capsys.readouterr().out
    assert "FAIL  tiny-torch/clip_compstat_cpu" in out
    assert "dispatch_count 136, golden 135 (delta +1) OVER" in out
    del raw["golden_dispatch_count"], raw["golden_binary_size"]
    path.write_text(json.dumps(raw))
    assert goldens("check", str(path)) == 0
    out = capsys.readouterr().out
    assert "warning: no golden_dispatch_count or golden_binary_size" in out
    assert goldens("check", str(path), "--strict") == 1
    assert "FAIL " in capsys.readouterr().out


def test_a_test_with_no_outputs_warns_and_fails_under_strict(tmp_path, capsys, monkeypatch):
    """Both layouts: nothing compared is never a silent pass (and GitHub Actions shows it)."""
    summary = tmp_path / "step_summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    suite = tiny_torch_copy(tmp_path)
    path = suite / "clip_quality_cpu.json"
    raw = json.loads(path.read_text())
    path.write_text(json.dumps({k: v for k, v in raw.items() if k != "expected_outputs"}))
    old = tmp_path / "old" / "clip_cpu.json"
    old.parent.mkdir()
    tiny = json.loads((REPO / "goldens" / "tiny" / "clip_cpu.json").read_text())
    for ref in tiny["inputs"]:  # a test file's blobs sit beside it (runner.inputs.paths)
        shutil.copy(REPO / "goldens" / "tiny" / ref["source"], old.parent / ref["source"])
    del tiny["outputs"]  # its model stays `builtin:tiny/...`: the runner's, from anywhere
    old.write_text(json.dumps(tiny))
    for test_file, field in ((path, "expected_outputs"), (old, "outputs")):
        assert goldens("check", str(test_file)) == 0
        out = capsys.readouterr().out
        assert "PASS " in out and f"warning: no {field}: the run was not compared" in out
        assert f"{test_file}: {field}" in out
        assert "::warning title=" in out and "## Warnings" in summary.read_text()
        assert goldens("check", str(test_file), "--strict") == 1
        out = capsys.readouterr().out
        assert f"no {field}: the run was not compared with anything (--strict)" in out
        assert "::error title=" in out


def test_generate_then_bump_changes_only_versioned_names(tmp_path, capsys):
    suite = tiny_torch_copy(tmp_path)
    before = {p.relative_to(suite): p.read_bytes() for p in suite.rglob("*.json")}
    new = tmp_path / "v2"
    assert goldens("generate", str(suite), "--to", "next", "--out", str(new)) == 0
    manifest = json.loads((new / "manifest.json").read_text())
    assert sorted(g["file"] for g in manifest["goldens"]) == [
        "clip_out0_v2.0.bin", "clip_out1_v2.0.bin", "vae_out0_v2.0.bin"]
    for g in manifest["goldens"]:
        assert g["change_vs_old"]["over_threshold"] == 0
    assert goldens("bump", str(suite), "--to", "next") == 0
    assert "clip_out0_v1.0.bin -> clip_out0_v2.0.bin" in capsys.readouterr().out
    for rel, old in before.items():
        now = (suite / rel).read_bytes()
        if rel.name.endswith("_quality_cpu.json"):
            assert now != old
            assert now.replace(b"_v2.0.bin", b"_v1.0.bin") == old  # inputs stay at v1.0
            assert now.count(b"v2.0.bin") == len(json.loads(old)["expected_outputs"])
        else:  # modules, compstat and benchmark files: untouched, byte for byte
            assert now == old, rel
    for g in manifest["goldens"]:
        shutil.copy(new / g["file"], suite / g["file"])
    assert goldens("check", str(suite), "-k", "quality") == 0  # the bumped suite passes


@pytest.mark.slow
def test_timeout_kills_the_compile_and_says_where(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))  # nothing cached
    suite = tiny_torch_copy(tmp_path)
    assert goldens("check", str(suite), "-k", "vae_quality", "--timeout", "2",
                   "--out", str(tmp_path / "out")) == 1
    out, err = capsys.readouterr()
    assert "ERROR tiny-torch/vae_quality_cpu" in out
    assert "this command started" not in err  # nothing left for the CLI to stop (and wait for)
    assert "timed out after 2s (--timeout) while compiling tiny-torch/modules/vae_cpu" in out
    compiles = [p for p in Path("/proc").iterdir() if p.name.isdigit()
                and _cmdline(p).startswith("iree-compile") and str(tmp_path) in _cmdline(p)]
    assert compiles == []  # killed, not left running
    assert not list((tmp_path / "cache").rglob("*.vmfb"))


def _cmdline(proc: Path) -> str:
    try:
        argv = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return ""
    return os.path.basename(argv[0].decode(errors="replace")) + " " + \
        " ".join(a.decode(errors="replace") for a in argv[1:])


@pytest.mark.slow
def test_within_its_timeout_a_test_runs_isolated_and_passes(capsys):
    assert goldens("check", str(TINY_TORCH), "-k", "clip", "--timeout", "120") == 0
    out, err = capsys.readouterr()
    assert out.count("PASS ") == 2 and "output 1 2x64xf32" in out
    # the tests' processes ended with them, the spawn context's resource tracker too: none
    # was left for the CLI's stop of what a command started to wait out its grace for
    assert "this command started" not in err, err


def test_tiny_torch_benchmarks_through_bench_goldens(tmp_path, capsys):
    assert main(["bench", "goldens", str(TINY_TORCH), "--sku", "cpu", "--repetitions", "3",
                 "--warmup", "0", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "bench.json").read_text())
    by_name = {g["name"]: g for g in report["goldens"]}
    assert sorted(by_name) == ["tiny-torch/clip_benchmark_cpu", "tiny-torch/vae_benchmark_cpu"]
    for g in by_name.values():
        (check,) = g["checks"]
        assert check["name"] == "time_ms" and check["ok"]
        # IREE CI's torch_models rule: the fastest repetition against the golden x
        # tolerance_factor (1.1 when the file gives none).
        assert check["limit"] == pytest.approx(check["golden"] * 1.1)
        assert round(check["measured"], 6) == g["latency_ms"]["min_ms"]
        assert "fastest repetition" in check["note"] and g["latency_ms"]["repetitions"] == 3
    assert by_name["tiny-torch/clip_benchmark_cpu"]["dispatch_count"] == 136


def test_bump_a_real_file_renames_only_its_expected_outputs(tmp_path, capsys):
    src = SDXL / "vae_quality_gfx942.json"
    assert goldens("bump", str(src), "--to", "v1", "--out", str(tmp_path)) == 0
    assert "inference_output.0.bin has no version in its name" in capsys.readouterr().out
    old, new = src.read_text(), (tmp_path / src.name).read_text()
    url = json.loads(old)["expected_outputs"][0]["url"]
    assert new == old.replace(url, url.replace("inference_output.0.bin",
                                               "inference_output.0_v1.bin"))
    assert new.count("_v1.bin") == 1  # the input of the same family is untouched

"""Benchmark goldens in IREE CI's schema: the tiny suite measured for real, verdicts, and
every real SDXL benchmark fixture rendered by a dry run."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest
from repo_support import REPO

import runner
from runner.base.fileio import sha256_file
from runner.bench import benchmark_module as bm
from runner.bench.goldens import (
    DEFAULT_BENCH_SUITE,
    GoldenOptions,
    GoldenResult,
    _verdicts,
    load_benchmarks,
)
from runner.cli.main import main
from runner.goldens.testfile import load_benchmark_file
from runner.history.extract import extract

FIXTURES = (REPO / "tests" / "fixtures" / "iree-test-suites" / "sharktank_models"
            / "benchmarks" / "sdxl")


@pytest.mark.slow
def test_shipped_tiny_goldens_pass_and_report_everything(tmp_path, capsys):
    assert main(["bench", "goldens", "--sku", "cpu", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "bench.json").read_text())
    by_name = {g["name"]: g for g in report["goldens"]}
    assert sorted(by_name) == ["tiny-bench/clip_cpu", "tiny-bench/unet_cpu",
                               "tiny-bench/vae_cpu"]
    for g in by_name.values():
        assert g["status"] == "passed", g
        checks = {c["name"]: c for c in g["checks"]}
        assert set(checks) == {"time_ms", "dispatch_count", "size_bytes"}
        assert all(c["ok"] for c in checks.values())
        assert 0 < checks["time_ms"]["measured"] <= checks["time_ms"]["limit"]
        assert g["latency_ms"]["repetitions"] == 5  # the file's own --benchmark_repetitions
        raw = tmp_path / "goldens" / "tiny-bench" / f"{g['name'].split('/')[1]}.json"
        # bench.json keeps 6 decimals of a millisecond: exactly the raw mean, rounded.
        assert round(bm.parse_benchmark_json(raw.read_text()).mean_ms, 6) == \
            g["latency_ms"]["mean_ms"]
    # The dispatch goldens are the exact counts this compiler produces.
    assert by_name["tiny-bench/clip_cpu"]["dispatch_count"] == 136
    md = (tmp_path / "bench.md").read_text()
    assert md.count("| tiny-bench/") == 3 and "PASSED" in md
    # what the results store keeps: each golden's number, its golden and band, its verdict
    (kept,) = extract(tmp_path)
    assert (kept.command, kept.sku, kept.verdict) == ("bench goldens", "cpu", "pass")
    for m in kept.metrics:
        check = next(c for c in by_name[m.subject]["checks"] if c["name"] == m.name)
        assert (m.value, m.golden, m.high, m.verdict) == (
            check["measured"], check["golden"], check["limit"], "pass")
    assert len(kept.metrics) == 9
    # and the main module each golden timed (the first its benchmark command loads), by hash
    assert kept.environment is not None
    timed = {name: next(w.split("=", 1)[1] for w in shlex.split(g["commands"][-1])
                        if w.startswith("--module=")) for name, g in by_name.items()}
    assert kept.environment.modules == {name: sha256_file(Path(vmfb))
                                        for name, vmfb in timed.items()}


def test_a_golden_fails_when_measured_exceeds_it(tmp_path, capsys):
    raw = json.loads((DEFAULT_BENCH_SUITE / "clip_cpu.json").read_text())
    del raw["quality_test"]  # given on the command line: a test file names no path outside
    raw["golden_time_ms"] = {"cpu": 0.0001}
    raw["golden_dispatch"] = {"cpu": 100}  # fewer than the compile really makes
    raw["golden_size"] = {"cpu": 1000}
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "clip_cpu.json").write_text(json.dumps(raw))
    code = main(["bench", "goldens", str(suite), "--sku", "cpu", "--repetitions", "2",
                 "--min-time", "0.02s", "--quality-dir", str(REPO / "goldens" / "tiny"),
                 "--warmup", "0", "--out", str(tmp_path / "out")])
    assert code == 1
    bench = json.loads((tmp_path / "out" / "bench.json").read_text())
    (g,) = bench["goldens"]
    assert g["status"] == "failed"
    # the time is a distribution (each repetition, their median and its interval), taken
    # under conditions that are kept with it; the record says which runner and profile
    latency = g["latency_ms"]
    assert len(latency["times_ms"]) == latency["repetitions"] == 2
    assert latency["spread"]["low"] == min(latency["times_ms"])
    assert latency["spread"]["high"] == max(latency["times_ms"])
    assert g["conditions"]["cores"] == os.cpu_count()
    assert g["conditions"]["kernel"] == os.uname().release
    assert isinstance(g["conditions"]["beside_foreign_load"], bool)
    assert bench["profile"] == "cpu" and bench["runner"]["version"] == runner.__version__
    (kept,) = extract(tmp_path / "out")
    assert (kept.profile, kept.runner_version) == ("cpu", runner.__version__)
    assert kept.details["spread"]["suite/clip_cpu"] == latency["spread"]
    assert kept.details["conditions"]["suite/clip_cpu"] == g["conditions"]
    assert "Repetitions and conditions:" in (tmp_path / "out" / "bench.md").read_text()
    checks = {c["name"]: c for c in g["checks"]}
    assert checks["time_ms"]["limit"] == pytest.approx(0.0001 * 1.1)
    assert checks["time_ms"]["ok"] is False and checks["time_ms"]["measured"] > 0.00011
    assert checks["dispatch_count"] == {**checks["dispatch_count"], "measured": 136,
                                        "golden": 100, "ok": False}
    assert checks["size_bytes"]["ok"] is False and checks["size_bytes"]["measured"] > 1000
    assert "dispatch_count 136 > golden 100" in g["message"]
    assert "time_ms" in g["message"] and "size_bytes" in g["message"]
    out = capsys.readouterr().out
    assert "FAILED    suite/clip_cpu [cpu] encode_prompts" in out
    # The same file passes with the goldens it was measured against, and a dispatch count
    # below its golden is reported, not failed.
    raw.update(golden_time_ms={"cpu": 1000.0}, golden_dispatch={"cpu": 140},
               golden_size={"cpu": 10_000_000})
    (suite / "clip_cpu.json").write_text(json.dumps(raw))
    assert main(["bench", "goldens", str(suite), "--sku", "cpu", "--repetitions", "2", "--min-time",
                 "0.02s", "--warmup", "0", "--quality-dir", str(REPO / "goldens" / "tiny")]) == 0
    assert "4 fewer dispatches than the golden" in capsys.readouterr().out


def test_time_verdict_is_measured_le_golden_times_tolerance():
    bench = load_benchmark_file(DEFAULT_BENCH_SUITE / "unet_cpu.json")
    golden = bench.golden_time_ms["cpu"]
    tol = bench.golden_time_tolerance_multiplier["cpu"]
    for measured, ok in ((golden * tol * 0.999, True), (golden * tol, True),
                         (golden * tol * 1.001, False)):
        r = GoldenResult("t", "f", "cpu", "run_forward",
                         latency=bm.Latency(measured, measured, 0.0, measured, 5, 10))
        _verdicts(bench, r)
        assert r.check("time_ms").ok is ok, measured
    r = GoldenResult("t", "f", "mi300", "run_forward")  # no goldens for this sku
    _verdicts(bench, r)
    assert r.checks == []


def test_every_real_sdxl_benchmark_fixture_renders_with_dry_run(capsys):
    files = sorted(FIXTURES.glob("*.json"))
    assert len(files) == 7
    assert main(["bench", "goldens", str(FIXTURES), "--sku", "mi300", "--dry-run"]) == 0
    out = capsys.readouterr().out
    blocks = {}
    for line in out.splitlines():
        if line.startswith("PLANNED") or line.startswith("SKIPPED"):
            name = line.split()[1]
            blocks[name] = []
        else:
            blocks[name].append(line.strip())
    assert sorted(blocks) == sorted(f"sdxl/{p.stem}" for p in files)
    for path in files:
        bench = load_benchmark_file(path)
        lines = blocks[f"sdxl/{path.stem}"]
        runs = [x for x in lines if x.startswith("iree-benchmark-module")]
        compiles = [x for x in lines if "iree-compile" in x.split()[0]]
        assert len(runs) == 1 and compiles, path.name
        run = runs[0]
        assert f"--function={bench.function}" in run and f"--device={bench.device}" in run
        assert all(f"--input={s}" in run for s in bench.inputs)
        assert "--benchmark_format=json" in run and "--benchmark_repetitions=10" in run
        if bench.golden_dispatch:  # a stream-phase compile dumps the count's statistics
            assert any("--iree-scheduling-dump-statistics-format=json" in x
                       and "--compile-to=stream" in x for x in compiles), path.name
    e2e = blocks["sdxl/e2e_rocm"]
    e2e_run = next(x for x in e2e if x.startswith("iree-benchmark-module"))
    assert e2e_run.count("--module=") == 4 and e2e_run.count("--parameters=model=") == 3
    assert any("sdxl_pipeline_bench_f16.mlir" in x for x in e2e)
    unet = next(x for x in blocks["sdxl/unet_fp16_rocm"] if x.startswith("iree-bench"))
    assert unet.count("--module=") == 1  # run_forward lives in the main module
    # IREE CI skips the punet files on gfx90a.
    assert main(["bench", "goldens", str(FIXTURES), "--sku", "mi250", "--rocm-chip",
                 "gfx90a", "--dry-run"]) == 0
    skipped = [x for x in capsys.readouterr().out.splitlines() if x.startswith("SKIPPED")]
    assert sorted(x.split()[1] for x in skipped) == ["sdxl/punet_int8_fp16_rocm",
                                                     "sdxl/punet_int8_fp8_rocm"]


def test_benchmark_file_without_a_quality_test_is_an_error(tmp_path):
    shutil.copy(DEFAULT_BENCH_SUITE / "vae_cpu.json", tmp_path / "vae_cpu.json")
    (bench,) = load_benchmarks([tmp_path])
    from runner.bench.goldens import check_benchmark

    r = check_benchmark(bench, GoldenOptions(dry_run=True))
    assert r.status == "error" and "no quality test vae_cpu.json" in r.message
    r = check_benchmark(bench, GoldenOptions(dry_run=True,
                                             quality_dir=REPO / "goldens" / "tiny"))
    assert r.status == "planned" and r.commands[-1].startswith("iree-benchmark-module")

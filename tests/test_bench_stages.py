"""iree-benchmark-module on the tiny model: its real JSON read back, modules picked per function."""

from __future__ import annotations

import json

import pytest

from runner.base.errors import RunnerError
from runner.bench import benchmark_module as bm


def _vae_command(compiled, repetitions: int) -> bm.BenchCommand:
    vae = next(m for m in compiled.modules if m.name == "vae")
    return bm.command(device="local-task", modules=vae.vmfbs, function="decode",
                      inputs=["1x4x16x16xf32"], parameters=[vae.weights],
                      flags=bm.with_overrides([], repetitions, "0.02s"))


def test_latency_is_the_mean_real_time_of_real_output(tiny_compiled, tmp_path):
    raw = tmp_path / "vae.json"
    latency = bm.run_benchmark(_vae_command(tiny_compiled[1], 3), raw)
    rows = json.loads(raw.read_text())["benchmarks"]
    runs = [r for r in rows if r["run_type"] == "iteration"]
    mean = next(r for r in rows if r.get("aggregate_name") == "mean")
    assert len(runs) == latency.repetitions == 3
    assert mean["time_unit"] == "ms" and latency.mean_ms == pytest.approx(mean["real_time"])
    assert latency.mean_ms == pytest.approx(sum(r["real_time"] for r in runs) / 3)
    assert latency.min_ms == pytest.approx(min(r["real_time"] for r in runs))
    assert latency.iterations == runs[0]["iterations"] >= 1
    # Another unit reads the same: Google Benchmark's own conversion, back in ms.
    in_us = raw.read_text().replace('"time_unit": "ms"', '"time_unit": "us"')
    assert bm.parse_benchmark_json(in_us).mean_ms == pytest.approx(latency.mean_ms / 1000)


def test_one_repetition_has_no_aggregates_and_still_parses(tiny_compiled, tmp_path):
    raw = tmp_path / "one.json"
    latency = bm.run_benchmark(_vae_command(tiny_compiled[1], 1), raw)
    rows = json.loads(raw.read_text())["benchmarks"]
    assert [r["run_type"] for r in rows] == ["iteration"]
    assert latency.repetitions == 1 and latency.mean_ms == pytest.approx(rows[0]["real_time"])
    assert latency.stddev_ms == 0.0 and latency.mean_ms > 0


def test_bad_output_and_failing_tool_are_runner_errors(tiny_compiled):
    with pytest.raises(RunnerError, match="not Google Benchmark JSON"):
        bm.parse_benchmark_json("Run on (2 X 2445 MHz CPU s)")
    with pytest.raises(RunnerError, match="no benchmark runs"):
        bm.parse_benchmark_json('{"benchmarks": []}')
    vae = next(m for m in tiny_compiled[1].modules if m.name == "vae")
    wrong = bm.command(device="local-task", modules=vae.vmfbs, function="no_such_fn",
                       inputs=["1x4x16x16xf32"], parameters=[vae.weights])
    with pytest.raises(RunnerError, match="iree-benchmark-module failed") as e:
        bm.run_benchmark(wrong)
    assert "reproduce with: iree-benchmark-module --device=local-task" in str(e.value)


def test_modules_up_to_the_one_exporting_the_function(tiny_compiled):
    """The tool looks the function up in the last --module only."""
    unet = next(m for m in tiny_compiled[1].modules if m.name == "unet")
    main, pipeline = unet.vmfbs
    assert bm.modules_for(unet.vmfbs, "run_forward", "w") == (main,)
    assert bm.modules_for(unet.vmfbs, "produce_image_latents", "w") == (main, pipeline)
    with pytest.raises(RunnerError, match="no module exports 'decode'"):
        bm.modules_for(unet.vmfbs, "decode", "w")


def test_overrides_replace_the_files_own_flags():
    flags = ["--benchmark_repetitions=10", "--benchmark_min_warmup_time=3.0",
             "--device_allocator=caching"]
    assert bm.with_overrides(flags) == flags
    assert bm.with_overrides(flags, 2, "0.1s", 0.5) == [
        "--device_allocator=caching", "--benchmark_repetitions=2",
        "--benchmark_min_time=0.1s", "--benchmark_min_warmup_time=0.5"]

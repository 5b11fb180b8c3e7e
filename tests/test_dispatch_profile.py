"""`runner bench --dispatches`: each stage's dispatches profiled by IREE's own HAL profiler
on the tiny model, read back and checked against `iree-profile`'s own aggregation of the
same capture; the Perfetto trace's structure; the GPU mode up to the device (a dry run);
a runtime without the profiler (IREE 3.11's real binary) gets a note."""

from __future__ import annotations

import itertools
import json
import shlex
import statistics
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from repo_support import REPO

from runner.base.iree_tools import tool_path
from runner.base.paths import cache_dir
from runner.bench import benchmark_module as bm
from runner.bench import capability, ireeperf
from runner.bench import dispatch_names as names
from runner.bench import dispatch_profile as dp
from runner.bench.dispatch_diff import compare_profiles, compare_stages
from runner.cli.main import main

SPEC = REPO / "goldens" / "tiny-bench" / "tiny_bmm_spec_cpu.mlir"
HOSTILE = "out $(touch pwned) 'q\" dir"  # a user's --out reaches commands and files
CALLS = 5  # tests/conftest.py's tiny_dispatch_bench (its bench.json says so, checked)


def validate_trace(path: Path) -> list[dict]:
    """What ui.perfetto.dev's JSON importer needs: a traceEvents list of complete ("X")
    and metadata ("M") events, ts/dur in microseconds, every thread named, and on each
    thread events that nest or stand apart (never partly overlap). Returns the X events."""
    trace = json.loads(path.read_text())
    assert set(trace) >= {"traceEvents"} and trace["displayTimeUnit"] == "ns"
    events = trace["traceEvents"]
    assert {e["ph"] for e in events} == {"X", "M"}
    spans = [e for e in events if e["ph"] == "X"]
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M"
             and e["name"] == "thread_name"}
    processes = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    by_thread: dict[tuple[int, int], list[dict]] = {}
    for e in spans:
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert e["ts"] >= 0 and e["dur"] >= 0 and isinstance(e["args"], dict)
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    assert set(by_thread) == named and {pid for pid, _ in named} == processes
    for thread in by_thread.values():
        thread.sort(key=lambda e: e["ts"])
        for a, b in itertools.pairwise(thread):
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-6  # lanes: no overlap on a thread
    return spans


def iree_profile(profile: Path, *flags: str) -> list[dict]:
    out = subprocess.run([tool_path("iree-profile"), "dispatch", "--format=jsonl", *flags,
                          str(profile)], capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def iree_profile_groups(profile: Path) -> dict[str, dict]:
    """IREE's own per-function aggregation of a capture (the reference), with each
    function's median from IREE's per-event rows, and its time at medians: each of its
    workgroup counts' median times that count's events, summed."""
    groups = {r["key"]: r for r in iree_profile(profile)
              if r["type"] in ("host_dispatch_group", "dispatch_group")}
    events: dict[str, list[int]] = {}
    sizes: dict[str, dict[str, list[int]]] = {}
    for r in iree_profile(profile, "--dispatch_events"):
        if r["type"] in ("host_dispatch_event", "dispatch_event"):
            events.setdefault(r["key"], []).append(r["duration_ns"])
            sizes.setdefault(r["key"], {}).setdefault(
                str(r["workgroup_count"]), []).append(r["duration_ns"])
    for key, ns in events.items():
        groups[key]["median_ns"] = statistics.median(ns)
        groups[key]["at_medians_ns"] = sum(statistics.median(d) * len(d)
                                           for d in sizes[key].values())
    return groups


@pytest.fixture(scope="module")
def profiled(tiny_dispatch_bench) -> Path:
    """The session's real `runner bench --dispatches` of three stages (tests/conftest.py),
    in a hostile --out."""
    return tiny_dispatch_bench


def test_names_give_kinds_and_keys_that_outlive_renumbering():
    assert names.kind("run_forward$async_dispatch_60_matmul_128x512x64_f32") == "matmul"
    assert names.kind("main$async_dispatch_12_matmul_like_196x64x192_f16xf16xf32") == "matmul"
    assert names.kind("decode$async_dispatch_63_conv_32x32x32x32x3x3_f32") == "conv"
    assert names.kind("x_dispatch_1_conv_2d_nhwc_hwcf_1x32x32x16_f32") == "conv"
    assert names.kind("run_forward$async_dispatch_49_attention_2x4x64x16x16x64") == \
        "attention"
    assert names.kind("run_forward$async_dispatch_187_reduction_16x3072_f32") == "reduction"
    assert names.kind("x_dispatch_3_softmax_8x64xf32") == "reduction"
    assert names.kind("x_dispatch_2_elementwise_broadcast_2x16_i64xf32") == "elementwise"
    assert names.kind("x_dispatch_2_elementwise_transpose_2x64x64_f32") == "elementwise"
    assert names.kind("x_dispatch_4_transpose_64x64_f32") == "data_movement"
    assert names.kind("run_forward$async_dispatch_3_slow_memcpy") == "data_movement"
    assert names.kind("x_dispatch_5_unpack_matmul_like_8x8x8_f32") == "matmul"
    assert names.kind("x_dispatch_5_unpack_f32") == "data_movement"
    assert names.kind("x_dispatch_6_matmulfoo") == "other"  # a word, not a prefix
    assert names.kind("main$async_dispatch_3") == "other"  # no summary
    assert names.kind("hand_written_conv2d") == "other"  # outside IREE's pattern
    assert names.key("run_forward$async_dispatch_60_matmul_128x512x64_f32") == \
        "run_forward$async_dispatch_*_matmul_128x512x64_f32"
    assert names.key("main$async_dispatch_3") == "main$async_dispatch_*"
    assert names.key("hand_written_conv2d") == "hand_written_conv2d"
    assert set(names.DISPATCH_KINDS) == {k for k, _ in names.KIND_RULES} | {"other"}


@pytest.mark.slow  # the shared dispatch bench, or a bench of its own: a minute or more
def test_profile_matches_iree_profiles_own_aggregation(profiled):
    report = json.loads((profiled / "bench.json").read_text())
    assert report["exit_code"] == 0 and report["settings"]["dispatch_calls"] == CALLS
    for stage in report["stages"]:
        p = stage["dispatch_profile"]
        assert p["status"] == "ok" and p["mode"] == dp.HOST_MODE and p["calls"] == CALLS
        assert p["timing_source"] == ireeperf.HOST_EVENT
        assert f"--benchmark_min_time={CALLS}x" in p["command"]
        assert f"--device_profiling_mode={dp.HOST_MODE}" in p["command"]
        assert f"--device_profiling_flush_interval_ms={dp.FLUSH_MS}" in p["command"]
        reference = iree_profile_groups(Path(p["files"]["profile"]))
        rows = {r["name"]: r for r in p["dispatches"]}
        assert rows.keys() == reference.keys() and p["functions"] == len(rows)
        for name, r in rows.items():
            ref = reference[name]
            assert r["count"] == ref["count"]
            assert r["ms_per_call"] == pytest.approx(ref["total_ns"] / 1e6 / CALLS, abs=1e-6)
            assert r["min_ms"] == pytest.approx(ref["min_ns"] / 1e6, abs=1e-6)
            assert r["max_ms"] == pytest.approx(ref["max_ns"] / 1e6, abs=1e-6)
            assert r["stddev_ms"] == pytest.approx(ref["stddev_ns"] / 1e6, abs=1e-5)
            assert r["median_ms"] == pytest.approx(ref["median_ns"] / 1e6, abs=1e-6)
            assert r["median_ms_per_call"] == pytest.approx(
                ref["at_medians_ns"] / 1e6 / CALLS, abs=1e-5)
            assert r["kind"] == names.kind(name) and r["key"] == names.key(name)
        total = sum(ref["count"] for ref in reference.values())
        assert p["dispatches_per_call"] == total / CALLS == int(total / CALLS)
        c = p["per_call_ms"]
        assert c["dispatch_sum"] == pytest.approx(
            sum(r["total_ns"] for r in reference.values()) / 1e6 / CALLS, abs=1e-5)
        assert c["dispatch_busy"] <= c["dispatch_sum"] + 1e-6
        assert c["dispatch_busy"] <= c["command_buffers"] + 1e-6 <= c["wall"] + 2e-6
        assert c["not_in_dispatches"] == pytest.approx(
            c["in_command_buffers_outside_dispatches"] + c["outside_command_buffers"],
            abs=1e-5)
        assert sum(k["share"] for k in p["kinds"]) == pytest.approx(1, abs=1e-4)
        assert sum(k["ms_per_call"] for k in p["kinds"]) == pytest.approx(c["dispatch_sum"],
                                                                          abs=1e-4)
        assert sum(k["median_ms_per_call"] for k in p["kinds"]) == pytest.approx(
            c["dispatch_median_sum"], abs=1e-4)
        assert p["unprofiled_ms"] == stage["latency_ms"]["mean_ms"]
        assert p["profiling_overhead"] == pytest.approx(c["wall"] / p["unprofiled_ms"], 1e-3)
        assert {q["op"] for q in p["queue_operations"]} >= {"alloca", "dealloca"}
        # Self-explanatory: every field a profile has is defined in bench.json.
        assert set(p) <= set(report["dispatch_profile_fields"])
        spans = validate_trace(Path(p["files"]["trace"]))
        dispatch_spans = [e for e in spans if e["cat"] == "dispatch"]
        assert len(dispatch_spans) == total
        assert sum(e["dur"] for e in dispatch_spans) / 1e3 / CALLS == \
            pytest.approx(c["dispatch_sum"], abs=1e-3)
        assert {e["args"]["kind"] for e in dispatch_spans} == {k["kind"] for k in p["kinds"]}
    md = (profiled / "bench.md").read_text()
    assert "## Dispatch profile (IREE HAL profiler)" in md
    assert "### unet_step (batch 1)" in md and "dispatch time by kind" in md
    assert "### clip (batch 1)" in md
    top = report["stages"][0]["dispatch_profile"]["dispatches"][0]["name"]
    assert f"`{top}`" in md


@pytest.mark.slow  # the shared dispatch bench, or a bench of its own: a minute or more
def test_gpu_capture_reads_like_the_cpu_one(profiled):
    """Device-tick dispatch events (the GPU producer's rows) placed by clock correlation:
    the CPU capture re-stamped in ticks of a 2 GHz clock decodes to the same dispatches."""
    profile = profiled / "stages" / "bs1" / "vae" / dp.PROFILE_FILE
    out = subprocess.run([tool_path("iree-profile"), *ireeperf.export_argv(profile)[1:]],
                         capture_output=True, text=True, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    host = ireeperf.decode(rows)
    origin = min(s.start_ns for s in host.spans)
    device_rows = []
    for r in rows:
        if r["record_type"] == ireeperf.HOST_EVENT and r["op"] == "dispatch":
            device_rows.append({
                "record_type": ireeperf.DEVICE_EVENT, "physical_device_ordinal": 0, "valid": True,
                "queue_ordinal": 0, "key": r["key"], "event_id": r["event_id"],
                "workgroup_count": r["workgroup_count"],
                "start_tick": 2 * (r["start_host_time_ns"] - origin) + 1000,
                "end_tick": 2 * (r["end_host_time_ns"] - origin) + 1000})
        elif r["record_type"] != ireeperf.HOST_EVENT:
            device_rows.append(r)
    for tick in (1000, 10**12):  # correlation samples bracketing the capture
        host_ns = origin + (tick - 1000) // 2
        device_rows.append({"record_type": "clock_correlation", "physical_device_ordinal": 0,
                            "device_tick": tick, "host_time_begin_ns": host_ns - 5,
                            "host_time_end_ns": host_ns + 5})
    device = ireeperf.decode(device_rows)
    assert device.timing_source == ireeperf.DEVICE_EVENT and device.unplaced == 0
    assert [(s.name, s.start_ns, s.end_ns) for s in device.dispatches()] == \
        [(s.name, s.start_ns, s.end_ns) for s in host.dispatches()]
    a = dp.summarize_profile(host, CALLS, 10.0)
    b = dp.summarize_profile(device, CALLS, 10.0)
    assert a["dispatches"] == b["dispatches"] and a["kinds"] == b["kinds"]
    assert b["per_call_ms"]["command_buffers"] is None  # dispatch-events only: no executes
    # Without a clock, device events cannot be placed: counted, never guessed.
    unclocked = ireeperf.decode(r for r in device_rows if r["record_type"] !=
                                "clock_correlation")
    assert unclocked.dispatches() == [] and unclocked.unplaced == len(host.dispatches())


def test_gpu_mode_up_to_the_device_is_the_exact_dry_run(tmp_path, capsys):
    out = tmp_path / HOSTILE
    assert main(["bench", "--profile", "tiny", "--set", "target.backend=cuda", "--set",
                 "target.chip=sm_80", "--no-throughput", "--stage", "unet_step",
                 "--dispatches", "2", "--out", str(out), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    runs = [shlex.split(x) for x in lines if "iree-benchmark-module" in x]
    assert len(runs) == 3
    timed, profiled, recorded = runs
    replay = out / "stages" / "bs1" / "unet_step" / "replay" / "dispatches.ireereplay"
    assert recorded[-2:] == [f"--device_replay_output={replay}",
                             "--device_replay_file_policy=reference"]
    assert "--benchmark_min_time=1x" in recorded and "--device=cuda" in recorded
    assert "--device=cuda" in profiled and timed[:timed.index("--benchmark_format=json")] == \
        profiled[:profiled.index("--benchmark_format=json")]
    stage_dir = out / "stages" / "bs1" / "unet_step"
    assert profiled[-5:] == ["--benchmark_repetitions=1", "--benchmark_min_time=2x",
                             "--benchmark_min_warmup_time=0.0",
                             f"--device_profiling_mode={dp.DEVICE_MODE}",
                             f"--device_profiling_output={stage_dir / dp.PROFILE_FILE}"]
    export = lines[lines.index(shlex.join(profiled)) + 1]
    assert shlex.split(export) == ireeperf.export_argv(stage_dir / dp.PROFILE_FILE)
    assert not out.exists()
    assert dp.mode_for("local-sync") == dp.HOST_MODE
    assert dp.mode_for("hip://0") == dp.mode_for("amdgpu") == dp.DEVICE_MODE


def test_dispatches_need_the_stage_benchmarks(capsys):
    assert main(["bench", "--profile", "tiny", "--no-throughput", "--no-stages",
                 "--dispatches", "--dry-run"]) == 2
    assert "--dispatches profiles the stage benchmarks" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["bench", "--profile", "tiny", "--dispatches", "0", "--dry-run"])
    assert e.value.code == 2
    assert "--dispatches: '0' is not a whole number from 1" in capsys.readouterr().err


@pytest.fixture(scope="module")
def runtime_3_11(tmp_path_factory) -> Path:
    """IREE 3.11.0's real iree-benchmark-module (no HAL profiler), from its wheel."""
    wheels = cache_dir() / "test-wheels" / "3.11.0"
    found = sorted(wheels.glob("iree_base_runtime-3.11.0-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d",
                        str(wheels), "iree-base-runtime==3.11.0"], check=True, timeout=900)
        found = sorted(wheels.glob("iree_base_runtime-3.11.0-*.whl"))
    tools = tmp_path_factory.mktemp("iree-3.11")
    with zipfile.ZipFile(found[0]) as z:
        data = z.read("iree/_runtime_libs/iree-benchmark-module")
    tool = tools / "iree-benchmark-module"
    tool.write_bytes(data)
    tool.chmod(0o755)
    return tools


def test_a_runtime_without_the_profiler_says_so_in_its_own_words(runtime_3_11, tmp_path,
                                                                  monkeypatch, capsys):
    """IREE 3.11's real iree-benchmark-module is asked to profile, fails, and its last
    status line is the note (status unavailable, not error); the answer is kept for the driver, so a
    second stage starts nothing."""
    monkeypatch.setenv("IREE_TOOL_PATH", str(runtime_3_11))
    capability.forget()
    assert dp.unavailable() is None  # iree-profile is found (the 3.13 package's)
    plan = dp.plan_profile(bm.command(device="local-task", modules=["m.vmfb"], function="f",
                                      inputs=[]), tmp_path / "stage", 2, "local-task")
    got = dp.capture(plan, "f")
    assert got["status"] == "unavailable" and got["mode"] == dp.HOST_MODE
    note = got["note"]
    own = subprocess.run([str(runtime_3_11 / bm.TOOL), *plan.command.argv[1:]],
                         capture_output=True, text=True, check=False)
    assert own.returncode != 0
    assert note == (f"unavailable on local-task with the IREE tools in {runtime_3_11}: "
                    f"{capability.reason_of(own.stderr or own.stdout)}")  # its own words
    again = dp.plan_profile(plan.command, tmp_path / "second", 2, "local-task")
    assert dp.capture(again, "f")["note"] == note and not (tmp_path / "second").exists()
    capability.forget()
    assert main(["bench", "--profile", "tiny", "--no-throughput", "--stage", "vae",
                 "--dispatches", "--dry-run"]) == 0
    assert "# no dispatch profile" not in capsys.readouterr().out


def _profile(rows: list[tuple[str, float, int, float]], calls: int = 2) -> dict:
    """A stage profile as dispatch_profile writes it, from (name, ms/call, count, stddev);
    each dispatch's median 90% of its mean (a right-skewed spread)."""
    dispatches = [{"name": n, "key": names.key(n), "kind": names.kind(n), "count": c,
                   "ms_per_call": ms, "median_ms_per_call": 0.9 * ms, "stddev_ms": sd}
                  for n, ms, c, sd in rows]
    total = sum(ms for _, ms, _, _ in rows)
    for d in dispatches:
        d["share"] = d["ms_per_call"] / total
    return {"status": "ok", "calls": calls, "functions": len(rows), "dispatches": dispatches,
            "kinds": dp.kinds(dispatches, calls),
            "per_call_ms": {"dispatch_sum": total, "dispatch_median_sum": 0.9 * total,
                            "wall": total + 1}}


def test_builds_are_matched_by_key_and_added_or_removed_dispatches_named():
    before = _profile([("f_dispatch_3_conv_8x8_f32", 4.0, 4, 0.01),
                       ("f_dispatch_9_conv_8x8_f32", 2.0, 2, 0.01),  # same key: summed
                       ("f_dispatch_4_matmul_4x4_f32", 1.0, 2, 0.5),
                       ("f_dispatch_5_slow_memcpy", 0.5, 2, 0.0)])
    after = _profile([("f_dispatch_2_conv_8x8_f32", 3.0, 2, 0.01),  # renumbered, fused
                      ("f_dispatch_3_matmul_4x4_f32", 1.2, 2, 0.5),
                      ("f_dispatch_4_elementwise_4x4_f32", 0.25, 2, 0.0)])
    change = compare_profiles(before, after)
    moved = {r["key"]: r for r in change["moved"]}
    conv = moved["f_dispatch_*_conv_8x8_f32"]
    assert conv["before_ms"] == 6.0 and conv["after_ms"] == 3.0 and conv["change_pct"] == -50
    assert conv["functions"] == [2, 1] and conv["beyond_noise"]
    assert conv["median_before_ms"] == pytest.approx(5.4) and conv["median_change_pct"] == -50
    mm = moved["f_dispatch_*_matmul_4x4_f32"]  # 0.2 ms against a stddev of 0.5 ms
    assert mm["change_ms"] == pytest.approx(0.2) and not mm["beyond_noise"]
    assert [r["key"] for r in change["moved"]] == [conv["key"], mm["key"]]  # by |change|
    assert [r["key"] for r in change["added"]] == ["f_dispatch_*_elementwise_4x4_f32"]
    assert [r["key"] for r in change["removed"]] == ["f_dispatch_*_slow_memcpy"]
    kinds = {k["kind"]: k for k in change["kinds"]}
    assert kinds["conv"]["change_ms"] == -3.0 and kinds["elementwise"]["before_ms"] == 0.0
    assert change["dispatch_ms"]["change_ms"] == pytest.approx(-3.05)
    notes = compare_stages({"unet": before, "vae": before},
                           {"unet": after, "vae": {"status": "unavailable", "note": "old"}})
    assert notes["vae"] == {"note": "no dispatch profile after: old"}
    assert notes["unet"] == change


@pytest.mark.slow  # the shared dispatch bench, or a bench of its own: a minute or more
def test_ab_arms_show_which_dispatches_the_spec_moved(tmp_path):
    out = tmp_path / "ab"
    assert main(["bench", "--profile", "tiny", "--no-throughput", "--stage", "clip",
                 "--repetitions", "1", "--min-time", "2x", "--ab-tuning-spec", str(SPEC),
                 "--dispatches", "2", "--out", str(out)]) == 0
    ab = json.loads((out / "bench.json").read_text())["ab_tuning_spec"]
    change = ab["dispatch_changes"]["bs1/clip"]
    # A tuning spec retunes dispatches, it does not rename them: all matched.
    assert change["added"] == [] and change["removed"] == []
    assert change["matched_keys"] == len({r["key"] for r in
                                          ab["without"][0]["dispatch_profile"]["dispatches"]})
    assert "### Dispatches the spec moved (without -> with)" in (out / "bench.md").read_text()

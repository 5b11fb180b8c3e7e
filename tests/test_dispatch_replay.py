"""Per-dispatch times without a HAL profiler (runner/bench/dispatch_replay.py): one call of
each stage recorded as a HAL replay, every dispatch it ran timed alone by the real
`iree-benchmark-executable`, held against IREE's HAL profiler of the same stage in the same
bench; and what happens on a driver that cannot run a mechanism (here: CUDA, which this
machine cannot create a device for: a real failure of the real tool)."""

from __future__ import annotations

import importlib.metadata
import json
import shlex
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from runner.base.iree_tools import tool_path
from runner.bench import benchmark_module as bm
from runner.bench import capability
from runner.bench import dispatch_profile as dp
from runner.bench import dispatch_replay as dr

# Each stage's dispatch time per call by the replay, against the HAL profiler's: within
# AGREE. Both are sums of medians (each distinct dispatch's median time times its count):
# one dispatch the OS preempted in the profiled calls adds its whole delay to the
# profiler's plain sum (the 2-core UNet step's sum was 1.5x its sum of medians in one
# run). The two are timed one after the other, and whatever slows one run and not the
# other moves them apart: above all the second test worker, whose pinned two-thread
# benches share the device's core (one whole-suite run's first measurement: CLIP 1.12, the
# UNet step 0.82, the VAE 1.47, measured again 1.12). On the 2-core VM with
# nothing else running they are 1.04-1.17 (docs/bench.md, record dispatch_times). So a
# stage outside AGREE is measured again, up to ATTEMPTS in all, and fails if no measurement
# agrees; where every one was taken beside foreign load (the bench's conditions: the suite's
# other workers), the test is skipped, saying so, not passed. A wrong count, unit, batch or
# per-call division is off every time, by far more.
AGREE, ATTEMPTS = 0.20, 5


@pytest.fixture(scope="module")
def timed(tiny_dispatch_bench) -> dict:
    """The session's real `runner bench --dispatches` of CLIP, the UNet step and the VAE
    (tests/conftest.py), in a hostile --out."""
    out = tiny_dispatch_bench
    return {"out": out, "report": json.loads((out / "bench.json").read_text())}


def _sums(stage: dict) -> tuple[float, float]:
    """The replay's dispatch time per call and the profiler's, as sums of medians."""
    return (stage["dispatch_times"]["per_call_ms"]["dispatch_sum"],
            stage["dispatch_profile"]["per_call_ms"]["dispatch_median_sum"])


def _beside_foreign_load(stage: dict) -> bool:
    """Whether the bench timed the stage while other processes took the CPU (its conditions,
    runner.base.conditions): then the replay and the profiler, timed one after the other,
    saw different machines, and their difference says nothing of either mechanism."""
    return bool((stage.get("conditions") or {}).get("beside_foreign_load"))


def _agree(stage: dict) -> bool:
    alone, profiled = _sums(stage)
    return abs(alone / profiled - 1) <= AGREE


@pytest.mark.slow
def test_replay_times_agree_with_the_hal_profiler_of_the_same_stage(timed, dispatch_bench,
                                                                     tmp_path):
    """Counts exactly, dispatch time per call within AGREE of the profiler's (a stage
    outside it measured once more), and both against the stage's unprofiled wall time (not
    the profiled run's, which holds the profiler's overhead)."""
    report = timed["report"]
    assert set(report["dispatch_times_fields"]) >= {"explained", "per_call_ms"}
    for stage in report["stages"]:
        prof, times = stage["dispatch_profile"], stage["dispatch_times"]
        assert prof["status"] == "ok" and times["status"] == "ok", (prof, times)
        assert times["mechanism"] == dr.REPLAY_MECHANISM and times["calls"] == 1
        # What runs, and how often, is the profiler's exactly.
        assert times["dispatches_per_call"] == prof["dispatches_per_call"]
        counts = {d["name"]: d["count"] for d in times["dispatches"]}
        assert counts == {d["name"]: d["count"] / prof["calls"] for d in prof["dispatches"]}
        # How long: the sums of medians agree within AGREE.
        tried = [stage]
        while not _agree(tried[-1]) and len(tried) < ATTEMPTS:
            out = tmp_path / f"{stage['stage']}-{len(tried)}"
            tried.append(dispatch_bench(out, (stage["stage"],))["stages"][0])
        if not _agree(tried[-1]) and all(_beside_foreign_load(s) for s in tried):
            pytest.skip(f"{stage['stage']}: no measurement of {len(tried)} agreed and every one "
                        "was taken beside foreign load (the bench's own conditions say so: "
                        f"{[_sums(s) for s in tried]}); judged where one is taken alone")
        assert _agree(tried[-1]), (stage["stage"], [_sums(s) for s in tried])
        alone = times["per_call_ms"]["dispatch_sum"]
        unprofiled = stage["latency_ms"]["mean_ms"]
        assert times["per_call_ms"]["unprofiled"] == pytest.approx(unprofiled, abs=1e-6)
        assert times["explained"] == pytest.approx(alone / unprofiled, abs=1e-3)
        assert prof["explained"] == pytest.approx(
            prof["per_call_ms"]["dispatch_busy"] / unprofiled, abs=1e-3)
        assert sum(k["ms_per_call"] for k in times["kinds"]) == pytest.approx(alone, abs=1e-3)
        assert set(times) <= set(report["dispatch_times_fields"])
    md = (timed["out"] / "bench.md").read_text()
    assert "## Dispatch times per stage" in md and "replay + executable benchmarks" in md


@pytest.mark.slow
def test_every_timing_is_a_command_that_reproduces_it(timed):
    """The workloads file holds each iree-benchmark-executable command exactly: run again by
    hand, it benchmarks the same dispatch (its workgroup count) with the same repetitions
    and iterations, after one submission's worth of warm-up. Not its time: a dispatch of a
    few microseconds on two executor threads moves by 10x and more when another process
    takes a core (26 us median, 0.7 us min in one measurement beside a second test worker;
    0.4 us alone)."""
    stage = timed["report"]["stages"][0]
    records = json.loads(Path(stage["dispatch_times"]["files"]["workloads"]).read_text())
    assert len(records) == stage["dispatch_times"]["workloads"]
    first = records[0]
    argv = shlex.split(first["command"])
    assert argv[0] == dr.EXECUTABLE_TOOL and Path(argv[4].split("=", 1)[1]).is_file()
    flags = dict(a.removeprefix("--").split("=", 1) for a in argv[1:])
    out = subprocess.run([tool_path(dr.EXECUTABLE_TOOL), *argv[1:]], capture_output=True,
                         text=True, check=True).stdout
    again = bm.parse_benchmark_json(out)
    rows = [r for r in json.loads(out)["benchmarks"] if r["run_type"] == "iteration"]
    workgroups = flags["workgroup_count"].replace(",", "x")
    assert {r["name"].split("/")[0] for r in rows} == {f"BM_dispatch_{workgroups}"}
    assert again.repetitions == int(flags["benchmark_repetitions"])
    assert again.iterations == int(flags["benchmark_min_time"].removesuffix("x"))
    # warmed up by one submission's worth, not more: every workload of a stage pays it
    assert 0 < float(flags["benchmark_min_warmup_time"]) * 1e6 <= dr.SUBMISSION_US
    assert again.median_ms > 0 and first["min_us"] <= first["median_us"]
    assert not (Path.cwd() / "pwned").exists()


@pytest.mark.slow
def test_the_stages_profile_sizes_each_batch_and_a_function_it_lacks_is_probed(
        timed, tiny_compiled, tmp_path):
    """The bench profiled each stage before recording it: every workload's batch is sized
    by its function's median in that profile, no probe run. A function the profile does
    not name is probed first (the mechanism on a driver without the profiler)."""
    stage = timed["report"]["stages"][0]
    files, profile = stage["dispatch_times"]["files"], stage["dispatch_profile"]
    sizes = dr.profiled_us(profile)
    assert sizes and len(sizes) == profile["functions"]
    for record in json.loads(Path(files["workloads"]).read_text()):
        flags = dict(a.removeprefix("--").split("=", 1) for a in shlex.split(
            record["command"])[1:])
        assert record["batch_sized_by"] == "profile"
        assert int(flags["batch_size"]) == dr.batch_for(sizes[record["name"]])
    assert dr.profiled_us({"status": "unavailable", "note": "no profiler"}) == {}
    replay = Path(files["replay"])
    recording = dr.read_replay(replay)
    first, *rest = sorted(recording.counts, key=lambda w: (w.executable, w.ordinal))
    other = next(w for w in rest if recording.name(w) != recording.name(first))
    two = dr.Recording(recording.executables, Counter({w: recording.counts[w]
                                                       for w in (first, other)}),
                       recording.calls)
    times, records = dr._time_workloads(
        two, replay, tmp_path, "local-task", ("--task_topology_cpu_ids=0",),
        _clip_command(tiny_compiled, "local-task"), 600, (), {recording.name(first): 50.0})
    by_name = {r["name"]: r for r in records}
    assert by_name[recording.name(first)]["batch_sized_by"] == "profile"
    assert f"--batch_size={dr.batch_for(50.0)} " in by_name[recording.name(first)]["command"]
    assert by_name[recording.name(other)]["batch_sized_by"] == "probe"
    assert set(times) == {first, other} and all(t > 0 for t in times.values())


def _clip_command(tiny_compiled, device: str, prefix: tuple[str, ...] = ()) -> bm.BenchCommand:
    compiled = tiny_compiled[1]
    clip = next(m for m in compiled.modules if m.name == "clip")
    return bm.command(device=device, modules=clip.vmfbs[:1], function="encode_prompts",
                      inputs=["1x64xi64", "1x64xi64", "1x64xi64", "1x64xi64"],
                      parameters=[clip.weights] if clip.weights else (), prefix=prefix)


def test_a_driver_that_cannot_run_a_mechanism_is_unavailable_in_the_tools_words(
        tiny_compiled, tmp_path):
    """`--device=cuda` on a machine without CUDA: the tool fails, and each mechanism says
    `unavailable on cuda with IREE <version>: <the tool's reason>` (status unavailable, so
    no stage fails); the answer is kept per tool and driver, so the next stage starts
    nothing."""
    capability.forget()
    command = _clip_command(tiny_compiled, "cuda")
    release = capability.tool_release(tool_path(bm.TOOL))
    assert release == f"IREE {importlib.metadata.version('iree-base-runtime')}"  # 3.13.0
    plan = dp.plan_profile(command, tmp_path / "profile", 2, "cuda")
    prof = dp.capture(plan, "clip")
    assert prof["status"] == "unavailable", prof
    assert prof["note"].startswith(f"unavailable on cuda with {release}: ")
    assert "cuda" in prof["note"].split(": ", 1)[1].lower()  # the tool's reason, not ours
    times = dr.measure_replay(command, tmp_path / "replay")
    assert times["status"] == "unavailable", times
    assert times["note"].startswith(f"unavailable on cuda with {release}: ")
    for mechanism in (dp.PROFILE_MECHANISM, dr.REPLAY_MECHANISM):
        assert capability.known(tool_path(bm.TOOL), "cuda://0", mechanism)
    again = dp.capture(dp.plan_profile(command, tmp_path / "second", 2, "cuda"), "clip")
    assert again["note"] == prof["note"] and not (tmp_path / "second").exists()
    assert dr.measure_replay(command, tmp_path / "third")["note"] == times["note"]
    assert not (tmp_path / "third").exists()
    # local-task is another driver: nothing kept for it.
    assert capability.known(tool_path(bm.TOOL), "local-task", dp.PROFILE_MECHANISM) is None
    capability.forget()


# The try SIGKILLed before its tool can answer, exiting 137 as `timeout -s KILL` does: the
# process stops itself before it execs the tool, so the kill always lands. Not `timeout`: a
# time limit races the tool, which runs the tiny model in milliseconds.
KILLED_AT_ONCE = ("sh", "-c", 'sh -c "kill -STOP \\$\\$; exec \\"\\$@\\"" sh "$@" & '
                  'kill -KILL $!; wait $!', "sh")


def test_a_try_stopped_by_a_signal_is_not_kept(tiny_compiled, tmp_path):
    """A try killed (SIGKILL) says nothing about the driver: the note says it was stopped,
    and the next stage tries again."""
    capability.forget()
    command = _clip_command(tiny_compiled, "local-task", KILLED_AT_ONCE)
    got = dp.capture(dp.plan_profile(command, tmp_path / "p", 2, "local-task"), "clip")
    assert got["status"] == "unavailable" and "not kept" in got["note"], got
    assert capability.known(tool_path(bm.TOOL), "local-task", dp.PROFILE_MECHANISM) is None


def test_replay_counts_follow_the_modules_structure(tiny_compiled, tmp_path):
    """The denoise calls the UNet step 20 times (runner/assets/tiny/unet_pipeline_bs1.mlir):
    every step dispatch is counted exactly 20 times per denoise call, and what is left is
    `run_initialize`'s and the pipeline module's own, fewer than one step's. Recording
    only: nothing is timed. The HAL profiler of one denoise call counts the same: its
    4281 dispatches are more than the 4096 events its buffer keeps between flushes (without
    the runner's periodic flush it kept 4096 and lost 7% of the denoise's dispatches)."""
    from runner.bench import stages as st

    compiled = tiny_compiled[1]
    inputs = st.capture_inputs(compiled, tmp_path / "inputs")
    plans = st.plan_stages(compiled, tmp_path, st.BenchSettings(repetitions=1),
                           inputs=inputs, only=["unet_step", "unet"])
    counts = {}
    for p in plans:
        rec = dr.record_replay(p.command, tmp_path / p.stage, 600)
        assert rec.calls == 1
        per_name: dict[str, int] = {}
        for w, n in rec.counts.items():
            per_name[rec.name(w)] = per_name.get(rec.name(w), 0) + n
        counts[p.stage] = per_name
    step, denoise = counts["unet_step"], counts["unet"]
    assert step and all(denoise[name] == 20 * n for name, n in step.items())
    rest = sum(denoise.values()) - 20 * sum(step.values())
    assert 0 < rest < sum(step.values())
    # The rest: run_initialize's, and the pipeline module's fill of the step index per step.
    assert all(name.startswith(("run_initialize", "__builtin_")) for name in
               set(denoise) - set(step))
    assert denoise["__builtin_splat_i64"] == 20
    unet = next(p for p in plans if p.stage == "unet")
    plan = dp.plan_profile(unet.command, tmp_path / "profile", 1, "local-task")
    profiled = dp.capture(plan, "unet")
    assert profiled["status"] == "ok", profiled
    assert {d["name"]: d["count"] for d in profiled["dispatches"]} == denoise
    assert profiled["dispatches_per_call"] == sum(denoise.values()) > 4096

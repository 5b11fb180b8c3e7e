"""Where a stage's time goes, dispatch by dispatch: IREE's HAL profiler on its benchmark.

The profiled pass is a second `iree-benchmark-module` run of the stage's own command after
the timed one (profiling perturbs timing, so it never replaces the stage latency): one
repetition of exactly `calls` calls (`--benchmark_min_time=<calls>x`, no warmup, since
IREE profiles warmup calls too and the profile must hold a known number of calls) with
`--device_profiling_mode=<mode> --device_profiling_output=dispatches.ireeprof`. The mode
follows the driver: `host-execution` on the CPU's local-task/local-sync (the local HAL times
each dispatch's span on the host and refuses `dispatch-events`), `dispatch-events` on GPU
drivers (device timestamps). IREE 3.12 is the first release with this profiler, and IREE
3.13's CUDA and HIP drivers do not implement it: since the same command has just run
unprofiled, a profiled run that fails is the profiler's failure, and the stage's profile is
`unavailable` with the tool's own reason (runner.bench.capability), not an error.
runner.bench.dispatch_replay times the dispatches on every driver without it.

From the decoded profile (runner.bench.ireeperf) come, per call of the stage: the time in
dispatches (their sum, and the wall time at least one ran: dispatches on local-task can
overlap), in command-buffer executions, and the wall time of the profiled run
(Google Benchmark's `real_time`); what is not dispatch time is launch gaps, barriers,
fills and copies inside command buffers, and host work (VM, allocation, submission) outside
them. Each dispatch function's count, total, mean, min, max and stddev; the same grouped by
kind (runner.bench.dispatch_names); and the Perfetto trace (runner.bench.dispatch_trace).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.base.errors import RunnerError, ToolFailed
from runner.base.iree_tools import found_path, tool_path
from runner.bench import benchmark_module as bm
from runner.bench import capability, dispatch_names, ireeperf
from runner.bench.dispatch_trace import EXECUTE, write_trace

DEFAULT_CALLS = 5
MAX_CALLS = 1000
HOST_MODE, DEVICE_MODE = "host-execution", "dispatch-events"
MODE_FLAG, OUTPUT_FLAG = "--device_profiling_mode", "--device_profiling_output"
# The CPU's profiler keeps a call's events in a buffer of 4096 until the tool flushes it
# after the call: the tiny denoise (4281 dispatches a call) lost 7% of its dispatches,
# 4096 kept a call. A flush every FLUSH_MS from the tool's own thread (IREE 3.12 and 3.13
# have the flag) keeps them all, as the replay counts them. Only in host mode: a GPU
# driver must support flushing a session in flight, which none of IREE 3.13's is known to.
FLUSH_FLAG, FLUSH_MS = "--device_profiling_flush_interval_ms", 20
PROFILE_FILE, BENCHMARK_FILE, TRACE_FILE = ("dispatches.ireeprof", "dispatches.benchmark.json",
                                            "dispatches.trace.json")
FIRST_RELEASE = "3.12.0"
# What every field of a stage's `dispatch_profile` (bench.json, dispatches.json) means.
PROFILE_FIELDS = {
    "status": "ok; unavailable (this IREE or its driver cannot profile: the note says "
              "`unavailable on <driver> with IREE <version>: <the tool's reason>`); error "
              "(see note)",
    "note": "why there is no profile (status unavailable or error)",
    "command": "the profiled iree-benchmark-module run, exactly",
    "export_command": "how the profile was decoded (iree-profile export, ireeperf-jsonl)",
    "schema_version": "the ireeperf-jsonl schema version of the export",
    "unplaced_device_events": "device dispatch events no clock correlation could place "
                              "in time (left out of every figure)",
    "mode": f"--device_profiling_mode: {HOST_MODE} on CPU drivers (host-clock span of "
            f"each dispatch), {DEVICE_MODE} on GPU drivers (device timestamps)",
    "timing_source": "the ireeperf-jsonl rows the times come from: host_execution_event "
                     "(CPU) or dispatch_event (GPU)",
    "calls": "stage calls profiled (one repetition, no warmup); every *_per_call value "
             "is a total over the profile divided by this",
    "per_call_ms": "milliseconds per stage call: wall = the profiled run's Google "
                   "Benchmark real_time; dispatch_sum = sum of dispatch spans; "
                   "dispatch_busy = wall time at least one dispatch ran (less than the sum "
                   "when dispatches overlap); command_buffers = wall time inside command-"
                   "buffer executions (null when the profile has none); not_in_dispatches "
                   "= wall - dispatch_busy, split into in_command_buffers_outside_"
                   "dispatches (launch gaps, barriers, fills, copies) and outside_command_"
                   "buffers (host work: VM, allocation, submission, waits); "
                   "dispatch_median_sum = the dispatch time were every dispatch at the "
                   "median of its function at its workgroup count (robust where the OS "
                   "preempts workers: the gap to dispatch_sum is what outliers added; "
                   "the replay's dispatch_sum is a sum of medians too)",
    "dispatch_share_of_wall": "dispatch_busy / wall (the profiled wall, which holds the "
                              "profiler's own overhead)",
    "explained": "dispatch_busy / unprofiled_ms: the share of the stage's own (unprofiled) "
                 "wall time its dispatches account for",
    "unprofiled_ms": "the stage's mean latency from its timed (unprofiled) benchmark",
    "profiling_overhead": "per_call_ms.wall / unprofiled_ms: what profiling cost, "
                          "measured in the same run",
    "dispatches_per_call": "dispatch events per stage call",
    "functions": "distinct dispatch functions that ran",
    "kinds": "dispatch time per kind (rules: runner/bench/dispatch_names.py): ms_per_call, "
             "share of dispatch_sum, median_ms_per_call (as dispatch_median_sum), "
             "dispatches_per_call, functions",
    "dispatches": "every dispatch function by total time: name (IREE's), key (the name "
                  "with its ordinal blanked: how builds are matched), kind, count, "
                  "ms_per_call, share of dispatch_sum, median_ms_per_call (median x count "
                  "per workgroup count, summed, / calls), mean/median/min/max/stddev_ms "
                  "per dispatch, workgroup_count (its last)",
    "queue_operations": "other timed queue operations (alloca, dealloca, ...): count and "
                        "ms_per_call",
    "files": "profile (.ireeprof, read with iree-profile), benchmark (the profiled run's "
             "JSON), trace (Trace Event JSON: open in https://ui.perfetto.dev)",
}


def mode_for(driver: str) -> str:
    """The profiling mode of an IREE driver (or device URI): the CPU's local HAL times
    dispatches on the host, GPU drivers on the device."""
    name = driver.split("://", 1)[0]
    return HOST_MODE if name.startswith("local") else DEVICE_MODE


PROFILE_MECHANISM = "hal-profiler"


def unavailable() -> str | None:
    """Why this IREE cannot decode dispatch profiles (no `iree-profile` beside
    iree-benchmark-module); None when it may. Whether a driver can capture one is known
    only by trying (runner.bench.capability): `capture` does, once per driver."""
    bench_tool = found_path(bm.TOOL)
    if bench_tool is None or found_path(ireeperf.PROFILE_TOOL) is not None:
        return None  # no bench tool: the stage benchmark itself fails and says why
    return (f"{ireeperf.PROFILE_TOOL} not found beside {bench_tool}: it comes with "
            f"iree-base-runtime {FIRST_RELEASE} or newer")


@dataclass(frozen=True)
class ProfilePlan:
    command: bm.BenchCommand
    directory: Path
    calls: int
    mode: str

    @property
    def profile(self) -> Path:
        return self.directory / PROFILE_FILE

    def lines(self) -> list[str]:
        """The exact commands (a dry run)."""
        return [self.command.text(), shlex.join(ireeperf.export_argv(self.profile))]


def plan_profile(command: bm.BenchCommand, directory: Path, calls: int, driver: str) -> ProfilePlan:
    """The stage's own command, as one profiled repetition of `calls` calls."""
    mode = mode_for(driver)
    argv = bm.with_overrides(command.argv, 1, f"{calls}x", 0.0)
    argv += [f"{MODE_FLAG}={mode}", f"{OUTPUT_FLAG}={directory / PROFILE_FILE}"]
    if mode == HOST_MODE:
        argv.append(f"{FLUSH_FLAG}={FLUSH_MS}")
    return ProfilePlan(bm.BenchCommand(tuple(argv), command.env, command.prefix), directory,
                       calls, mode)


def capture(p: ProfilePlan, title: str, unprofiled_ms: float | None = None,
            timeout: float | None = None) -> dict[str, Any]:
    """Runs the profiled pass and reads it; never raises for what the profiler cannot do
    (the stage latency stands without it): a note says why instead."""
    base = {"mode": p.mode, "calls": p.calls, "command": p.command.text()}
    device = p.command.device
    tool = tool_path(bm.TOOL)
    missing = unavailable() or capability.known(tool, device, PROFILE_MECHANISM)
    if missing is not None:
        return {**base, "status": "unavailable", "note": missing}
    try:
        p.directory.mkdir(parents=True, exist_ok=True)
        p.profile.unlink(missing_ok=True)
        try:
            latency = bm.run_benchmark(p.command, p.directory / BENCHMARK_FILE, timeout)
        except ToolFailed as e:  # the same call ran unprofiled: profiling is what failed
            p.profile.unlink(missing_ok=True)
            return {**base, "status": "unavailable", "note": capability.failed(
                tool, device, PROFILE_MECHANISM, e.returncode, e.output or e.message)}
        if not p.profile.is_file():  # it ran, and this IREE's driver wrote no profile
            return {**base, "status": "unavailable", "note": capability.failed(
                tool, device, PROFILE_MECHANISM, 0, f"{bm.TOOL} ran and wrote no profile "
                f"({MODE_FLAG}={p.mode})")}
        data = ireeperf.read_capture(p.profile)
    except RunnerError as e:
        if p.profile.is_file() and p.profile.stat().st_size < 1024:
            p.profile.unlink()  # a failed capture leaves a header-only stub
        return {**base, "status": "error", "note": str(e)}
    calls = latency.repetitions * latency.iterations
    if not data.dispatches():
        return {**base, "status": "error", "note": "the profile holds no timed dispatch "
                f"({data.unplaced} device events without a clock to place them)"}
    trace = write_trace(p.directory / TRACE_FILE, data.spans, title)
    out = summarize_profile(data, calls, latency.mean_ms, unprofiled_ms)
    out.update(base, calls=calls, status="ok",
               files={"profile": str(p.profile), "benchmark": str(p.directory / BENCHMARK_FILE),
                      "trace": str(trace)},
               export_command=shlex.join(ireeperf.export_argv(p.profile)))
    return out


def union_ns(spans: Iterable[ireeperf.Span]) -> int:
    """Wall time covered by at least one of the spans."""
    total, end = 0, None
    for s in sorted(spans, key=lambda s: s.start_ns):
        if end is None or s.start_ns > end:
            total += s.duration_ns
            end = s.end_ns
        elif s.end_ns > end:
            total += s.end_ns - end
            end = s.end_ns
    return total


def _ms(ns: float, calls: int = 1) -> float:
    return round(ns / 1e6 / calls, 6)


def _median(ns: list[int]) -> float:
    """The median of sorted values."""
    mid = len(ns) // 2
    return ns[mid] if len(ns) % 2 else (ns[mid - 1] + ns[mid]) / 2


def _functions(dispatches: list[ireeperf.Span], calls: int, total: int
               ) -> list[dict[str, Any]]:
    by_name: dict[str, list[ireeperf.Span]] = {}
    for s in dispatches:
        by_name.setdefault(s.name, []).append(s)
    rows: list[dict[str, Any]] = []
    for name, spans in by_name.items():
        ns = sorted(s.duration_ns for s in spans)
        mean = sum(ns) / len(ns)
        median = _median(ns)
        # One function runs at several workgroup counts (one kernel for every size of a
        # shape): each size at its own median, so a median is never of a mix of sizes.
        sizes: dict[Any, list[int]] = {}
        for s in spans:
            sizes.setdefault(str(s.args.get("workgroup_count")), []).append(s.duration_ns)
        at_medians = sum(_median(sorted(d)) * len(d) for d in sizes.values())
        rows.append({"name": name, "key": dispatch_names.key(name),
                     "kind": dispatch_names.kind(name), "count": len(ns),
                     "ms_per_call": _ms(sum(ns), calls),
                     "share": round(sum(ns) / total, 6) if total else 0.0,
                     "median_ms_per_call": _ms(at_medians, calls),
                     "mean_ms": _ms(mean), "median_ms": _ms(median), "min_ms": _ms(ns[0]),
                     "max_ms": _ms(ns[-1]),
                     "stddev_ms": _ms(math.sqrt(sum((x - mean) ** 2 for x in ns)
                                                / max(len(ns) - 1, 1))),  # sample, as IREE
                     "workgroup_count": spans[-1].args.get("workgroup_count")})
    rows.sort(key=lambda r: (-r["ms_per_call"], r["name"]))
    return rows


def kinds(rows: list[dict], calls: int) -> list[dict]:
    """Dispatch rows summed per kind, by time (`rows` as `summarize` writes them)."""
    out: dict[str, dict] = {}
    for r in rows:
        k = out.setdefault(r["kind"], {"kind": r["kind"], "ms_per_call": 0.0, "share": 0.0,
                                       "median_ms_per_call": 0.0,
                                       "dispatches_per_call": 0.0, "functions": 0})
        for f in ("ms_per_call", "share", "median_ms_per_call"):
            k[f] += r[f]
        k["dispatches_per_call"] += r["count"] / calls
        k["functions"] += 1
    for k in out.values():
        for f in ("ms_per_call", "share", "median_ms_per_call", "dispatches_per_call"):
            k[f] = round(k[f], 6)
    return sorted(out.values(), key=lambda k: (-k["ms_per_call"], k["kind"]))


def summarize_profile(data: ireeperf.Capture, calls: int, wall_ms: float,
                      unprofiled_ms: float | None = None) -> dict[str, Any]:
    """The stage's dispatch profile, per call (see FIELDS)."""
    dispatches = data.dispatches()
    total = sum(s.duration_ns for s in dispatches)
    busy = union_ns(dispatches)
    executes = [s for s in data.spans if s.op == EXECUTE]
    in_cb = union_ns(executes) if executes else None
    wall_ns = wall_ms * 1e6 * calls
    rows = _functions(dispatches, calls, total)
    queue_ops: dict[str, list[int]] = {}
    for s in data.spans:
        if s.op not in (ireeperf.DISPATCH, EXECUTE):
            queue_ops.setdefault(s.op, []).append(s.duration_ns)
    per_call = {"wall": _ms(wall_ns, calls), "dispatch_sum": _ms(total, calls),
                "dispatch_median_sum": round(sum(r["median_ms_per_call"] for r in rows), 6),
                "dispatch_busy": _ms(busy, calls),
                "command_buffers": None if in_cb is None else _ms(in_cb, calls),
                "not_in_dispatches": _ms(wall_ns - busy, calls),
                "in_command_buffers_outside_dispatches":
                    None if in_cb is None else _ms(in_cb - busy, calls),
                "outside_command_buffers": None if in_cb is None else _ms(wall_ns - in_cb,
                                                                            calls)}
    return {
        "timing_source": data.timing_source, "schema_version": data.schema_version,
        "per_call_ms": per_call,
        "dispatch_share_of_wall": round(busy / wall_ns, 6) if wall_ns > 0 else None,
        "unprofiled_ms": None if unprofiled_ms is None else round(unprofiled_ms, 6),
        "profiling_overhead": round(wall_ms / unprofiled_ms, 4) if unprofiled_ms else None,
        "explained": round(busy / calls / 1e6 / unprofiled_ms, 4) if unprofiled_ms else None,
        "dispatches_per_call": round(len(dispatches) / calls, 6),
        "functions": len(rows), "unplaced_device_events": data.unplaced,
        "kinds": kinds(rows, calls), "dispatches": rows,
        "queue_operations": [{"op": op, "count": len(ns), "ms_per_call": _ms(sum(ns), calls)}
                             for op, ns in sorted(queue_ops.items())],
    }

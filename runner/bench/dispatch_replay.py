"""Per-dispatch times without a HAL profiler: one call recorded as a HAL replay, then every
dispatch it ran benchmarked alone on the device by `iree-benchmark-executable`.

IREE 3.13's CUDA and HIP drivers have no HAL-native profiler, but its released runtime tools
do run there: `iree-benchmark-module --device_replay_output=` records the HAL work of the
stage's own command (one call, weights referenced by path, not copied), and
`iree-dump-replay --format=jsonl` lists it. From the replay come, for the calls inside the
benchmark's `execute` scope:

- how often each dispatch runs per call: every `command_buffer.dispatch` of a command
  buffer, times that buffer's `device.queue_execute`s in the scope (IREE records a
  function's command buffers once and executes them on every call);
- each dispatch's workload: executable, function ordinal, workgroup count, constants and
  the byte length of every binding (decoded from the replay file's own ranges);
- each executable exactly as the device loaded it (its format and bytes) and its function
  names (the executable metadata the replay keeps), so the kernels timed are the model's
  own, compiled once for the target (nothing is compiled again, no compiler is needed).

Each distinct workload then runs alone in `iree-benchmark-executable --device=<the stage's>
--executable_file=... --entry_point=... --workgroup_count=... --binding=<bytes>xi8`
(`--batch_size` dispatches per submission, so submission costs little; many short
submissions, and their median), and its median time per dispatch times its count is its
share of a call. The batch is sized from the time per dispatch the HAL profiler measured
for its function in the same bench, where one did (on the CPU, `runner bench --dispatches`
profiles each stage first); else from a short probe run of its own (a process per
workload, half of all the processes on a driver without the profiler). The tool runs with
the stage's device flags (on the CPU, `--task_topology_cpu_ids` keeps its workers on the
device's cores) and NUMA binding, but not the stage's `taskset`: its own thread only
submits and waits, and on a worker's core that wait takes the worker's time (a 1.48 ms convolution
timed 1.84 ms with the tool's thread confined to the worker's one core, 13 dispatches per
submission; 2-core VM), which no dispatch in the model pays. The sum over every dispatch is
the time a call spends in kernels run back to back on warm caches; what the stage's
unprofiled wall time holds beyond it is host work and the gaps between dispatches.

The same mechanism runs on the CPU (`local-task`), where the HAL profiler of the same call
is its reference (tests/test_dispatch_replay.py).
"""

from __future__ import annotations

import mmap
import os
import shlex
import struct
import subprocess
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.base.errors import RunnerError, StepFailed, ToolFailed
from runner.base.fileio import atomic_write_json
from runner.base.iree_tools import json_lines, tool_path
from runner.bench import benchmark_module as bm
from runner.bench import capability, dispatch_names
from runner.bench.dispatch_profile import kinds

REPLAY_MECHANISM = "replay-executable-benchmarks"
DUMP_TOOL, EXECUTABLE_TOOL = "iree-dump-replay", "iree-benchmark-executable"
REPLAY_FILE, WORKLOADS_FILE = "dispatches.ireereplay", "dispatch_workloads.json"
SCOPE = "execute"  # iree-benchmark-module's scope around its timed calls
# Dispatches per submission: a submission costs a wake-up of the device's workers (tens of
# µs on the CPU), which the in-model dispatches, recorded back to back, do not pay each. So
# the timed run's batch holds about SUBMISSION_US of work, between BATCH_RANGE's ends (one
# dispatch of a millisecond or more), by the HAL profiler's median of its function, or else
# by a first short run (PROBE_BATCH dispatches, after the same warm-up as the timed run: a
# cold first submission took a 1.4 us reduction for 300 us, and so sized its batch at 14,
# where the submission's own cost then doubled its time).
# The timed run is REPETITIONS short submissions, one a repetition, and their median: the HAL
# profiler's own statistic, a median over spans shorter than the time another process
# takes a core for. Long samples all hold that process's share: on one device core beside
# another job, three 20-ms submissions timed the UNet step and VAE 1.24-1.30x the
# profiler's median sum, twenty-five of about 1 ms 1.00-1.11x (the tiny model, 2-core VM).
# A count, not a minimum time: the benchmark library's search for an iteration count that
# fills a minimum time runs the workload several times over, and a stage has hundreds of
# workloads, each its own process.
PROBE_BATCH, SUBMISSION_US, BATCH_RANGE = 8, 1000.0, (1, 16384)
REPETITIONS = 25
# Warm-up: one submission's worth, so the cold first one (workers waking, caches) is not
# timed. Not more: a stage's hundreds of workloads each pay it, and 0.02 s of it was 40%
# of the tool's CPU time over a stage, for medians the same within 0.2% (30 workloads of
# the tiny CLIP, each timed twice both ways; 2-core VM).
WARMUP_S = SUBMISSION_US / 1e6
# The replay's executable metadata: a 32-byte header, a 32-byte record per function with
# its name's length (u16 at byte 26), then the names back to back (IREE 3.13's layout,
# checked on every read: the lengths must add up to the name storage the dump reports).
_META_RECORD, _NAME_LENGTH_AT = 32, 26
_BINDING = struct.Struct("<QQQQ")  # buffer id, offset, length, slot
_WHOLE = 2**64 - 1  # IREE_HAL_WHOLE_BUFFER
TIMES_FIELDS = {
    "status": "ok; unavailable (the driver or this IREE cannot run the mechanism: the note "
              "says `unavailable on <driver> with IREE <version>: <the tool's reason>`); "
              "error (see note)",
    "mechanism": f"{REPLAY_MECHANISM}: the stage's HAL replay (iree-benchmark-module "
                 "--device_replay_output) for the counts and workloads, each distinct "
                 "dispatch timed alone by iree-benchmark-executable",
    "note": "why there are no times (status unavailable or error)",
    "command": "the recording run (one call), exactly",
    "calls": "calls recorded (each count is per call)",
    "dispatches_per_call": "dispatches one call runs",
    "functions": "distinct dispatch functions",
    "workloads": "distinct (function, workgroup count, constants, binding sizes) timed",
    "per_call_ms": "dispatch_sum: the sum over dispatches of count x median time alone; "
                   "unprofiled: the stage's mean latency from its timed benchmark; rest: "
                   "unprofiled - dispatch_sum (host work, gaps between dispatches)",
    "explained": "dispatch_sum / unprofiled: the share of the stage's own wall time the "
                 "dispatches account for",
    "kinds": "dispatch time per kind (runner/bench/dispatch_names.py)",
    "dispatches": "every dispatch function by time: name, key, kind, count (per call), "
                  "ms_per_call, share, us_per_dispatch (count-weighted median), workloads",
    "files": "replay (.ireereplay: iree-run-replay / iree-benchmark-replay run it again), "
             "workloads (each timed command, its result, and what sized its batch: "
             "`profile`, the HAL profiler's median of its function, or `probe`, a first "
             "run of its own)",
}


@dataclass(frozen=True)
class Executable:
    id: int
    format: str
    data: tuple[int, int]  # (offset, length) of its bytes in the replay file
    names: tuple[str, ...]  # by function ordinal
    constants: tuple[int, ...] = ()  # executable constants (u32)


@dataclass(frozen=True)
class Workload:
    """One distinct dispatch: what iree-benchmark-executable needs to run it alone."""

    executable: int
    ordinal: int
    workgroup_count: tuple[int, ...]
    constants: tuple[int, ...]
    bindings: tuple[int, ...]  # byte lengths


@dataclass
class Recording:
    executables: dict[int, Executable]
    counts: Counter[Workload]  # dispatches per recorded calls
    calls: int

    def name(self, w: Workload) -> str:
        names = self.executables[w.executable].names
        return names[w.ordinal] if w.ordinal < len(names) else \
            f"executable{w.executable}_function{w.ordinal}"


def record_command(command: bm.BenchCommand, directory: Path) -> bm.BenchCommand:
    """The stage's own command as one call recorded into `directory/dispatches.ireereplay`
    (weights referenced by path: a replay holds the HAL work, not the model's bytes)."""
    argv = bm.with_overrides(command.argv, 1, "1x", 0.0)
    argv += [f"--device_replay_output={directory / REPLAY_FILE}",
             "--device_replay_file_policy=reference"]
    return bm.BenchCommand(tuple(argv), command.env, command.prefix)


def record_replay(command: bm.BenchCommand, directory: Path, timeout: float | None = None
                  ) -> Recording:
    """Records one call of `command` into `directory` and reads it back (counts and
    workloads only: nothing is timed). Raises ToolFailed when the tool fails."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / REPLAY_FILE).unlink(missing_ok=True)
    bm.run_benchmark(record_command(command, directory), None, timeout)
    return read_replay(directory / REPLAY_FILE)


def _rows(replay: Path) -> Iterator[dict[str, Any]]:
    return json_lines([DUMP_TOOL, "--format=jsonl", str(replay)], str(replay))


def _u32s(data: mmap.mmap, where: dict[str, int]) -> tuple[int, ...]:
    raw = data[where["offset"]:where["offset"] + where["length"]]
    return struct.unpack(f"<{len(raw) // 4}I", raw[: len(raw) // 4 * 4])


def _names(data: mmap.mmap, payload: dict[str, Any], where: str) -> tuple[str, ...]:
    meta = payload["metadata_range"]
    raw = data[meta["offset"]:meta["offset"] + meta["length"]]
    count = payload.get("metadata_function_count", 0)
    storage = payload.get("metadata_function_name_storage_length", 0)
    first = len(raw) - storage - _META_RECORD * count
    lengths = [struct.unpack_from("<H", raw, first + _META_RECORD * i + _NAME_LENGTH_AT)[0]
               for i in range(count)] if first >= 0 else []
    if sum(lengths) != storage or not count:
        raise StepFailed("the replay's executable metadata is not in the layout this "
                         "runner reads (IREE 3.13's)", where=where,
                         fix="use IREE 3.13's runtime tools, or read the replay with "
                         f"`{DUMP_TOOL} --format=text`")
    names, at = [], len(raw) - storage
    for n in lengths:
        names.append(raw[at:at + n].decode("utf-8", "replace"))
        at += n
    return tuple(names)


def read_replay(replay: Path) -> Recording:
    """The dispatches one recording's `execute` scopes ran, with their workloads."""
    with open(replay, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        return _decode(_rows(replay), data, str(replay))
    finally:
        data.close()


def _decode(rows: Iterable[dict[str, Any]], data: mmap.mmap, where: str) -> Recording:
    executables: dict[int, Executable] = {}
    recorded: dict[int, list[Workload]] = {}  # command buffer -> its dispatches
    counts: Counter[Workload] = Counter()
    depth = scopes = 0
    for row in rows:
        op, payload = row.get("operation"), row.get("payload") or {}
        if op == "replay.scope_begin" and payload.get("name") == SCOPE:
            depth += 1
            scopes += 1
        elif op == "replay.scope_end" and payload.get("name") == SCOPE:
            depth -= 1
        elif op == "executable_cache.prepare_executable":
            fmt = payload["format_range"]
            exe = row["related_object_id"]
            executables[exe] = Executable(
                exe, data[fmt["offset"]:fmt["offset"] + fmt["length"]].decode(),
                (payload["data_range"]["offset"], payload["data_range"]["length"]),
                _names(data, payload, where), _u32s(data, payload["constants_range"]))
        elif op == "device.create_command_buffer":  # ids are reused once one is freed
            recorded[row["related_object_id"]] = []
        elif op == "command_buffer.dispatch":
            b = payload["bindings_range"]
            raw = data[b["offset"]:b["offset"] + b["length"]]
            lengths = tuple(_BINDING.unpack_from(raw, i)[2]
                            for i in range(0, len(raw), _BINDING.size))
            recorded.setdefault(row["object_id"], []).append(Workload(
                payload["executable_id"], payload["function_ordinal"],
                tuple(payload["workgroup_count"]), _u32s(data, payload["constants_range"]),
                lengths))
        elif op == "device.queue_execute" and depth > 0:
            counts.update(recorded.get(payload["command_buffer_id"], []))
    if not scopes:
        raise StepFailed(f"the replay has no `{SCOPE}` scope", where=where,
                         fix="record it with iree-benchmark-module (it marks its timed "
                         "calls)")
    return Recording(executables, counts, scopes)


def executable_file(recording: Recording, replay: Path, exe: int, directory: Path) -> Path:
    """The executable's bytes, as the device loaded them, in a file of their own."""
    e = recording.executables[exe]
    path = directory / f"executable{exe}.{e.format}"
    if not path.is_file():
        with open(replay, "rb") as f:
            f.seek(e.data[0])
            directory.mkdir(parents=True, exist_ok=True)
            path.write_bytes(f.read(e.data[1]))
    return path


def batch_for(us_per_dispatch: float) -> int:
    """Dispatches per submission for a dispatch of about this many microseconds."""
    low, high = BATCH_RANGE
    return max(low, min(high, round(SUBMISSION_US / max(us_per_dispatch, 0.1))))


def workload_argv(recording: Recording, w: Workload, exe_file: Path, device: str,
                  runtime_flags: Iterable[str] = (), batch: int = PROBE_BATCH,
                  timed: bool = True) -> list[str]:
    """`iree-benchmark-executable` for one workload (bare tool name, as printed): the timed
    run, or (`timed=False`) one quick submission that sizes its batch."""
    if any(n == _WHOLE for n in w.bindings):
        raise StepFailed("a dispatch binds a whole buffer of unrecorded size",
                         where=recording.name(w), fix="time it with the HAL profiler")
    e = recording.executables[w.executable]
    return [EXECUTABLE_TOOL, f"--device={device}", *runtime_flags,
            f"--executable_format={e.format}", f"--executable_file={exe_file}",
            f"--entry_point={w.ordinal}",
            f"--workgroup_count={','.join(str(n) for n in w.workgroup_count)}",
            *[f"--executable_constant={c}" for c in e.constants],
            *[f"--constant={c}" for c in w.constants],
            *[f"--binding={max(n, 1)}xi8" for n in w.bindings],
            f"--batch_size={batch}", "--benchmark_format=json",
            f"--benchmark_repetitions={REPETITIONS if timed else 1}",
            f"--benchmark_min_time={batch}x", f"--benchmark_min_warmup_time={WARMUP_S}"]


def _runtime_flags(command: bm.BenchCommand) -> tuple[str, ...]:
    """The stage's device flags that apply to any tool (task topology, allocator ...)."""
    return tuple(a for a in command.argv[1:] if a.startswith(("--task_", "--device_allocator",
                                                               "--cuda_", "--hip_")))


def profiled_us(profile: dict | None) -> dict[str, float]:
    """Function name -> its median microseconds per dispatch in the HAL profile of the same
    stage (runner.bench.dispatch_profile), which sizes each of its workloads' batches in
    place of a probe run; empty where there is no profile."""
    if not profile or profile.get("status") != "ok":
        return {}
    return {r["name"]: r["median_ms"] * 1000 for r in profile["dispatches"]}


def measure_replay(command: bm.BenchCommand, directory: Path, unprofiled_ms: float | None = None,
                   timeout: float | None = None, host_prefix: tuple[str, ...] = (),
                   sizes: dict[str, float] | None = None) -> dict[str, Any]:
    """The stage's dispatches timed by this mechanism (see FIELDS); never raises for what
    the driver or the tools cannot do: the note says so, in the capability's words.
    `host_prefix` runs each timing (the worker's NUMA binding, not its `taskset`: see the
    module docstring); `sizes` (`profiled_us`) sizes the batches of the functions it names,
    the others are probed."""
    device = command.device
    rec = record_command(command, directory)
    base = {"mechanism": REPLAY_MECHANISM, "command": rec.text()}
    tools = [tool_path(bm.TOOL), tool_path(EXECUTABLE_TOOL)]
    for tool in tools:
        known = capability.known(tool, device, REPLAY_MECHANISM)
        if known:
            return {**base, "status": "unavailable", "note": known}
    replay = directory / REPLAY_FILE
    try:
        recording = record_replay(command, directory, timeout)
    except ToolFailed as e:
        replay.unlink(missing_ok=True)
        return {**base, "status": "unavailable", "note": capability.failed(
            tools[0], device, REPLAY_MECHANISM, e.returncode, e.output or e.message)}
    except RunnerError as e:
        return {**base, "status": "error", "note": str(e)}
    try:
        if not recording.counts:
            raise StepFailed("the recorded call ran no dispatch", where=str(replay),
                             fix="check the stage's function with iree-run-module")
        times, commands = _time_workloads(recording, replay, directory, device,
                                          _runtime_flags(command), command, timeout,
                                          host_prefix, sizes or {})
    except _Unavailable as e:
        return {**base, "status": "unavailable", "note": str(e)}
    except RunnerError as e:
        return {**base, "status": "error", "note": str(e)}
    atomic_write_json(directory / WORKLOADS_FILE, commands)
    out = summarize_times(recording, times, unprofiled_ms)
    out.update(base, status="ok", files={"replay": str(replay),
                                         "workloads": str(directory / WORKLOADS_FILE)})
    return out


class _Unavailable(Exception):
    pass


def _time_workloads(recording: Recording, replay: Path, directory: Path, device: str,
                    flags: tuple[str, ...], command: bm.BenchCommand,
                    timeout: float | None, host_prefix: tuple[str, ...],
                    sizes: dict[str, float]) -> tuple[dict[Workload, float], list[dict]]:
    """Median microseconds per dispatch of every workload, and each timing's record."""
    tool = tool_path(EXECUTABLE_TOOL)
    times: dict[Workload, float] = {}
    records = []
    for w in sorted(recording.counts, key=lambda w: (w.executable, w.ordinal,
                                                     w.workgroup_count, w.constants)):
        exe = executable_file(recording, replay, w.executable, directory / "executables")
        name = recording.name(w)
        estimate = sizes.get(name)
        if estimate is None:
            estimate = _run_one(workload_argv(recording, w, exe, device, flags, timed=False),
                                name, tool, device, command, timeout,
                                host_prefix).mean_ms * 1000
        argv = workload_argv(recording, w, exe, device, flags, batch_for(estimate))
        latency = _run_one(argv, name, tool, device, command, timeout, host_prefix)
        times[w] = latency.median_ms * 1000
        records.append({"name": name, "count": recording.counts[w],
                        "command": shlex.join([*host_prefix, *argv]),
                        "median_us": round(times[w], 4),
                        "min_us": round(latency.min_ms * 1000, 4),
                        "batch_sized_by": "profile" if name in sizes else "probe"})
    return times, records


def _run_one(argv: list[str], name: str, tool: str, device: str, command: bm.BenchCommand,
             timeout: float | None, host_prefix: tuple[str, ...]) -> bm.Latency:
    """One iree-benchmark-executable run in the stage's device view (flags, env, NUMA)."""
    try:
        proc = subprocess.run([*host_prefix, tool, *argv[1:]], capture_output=True,
                              text=True, check=False, timeout=timeout,
                              env={**os.environ, **command.env})
    except subprocess.TimeoutExpired:
        raise ToolFailed(f"{EXECUTABLE_TOOL} ran past {timeout}s", where=name,
                         fix="reproduce with: " + shlex.join(argv)) from None
    if proc.returncode != 0:
        raise _Unavailable(capability.failed(tool, device, REPLAY_MECHANISM, proc.returncode,
                                             proc.stderr or proc.stdout))
    return bm.parse_benchmark_json(proc.stdout, shlex.join(argv))


def summarize_times(recording: Recording, times: dict[Workload, float],
                    unprofiled_ms: float | None) -> dict[str, Any]:
    """Per function: its dispatches per call and their time; per stage: the sum and how
    much of the unprofiled wall time it explains."""
    calls = recording.calls
    by_name: dict[str, dict[str, Any]] = {}
    for w, count in recording.counts.items():
        name = recording.name(w)
        row = by_name.setdefault(name, {"name": name, "key": dispatch_names.key(name),
                                        "kind": dispatch_names.kind(name), "count": 0,
                                        "us": 0.0, "workloads": 0})
        row["count"] += count
        row["us"] += count * times[w]
        row["workloads"] += 1
    total_us = sum(r["us"] for r in by_name.values())
    rows = []
    for r in by_name.values():
        ms = round(r["us"] / 1000 / calls, 6)
        rows.append({"name": r["name"], "key": r["key"], "kind": r["kind"],
                     "count": r["count"] // calls if r["count"] % calls == 0
                     else r["count"] / calls, "ms_per_call": ms,
                     "median_ms_per_call": ms,
                     "share": round(r["us"] / total_us, 6) if total_us else 0.0,
                     "us_per_dispatch": round(r["us"] / r["count"], 4),
                     "workloads": r["workloads"]})
    rows.sort(key=lambda r: (-r["ms_per_call"], r["name"]))
    dispatch_ms = total_us / 1000 / calls
    return {
        "calls": calls,
        "dispatches_per_call": round(sum(recording.counts.values()) / calls, 6),
        "functions": len(rows), "workloads": len(times),
        "per_call_ms": {"dispatch_sum": round(dispatch_ms, 6),
                        "unprofiled": None if unprofiled_ms is None
                        else round(unprofiled_ms, 6),
                        "rest": None if unprofiled_ms is None
                        else round(unprofiled_ms - dispatch_ms, 6)},
        "explained": round(dispatch_ms / unprofiled_ms, 4) if unprofiled_ms else None,
        "kinds": [{k: v for k, v in kind.items() if k != "median_ms_per_call"}
                  for kind in kinds([{**r, "count": r["count"] * calls} for r in rows],
                                    calls)],
        "dispatches": [{k: v for k, v in r.items() if k != "median_ms_per_call"}
                       for r in rows],
    }

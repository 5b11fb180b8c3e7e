"""Dispatch time per stage call by both mechanisms, against the stage's unprofiled wall time:
the numbers docs/bench.md shows for "Per-dispatch times without the HAL profiler".

Runs `runner bench --profile tiny --set layout.cores_per_device=N --no-throughput
--dispatches CALLS` (real iree-compile, iree-benchmark-module, HAL profiler, HAL replay and
iree-benchmark-executable on this CPU) ROUNDS times and prints, per stage: the unprofiled
mean ms/call; the HAL profiler's dispatch sum, its sum at medians, busy time, explained
share, and the host time outside command buffers; the replay mechanism's dispatches per
call, distinct workloads timed, dispatch sum (a sum of medians), explained share and the
rest (all from the last round); and, over every round, the replay's sum over the
profiler's sum at medians. `--record` stores it as the `dispatch_times` record
(`dispatch_times_<N>cores` with `--cores-per-device N`).

    python3 scripts/bench_dispatch_times.py --record
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from measured import add_record_option, emit

from runner.cli.main import main as runner


def measure(stages: list[str], calls: int, cores: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-dispatch-times-") as tmp:
        out = Path(tmp) / "bench"
        start = time.perf_counter()
        argv = ["bench", "--profile", "tiny", "--set", f"layout.cores_per_device={cores}",
                "--no-throughput", "--repetitions", "3", "--dispatches", str(calls),
                "--out", str(out)]
        for s in stages:
            argv += ["--stage", s]
        with contextlib.redirect_stdout(sys.stderr):  # stdout holds the one JSON line
            code = runner(argv)
        seconds = time.perf_counter() - start
        report = json.loads((out / "bench.json").read_text())
    result: dict = {"exit_code": code, "seconds": round(seconds, 1), "calls": calls,
                    "cores_per_device": cores}
    for stage in report["stages"]:
        prof, times = stage["dispatch_profile"], stage["dispatch_times"]
        row: dict = {"unprofiled_ms": round(stage["latency_ms"]["mean_ms"], 3)}
        if prof["status"] == "ok":
            c = prof["per_call_ms"]
            row.update(profiler_dispatches_per_call=prof["dispatches_per_call"],
                       profiler_sum_ms=round(c["dispatch_sum"], 3),
                       profiler_median_sum_ms=round(c["dispatch_median_sum"], 3),
                       profiler_busy_ms=round(c["dispatch_busy"], 3),
                       profiler_explained=prof["explained"],
                       profiler_host_ms=c["outside_command_buffers"],
                       profiling_overhead=prof["profiling_overhead"])
        if times["status"] == "ok":
            row.update(dispatches_per_call=times["dispatches_per_call"],
                       workloads=times["workloads"],
                       replay_sum_ms=round(times["per_call_ms"]["dispatch_sum"], 3),
                       replay_explained=times["explained"],
                       replay_rest_ms=round(times["per_call_ms"]["rest"], 3))
        if "profiler_median_sum_ms" in row and "replay_sum_ms" in row:
            row["replay_over_profiler"] = round(row["replay_sum_ms"]
                                                / row["profiler_median_sum_ms"], 3)
        result[stage["stage"]] = row
    return result


def rounds(stages: list[str], calls: int, cores: int, count: int) -> dict:
    """`count` measurements: the last one's figures, with every round's ratio per stage."""
    results = [measure(stages, calls, cores) for _ in range(count)]
    last = results[-1]
    last["rounds"] = count
    last["seconds"] = round(sum(r["seconds"] for r in results), 1)
    last["exit_code"] = max(r["exit_code"] for r in results)
    for stage, row in last.items():
        if isinstance(row, dict) and "replay_over_profiler" in row:
            row["replay_over_profiler_rounds"] = [r[stage].get("replay_over_profiler")
                                                  for r in results]
    return last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", action="append",
                        choices=["clip", "unet_step", "unet", "vae"],
                        help="only this stage (repeatable; default: all four)")
    parser.add_argument("--calls", type=int, default=5, help="profiled calls per stage")
    parser.add_argument("--cores-per-device", type=int, default=1,
                        help="the CPU device's cores (default 1: a two-thread executor "
                        "slows for as long as anything else takes one of two cores)")
    parser.add_argument("--rounds", type=int, default=3, help="measurements (default 3)")
    add_record_option(parser)
    args = parser.parse_args()
    result = rounds(args.stage or [], args.calls, args.cores_per_device, args.rounds)
    name = "dispatch_times" if args.cores_per_device == 1 else \
        f"dispatch_times_{args.cores_per_device}cores"
    emit(name, result, args.record)
    return 0 if result["exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

"""LoadGen driver benchmark on the cpu profile (2 workers), everything measured in one run:

1. Offline throughput through LoadGen (`runner mlperf`) vs the runner's own queue run
   (`runner run`) of the same count on the same layout, best of alternating runs (aim >= 0.98).
   Both paths are measured over the same windows, from the same records (the workers' own
   stats files: each worker's start and every batch's start and durable end):
   - `with_start`: first worker process started .. last sample stored. Worker start and
     module load count in both; the LoadGen path also pays its test process's start and
     LoadGen's issue before any sample is computed.
   - `compute`: first batch started .. last sample stored. Worker start counts in neither;
     in the runner's own run the second worker may still be loading when the first one
     begins, in the LoadGen path every worker is loaded before LoadGen issues.
   LoadGen's own "Samples per second" (first query issued .. last completion, workers
   already loaded) is reported beside them, labelled; it is not compared with either,
   since no runner-side number has that window;
2. Server: time from a sample landing in the store to its QuerySamplesComplete, p50/p99
   (aim p99 <= 50 ms);
3. the LoadGen test process's Python heap peak (tracemalloc) at N and 6N samples in accuracy
   mode, where every image is handed to LoadGen: flat when images are released once LoadGen
   has copied them (ratio ~1, against 6 for a driver that kept them).

Prints one JSON line; --out keeps the run dirs.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from measured import add_record_option, emit

from runner.cli.main import main
from runner.loadgen.run import WORK_DIR
from runner.loadgen.session import TRACE_MEMORY


def user_conf(path: Path, queries: int, duration_ms: int) -> Path:
    path.write_text(f"stable-diffusion-xl.*.min_query_count = {queries}\n"
                    f"stable-diffusion-xl.*.min_duration = {duration_ms}\n")
    return path


WINDOWS = {
    "with_start": "first worker process started .. last sample stored",
    "compute": "first batch started .. last sample stored",
}


def window_rates(run_dir: Path) -> dict[str, float]:
    """Samples per second over each of WINDOWS, from the workers' own stats files (a
    `runner run` dir, or `runner mlperf`'s work dir)."""
    stats = [json.loads(p.read_text()) for p in (run_dir / "workers").glob("*.stats.json")]
    batches = [b for s in stats for b in s["batches"]]
    samples, end = sum(b["samples"] for b in batches), max(b["end"] for b in batches)
    starts = {"with_start": min(s["started_at"] for s in stats),
              "compute": min(b["start"] for b in batches)}
    return {k: samples / (end - t) for k, t in starts.items()}


def mlperf(out: Path, *args: str) -> dict:
    rc = main(["mlperf", "--profile", "cpu", *args, "--out", str(out)])
    if rc not in (0, 1):
        raise SystemExit(f"runner mlperf failed ({rc})")
    return json.loads((out / "results.json").read_text())


def run(work: Path, count: int, memory_count: int, repeats: int) -> dict:
    """Offline: the two runs alternate `repeats` times and the best of each counts, so a
    load spike from elsewhere on the machine does not decide the ratio."""
    conf = user_conf(work / "offline.conf", count, 1000)
    own: dict[str, list[float]] = {k: [] for k in WINDOWS}
    through: dict[str, list[float]] = {k: [] for k in WINDOWS}
    lg_own, results = [], []
    for i in range(repeats):
        own_dir = work / f"own-{i}"
        if main(["run", "--profile", "cpu", "--count", str(count), "--no-score",
                 "--out", str(own_dir)]) != 0:
            raise SystemExit("runner run failed")
        for k, v in window_rates(own_dir).items():
            own[k].append(v)
        offline_dir = work / f"offline-{i}"
        offline = mlperf(offline_dir, "--scenario", "offline", "--mode", "performance",
                         "--count", str(count), "--user-conf", str(conf))
        for k, v in window_rates(offline_dir / WORK_DIR).items():
            through[k].append(v)
        lg_own.append(offline["tests"][0]["summary"]["samples_per_second"])
        results.append(offline["tests"][0]["summary"]["result"])

    server = mlperf(work / "server", "--scenario", "server", "--mode", "performance",
                    "--count", str(count), "--server-target-qps", "2.5",
                    "--user-conf", str(user_conf(work / "server.conf", count, 2000)))
    latency = server["tests"][0]["sut"]["store_to_complete_ms"]

    os.environ[TRACE_MEMORY] = "1"
    try:
        heap = {}
        for n in (memory_count, 6 * memory_count):
            r = mlperf(work / f"accuracy-{n}", "--scenario", "offline", "--mode", "accuracy",
                       "--count", str(n), "--no-score")
            heap[n] = r["tests"][0]["sut"]
    finally:
        del os.environ[TRACE_MEMORY]
    small, large = heap[memory_count], heap[6 * memory_count]
    return {
        "offline_samples": count,
        "windows": WINDOWS,
        "runner_run_samples_per_s": {k: [round(r, 3) for r in v] for k, v in own.items()},
        "through_loadgen_samples_per_s": {k: [round(r, 3) for r in v]
                                          for k, v in through.items()},
        "offline_ratio": {k: round(max(through[k]) / max(own[k]), 3) for k in WINDOWS},
        "loadgen_own_samples_per_s": {
            "window": "LoadGen: first query issued .. last completion (workers loaded before)",
            "values": [round(r, 3) for r in lg_own]},
        "loadgen_offline_results": results,
        "server_result": server["tests"][0]["summary"]["result"],
        "server_samples": server["tests"][0]["sut"]["completed"],
        "server_store_to_complete_ms_p50": round(latency["p50"], 2),
        "server_store_to_complete_ms_p99": round(latency["p99"], 2),
        "heap_peak_bytes": {str(memory_count): small["python_heap_peak_bytes"],
                            str(6 * memory_count): large["python_heap_peak_bytes"]},
        "heap_peak_ratio_6x_samples": round(
            large["python_heap_peak_bytes"] / small["python_heap_peak_bytes"], 3),
        "peak_rss_kb": {str(memory_count): small["peak_rss_kb"],
                        str(6 * memory_count): large["peak_rss_kb"]},
    }


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=48, help="Offline/Server samples")
    parser.add_argument("--memory-count", type=int, default=16,
                        help="accuracy-mode samples for the memory check (and 6x that)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="alternating Offline runs of each kind (best counts)")
    parser.add_argument("--out", help="keep the run dirs here (default: a temp dir)")
    add_record_option(parser)
    args = parser.parse_args()
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=False)
        result = run(Path(args.out), args.count, args.memory_count, args.repeats)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            result = run(Path(tmp), args.count, args.memory_count, args.repeats)
    emit("bench_loadgen", result, args.record)


if __name__ == "__main__":
    cli()

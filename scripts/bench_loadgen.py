"""LoadGen driver benchmark on the cpu profile (2 workers), everything measured in one run:

1. Offline throughput through LoadGen (`runner mlperf`, LoadGen's own "Samples per second")
   vs the runner's own queue run (`runner run`) of the same count on the same layout,
   samples / (first batch start .. last batch written) from the workers' stats (aim >= 0.98),
   best of alternating runs;
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

from runner.cli import main
from runner.loadgen.session import TRACE_MEMORY


def user_conf(path: Path, queries: int, duration_ms: int) -> Path:
    path.write_text(f"stable-diffusion-xl.*.min_query_count = {queries}\n"
                    f"stable-diffusion-xl.*.min_duration = {duration_ms}\n")
    return path


def compute_rate(run_dir: Path) -> float:
    """Samples over the workers' compute window (first batch start .. last batch written)."""
    batches = [b for p in (run_dir / "workers").glob("*.stats.json")
               for b in json.loads(p.read_text())["batches"]]
    window = max(b["end"] for b in batches) - min(b["start"] for b in batches)
    return sum(b["samples"] for b in batches) / window


def mlperf(out: Path, *args: str) -> dict:
    rc = main(["mlperf", "--profile", "cpu", *args, "--out", str(out)])
    if rc not in (0, 1):
        raise SystemExit(f"runner mlperf failed ({rc})")
    return json.loads((out / "results.json").read_text())


def run(work: Path, count: int, memory_count: int, repeats: int) -> dict:
    """Offline: the two runs alternate `repeats` times and the best of each counts, so a
    load spike from elsewhere on the machine does not decide the ratio."""
    conf = user_conf(work / "offline.conf", count, 1000)
    own_rates, lg_rates, results = [], [], []
    for i in range(repeats):
        own = work / f"own-{i}"
        if main(["run", "--profile", "cpu", "--count", str(count), "--no-score",
                 "--out", str(own)]) != 0:
            raise SystemExit("runner run failed")
        own_rates.append(compute_rate(own))
        offline = mlperf(work / f"offline-{i}", "--scenario", "offline", "--mode",
                         "performance", "--count", str(count), "--user-conf", str(conf))
        lg_rates.append(offline["tests"][0]["summary"]["samples_per_second"])
        results.append(offline["tests"][0]["summary"]["result"])
    own_rate, lg_rate = max(own_rates), max(lg_rates)

    server = mlperf(work / "server", "--scenario", "server", "--mode", "performance",
                    "--count", str(count), "--qps", "2.5",
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
        "runner_queue_samples_per_s": [round(r, 3) for r in own_rates],
        "loadgen_offline_samples_per_s": [round(r, 3) for r in lg_rates],
        "loadgen_offline_results": results,
        "offline_ratio": round(lg_rate / own_rate, 3),
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
    args = parser.parse_args()
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=False)
        result = run(Path(args.out), args.count, args.memory_count, args.repeats)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            result = run(Path(tmp), args.count, args.memory_count, args.repeats)
    print(json.dumps(result))


if __name__ == "__main__":
    cli()

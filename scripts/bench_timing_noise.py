"""Benchmark: how much one process's timing of the tiny model moves from one run to the next,
on each CPU driver: why the tiny benchmark goldens time `local-sync`.

A nightly's A/B (runner/history/paired.py) judges pairs of processes, a good build's run
beside a bad build's, so what limits it is how far two runs of the same build apart: a pair
differs by that much with no change at all. This runs `runner bench goldens tiny-bench --sku
cpu` `--rounds` times on each driver, the drivers alternating within a round (so a drift
of the machine lands on both), each run a fresh process as a nightly's is, and reports per
series:

- `median_ms`: the median of the runs' medians;
- `spread`: the standard deviation of the log of the runs' medians (0.05: runs spread
  about 5%);
- `pair_spread`: the standard deviation of the log ratio of one run to the next on the
  same driver (what an A/B pair with no change shows);
- `task_over_sync`: local-task's pair spread over local-sync's.

`local-task` runs the dispatches on a worker thread per core; on a shared 2-core VM those
threads wait on one another and on whatever else runs, and a run's median moves with that.
`local-sync` runs them on the calling thread alone.

    python3 scripts/bench_timing_noise.py              # ~4 minutes on 2 cores, quiet
    python3 scripts/bench_timing_noise.py --rounds 3 -k unet
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from measured import add_record_option, emit

REPO = Path(__file__).resolve().parent.parent
DEVICES = ("local-task", "local-sync")


def run_medians(device: str, out: Path, keyword: str | None) -> dict[str, float]:
    """One real `bench goldens` process on `device`: each test's median time (ms)."""
    argv = [sys.executable, "-m", "runner", "bench", "goldens", "tiny-bench", "--sku", "cpu",
            "--device", device, "--out", str(out), "--results", f"sqlite:///{out}.sqlite",
            *(["-k", keyword] if keyword else [])]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"bench goldens on {device} failed ({proc.returncode}):\n"
                         f"{proc.stderr[-3000:]}")
    report = json.loads((out / "bench.json").read_text(encoding="utf-8"))
    return {g["name"]: g["latency_ms"]["median_ms"] for g in report["goldens"]}


def noise(medians: list[float]) -> dict[str, float]:
    """A series' runs summed up: their median, the spread of their logs and of the log
    ratio of each run to the next."""
    logs = [math.log(m) for m in medians]
    steps = [b - a for a, b in itertools.pairwise(logs)]
    return {"median_ms": round(statistics.median(medians), 4),
            "spread": round(statistics.stdev(logs), 4),
            "pair_spread": round(statistics.stdev(steps), 4)}


def measure(rounds: int, keyword: str | None, work: Path) -> dict[str, dict[str, list[float]]]:
    """Per device, per series, every run's median, the drivers' order alternating."""
    got: dict[str, dict[str, list[float]]] = {d: {} for d in DEVICES}
    for i in range(rounds):
        for device in DEVICES if i % 2 == 0 else DEVICES[::-1]:
            for name, median in run_medians(device, work / f"{i:02d}-{device}", keyword).items():
                got[device].setdefault(name, []).append(median)
        print(f"round {i + 1}/{rounds}: " + "; ".join(
            f"{d} " + ", ".join(f"{n.split('/')[-1]} {v[-1]:.3g}" for n, v in got[d].items())
            for d in DEVICES), file=sys.stderr)
    return got


def summary(got: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float | None]]:
    """Per series (by its file's name: `unet_cpu`), both drivers' noise and how much wider
    local-task's pairs spread."""
    out: dict[str, dict[str, float | None]] = {}
    for name in got[DEVICES[0]]:
        task, sync = noise(got["local-task"][name]), noise(got["local-sync"][name])
        out[name.rsplit("/", 1)[-1]] = {**{f"task_{k}": v for k, v in task.items()},
                     **{f"sync_{k}": v for k, v in sync.items()},
                     "task_over_sync": round(task["pair_spread"] / sync["pair_spread"], 2)
                     if sync["pair_spread"] > 0 else None}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8,
                        help="runs on each driver (8; at least 3)")
    parser.add_argument("-k", help="bench goldens' -k, to time fewer tests (default: all)")
    add_record_option(parser)
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds: at least 3 runs a driver give a pair spread; use 3 or more")
    with tempfile.TemporaryDirectory() as tmp:
        result = summary(measure(args.rounds, args.k, Path(tmp)))
    emit("bench_timing_noise", {"rounds": args.rounds, "series": result}, args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())

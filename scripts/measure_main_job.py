"""The README's main job, timed as a user runs it: `runner run --profile cpu --count 32`.

Two timings, both in this run:
  warm  the main job with the compile cache holding its modules (compiled first, untimed):
        wall time of the whole command, its run window's samples/s (results.json), the
        scoring time, the verdict, and the peak RSS of its largest process;
  cold  `runner compile --profile cpu` into an empty cache: the four compiles a first run
        adds.
Each is a fresh `python3 -m runner` process, so imports count. Prints one JSON line.

    python3 scripts/measure_main_job.py [--count 32] [--record]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measured import add_record_option, emit

REPO = Path(__file__).resolve().parent.parent


def runner(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "runner", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"`runner {' '.join(args)}` exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=32)
    add_record_option(parser)
    args = parser.parse_args()
    env = dict(os.environ, RUNNER_PROGRESS="off", PYTHONPATH=str(REPO))
    with tempfile.TemporaryDirectory() as tmp:
        runner(["compile", "--profile", "cpu"], env)
        out = Path(tmp) / "main"
        wall = runner(["run", "--profile", "cpu", "--count", str(args.count), "--out",
                       str(out)], env)
        peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        results = json.loads((out / "results.json").read_text())
        cold = runner(["compile", "--profile", "cpu"],
                      dict(env, RUNNER_CACHE_DIR=str(Path(tmp) / "empty-cache")))
    timings = results["timings"]
    emit("main_job", {
        "count": args.count, "workers": results["plan"]["workers"],
        "verdict": results["verdict"],
        "wall_s": round(wall, 1),
        "run_s": round(timings["wall_s"], 2),
        "run_samples_per_s": round(timings["samples_per_s"], 3),
        "scoring_s": round(timings["scoring_s"], 1),
        "peak_rss_gb": round(peak_kb / 2**20, 2),
        "cold_compile_s": round(cold, 1),
    }, args.record)


if __name__ == "__main__":
    main()

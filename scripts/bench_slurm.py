"""Slurm executor overhead on the one-node cluster (scripts/slurm_setup.sh), one JSON line.

The same samples on the same two cores, both measured in this run:
- local: a run (runner/lifecycle.py) with the cpu profile's two devices (two workers, one
  per core);
- slurm: the same run with the Slurm executor, two array tasks of one CPU each, one worker
  per task.

So the work and the core count are equal and the difference is what Slurm adds: sbatch,
scheduling, starting a node task (Python + plan), polling squeue until every task ended.
Reported: wall-time ratio slurm/local, the extra seconds, and their parts per node task
(submit -> node task started, node started -> workers started, last node ended -> submitter
done). Wall times include module load in both; timings are best of --repeat.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measured import add_record_option, emit

from runner.batch.slurm import SlurmOptions
from runner.config.profile import load_profile
from runner.lifecycle import execute_run, executor_for

REPO = Path(__file__).resolve().parent.parent


def local(count: int, out: Path) -> float:
    profile = load_profile("cpu")  # devices 0-1: two workers, one core each
    start = time.monotonic()
    outcome = execute_run(out, profile, list(range(count)), ["run"])
    assert outcome.complete
    return time.monotonic() - start


def slurm(count: int, out: Path, poll: float) -> tuple[float, dict]:
    profile = load_profile("cpu")
    profile = dataclasses.replace(profile, layout=profile.layout.with_overrides(devices="0"))
    options = SlurmOptions(nodes=2, cpus_per_node=1, poll_seconds=poll)
    start = time.monotonic()
    outcome = execute_run(out, profile, list(range(count)), ["run"],
                          executor_for("slurm", profile, slurm=options))
    seconds = time.monotonic() - start
    end_wall = time.time()
    assert outcome.complete and not outcome.deaths
    manifest = json.loads((out / "run.json").read_text())
    job = manifest["slurm"]["jobs"][0]
    nodes = list(manifest["slurm"]["nodes"].values())
    first_stats = []
    for node in nodes:
        worker = node["workers"][0]
        stats = json.loads((out / "workers" / f"{worker}.stats.json").read_text())
        first_stats.append(stats["batches"][0]["start"] - stats["load_seconds"])
    parts = {
        "submit_to_node_start_s": statistics.mean(n["started"] - job["submitted"]
                                                  for n in nodes),
        "node_start_to_worker_start_s": statistics.mean(
            s - n["started"] for s, n in zip(first_stats, nodes, strict=True)),
        "last_node_end_to_submitter_done_s": end_wall - max(n["ended"] for n in nodes),
    }
    return seconds, parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--poll", type=float, default=SlurmOptions.poll_seconds,
                        help="submitter's squeue interval (default: the executor's default)")
    add_record_option(parser)
    args = parser.parse_args()
    setup = subprocess.run(["bash", str(REPO / "scripts" / "slurm_setup.sh")],
                           capture_output=True, text=True)
    if setup.returncode != 0:
        sys.exit(f"no Slurm cluster: {setup.stderr[-2000:]}")
    local_s, slurm_s, parts_all = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            local_s.append(local(args.count, Path(tmp) / f"local-{i}"))
            seconds, parts = slurm(args.count, Path(tmp) / f"slurm-{i}", args.poll)
            slurm_s.append(seconds)
            parts_all.append(parts)
    best_local, best_slurm = min(local_s), min(slurm_s)
    best_parts = parts_all[slurm_s.index(best_slurm)]
    emit("bench_slurm", {
        "bench": "slurm", "count": args.count, "node_tasks": 2, "poll_seconds": args.poll,
        "local_seconds": round(best_local, 2), "slurm_seconds": round(best_slurm, 2),
        "slurm_vs_local": round(best_slurm / best_local, 3),
        "overhead_seconds": round(best_slurm - best_local, 2),
        **{k: round(v, 2) for k, v in best_parts.items()},
    }, args.record)


if __name__ == "__main__":
    main()

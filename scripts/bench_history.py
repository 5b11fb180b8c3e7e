"""Benchmark: what the results store costs.

1. Recording: the README's main job (`runner run --profile cpu --count 32`) is run once, for
   real, with recording off (`--results` pointing at a path that cannot be created, so the
   record step fails at once and prints its note); then the record step alone (a fresh
   Python process: importing SQLAlchemy, the extraction, creating the store, the write) is
   timed on that run dir, into a new store and into one that already exists. The ratio to
   the job's wall time is the overhead recording adds.
2. Reading: a store of `--results-count` results (the main job's own result, its numbers
   varied and spread over builds and dates, with one step in a stage time) is written, then
   `runner history --json` and `runner history --out DIR` (the HTML page and its change
   points) are timed as a user runs them, a fresh process each, `--repeat` times (median).

    python3 scripts/bench_history.py               # ~2 minutes on 2 cores
    python3 scripts/bench_history.py --count 8 --results-count 2000
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
from measured import add_record_option, emit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runner.history.extract import extract  # noqa: E402
from runner.history.model import Result  # noqa: E402
from runner.history.store import open_store  # noqa: E402
from runner.history.url import resolve  # noqa: E402

RECORD = """
import sys, time
t = time.perf_counter()
from runner.history.record import record
record("run", __import__("pathlib").Path(sys.argv[1]), sys.argv[2], say=lambda line: None)
print(time.perf_counter() - t)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def timed(argv: list[str], repeat: int = 1) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, env=_env(), check=False,
                              cwd=REPO)
        times.append(time.perf_counter() - start)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stderr[-2000:]}")
    return statistics.median(times)


def record_seconds(run_dir: Path, url: str) -> tuple[float, float]:
    """(the whole process, the record call inside it) for one record step."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", RECORD, str(run_dir), url],
                          capture_output=True, text=True, env=_env(), check=True)
    return time.perf_counter() - start, float(proc.stdout.strip().splitlines()[-1])


def varied(template: Result, n: int, rng: np.random.Generator) -> list[Result]:
    """`n` results like `template`: 5 builds in turn over n hours, each number with 3%
    noise and a few 30% outliers (a busy machine), and the UNet stage 12% slower in the
    last 100 (the regression the change points must find)."""
    builds = [f"3.{9 + i}.0" for i in range(5)]
    out = []
    for i in range(n):
        build = builds[min(i * len(builds) // n, len(builds) - 1)]
        metrics = []
        for m in template.metrics:
            factor = rng.normal(1.0, 0.03) * (1.3 if rng.random() < 0.02 else 1.0)
            if m.name == "stage_ms" and m.subject == "unet" and i >= n - 100:
                factor *= 1.12
            metrics.append(dataclasses.replace(m, value=m.value * factor))
        out.append(dataclasses.replace(
            template, key=f"bench-{i}", finished_at=template.finished_at + timedelta(hours=i),
            compiler_version=build, runtime_version=build, metrics=tuple(metrics)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=32, help="samples of the main job")
    parser.add_argument("--results-count", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    add_record_option(parser)
    args = parser.parse_args()
    runner = [sys.executable, "-m", "runner"]
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        run_dir = base / "main"
        print(f"the main job: runner run --profile cpu --count {args.count} ...",
              file=sys.stderr)
        job_s = timed([*runner, "run", "--profile", "cpu", "--count", str(args.count),
                       "--out", str(run_dir), "--results", "/proc/no-store/results.sqlite"])
        url = f"sqlite:///{base / 'recorded.sqlite'}"
        new_total, new_call = record_seconds(run_dir, url)
        old_total, old_call = record_seconds(run_dir, url)  # the store exists, at HEAD
        template = extract(run_dir)[0]
        print(f"writing {args.results_count} results ...", file=sys.stderr)
        many = f"sqlite:///{base / 'many.sqlite'}"
        with open_store(resolve(many)) as store:
            start = time.perf_counter()
            store.add_all(varied(template, args.results_count, np.random.default_rng(0)))
            write_s = time.perf_counter() - start
        history = [*runner, "history", "--results", many]
        json_s = timed([*history, "--json"], args.repeat)
        out = base / "report"
        html_s = timed([*history, "--out", str(out)], args.repeat)
        html_mb = (out / "history.html").stat().st_size / 1e6
    metrics = len(template.metrics)
    print(f"main job {job_s:.1f} s; record step {new_total:.2f} s into a new store "
          f"({new_total / job_s:.2%} of the job), {old_total:.2f} s into an existing one "
          f"({old_total / job_s:.2%}); inside the process {new_call:.3f} / {old_call:.3f} s",
          file=sys.stderr)
    print(f"{args.results_count} results x {metrics} metrics written in {write_s:.1f} s; "
          f"`runner history --json` {json_s:.2f} s, `--out` (HTML {html_mb:.1f} MB) "
          f"{html_s:.2f} s", file=sys.stderr)
    emit("bench_history", {
        "main_job_count": args.count, "main_job_s": round(job_s, 1),
        "record_new_store_s": round(new_total, 2), "record_existing_store_s": round(old_total, 2),
        "record_call_s": round(old_call, 3),
        "record_share_of_job_pct": round(100 * old_total / job_s, 2),
        "record_new_store_share_of_job_pct": round(100 * new_total / job_s, 2),
        "results": args.results_count, "metrics_per_result": metrics,
        "write_results_per_s": round(args.results_count / write_s),
        "history_json_s": round(json_s, 2), "history_html_s": round(html_s, 2),
        "history_html_mb": round(html_mb, 1)}, args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())

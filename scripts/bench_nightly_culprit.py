"""Benchmark: the time from the first night of a bad build to the culprit `runner nightly` names.

Real nights over real IREE releases on the tiny profile, each a `runner nightly --iree
wheels:X --profile tiny --count N` into one fresh store and nights root: first the good
release (`--good`, 3.11.0), then the bad one (`--bad`, 3.12.0, whose tiny UNet module is
larger: bench goldens size_bytes 306872 -> 322634 B, deterministic). The history then holds
the good release's one night and the bad one's first; the bad night judges it, bisects the
step it lists between the two releases (compstat) and names the first bad build. Measured:
the wall time from the start of the bad build's night to the summary naming the culprit,
which part of it the bisect took, and on which night the culprit was named (1: the bad
build's own; 2: the next release's, `--then`, run only where the first named none). The
releases' venvs are the bisect cache's ($RUNNER_CACHE_DIR/builds), installed
once and reused.

    python3 scripts/bench_nightly_culprit.py               # ~3 minutes on 2 cores, cached venvs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from measured import add_record_option, emit

REPO = Path(__file__).resolve().parent.parent


def nightly(version: str, root: Path, store: Path, count: int) -> tuple[dict[str, Any], float]:
    """One real night of `version`: its summary and wall seconds."""
    argv = [sys.executable, "-m", "runner", "nightly", "--iree", f"wheels:{version}",
            "--profile", "tiny", "--count", str(count), "--results", str(store), "--out",
            str(root), "--json"]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO),
                               "RUNNER_PROGRESS": "plain"})
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"runner nightly --iree wheels:{version} exited {proc.returncode}:\n"
                         f"{proc.stderr[-3000:]}")
    summary: dict[str, Any] = json.loads(proc.stdout)
    print(f"night of {version}: {wall:.0f} s, {summary['headline']}", file=sys.stderr)
    return summary, wall


def step_seconds(summary: dict[str, Any], prefix: str) -> float:
    """The seconds the night's steps named `prefix...` took, as its nightly.json keeps them."""
    state = json.loads((Path(summary["night_dir"]) / "nightly.json").read_text())
    return sum(float(step.get("seconds") or 0) for name, step in state["steps"].items()
               if name.startswith(prefix))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--good", default="3.11.0", help="the good release (3.11.0)")
    parser.add_argument("--bad", default="3.12.0", help="the bad release (3.12.0)")
    parser.add_argument("--then", default="3.13.0",
                        help="the next night's release, run where the bad night named no "
                        "culprit (3.13.0)")
    parser.add_argument("--count", type=int, default=2,
                        help="each night's run and bench samples (2, as the nightly test's)")
    add_record_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root, store = Path(tmp) / "nights", Path(tmp) / "history.sqlite"
        _, good_wall = nightly(args.good, root, store, args.count)
        waited = 0.0
        found: tuple[int, dict[str, Any], float] | None = None
        for k, version in enumerate((args.bad, args.then), start=1):
            summary, wall = nightly(version, root, store, args.count)
            waited += wall
            if summary.get("culprit"):
                found = (k, summary, step_seconds(summary, "bisect"))
                break
    if found is None:
        print(f"no culprit on the nights of {args.bad} and {args.then}", file=sys.stderr)
    k, summary, bisect = found if found else (0, {}, 0.0)
    culprit = summary.get("culprit") or {}
    emit("bench_nightly_culprit", {
        "good": args.good, "bad": args.bad, "count": args.count,
        "good_night_s": round(good_wall, 1), "culprit_night": k or None,
        "first_bad_night_to_culprit_s": round(waited, 1) if found else None,
        "bisect_s": round(bisect, 1) if found else None,
        "regressions_listed": len(summary.get("regressions") or []),
        "first_bad": culprit.get("first_bad"), "last_good": culprit.get("last_good"),
        "exact": culprit.get("exact"), "metric": culprit.get("metric"),
        "relative": culprit.get("relative")}, args.record)
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())

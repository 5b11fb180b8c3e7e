"""The GPU check on this machine's CPU: `runner gpu-check prepare` then `run`, timed.

    python3 scripts/bench_gpu_check.py [--out DIR] [--record]

Runs `runner gpu-check prepare --profile cpu --batch-sizes 1,2 --no-wheels` into a fresh
carry (with a fresh $RUNNER_CACHE_DIR, so every module is compiled: a lab's first prepare),
then `runner gpu-check run` from it, and prints one JSON line: the seconds of each, the
carry's size and its parts, and each step's seconds. docs/gpu-check.md shows the record
(`gpu_check_cpu`).
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

from measured import REPO, add_record_option, emit


def tree_mb(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6, 1)


def runner(*args: str, env: dict[str, str]) -> float:
    """`python -m runner ARGS` to its end (exit 0 required); its wall seconds."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "runner", *args], env=env, check=False,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"runner {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return round(time.perf_counter() - t0, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="keep the carry and results here "
                        "(default: a temporary directory)")
    add_record_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        root = args.out or Path(tmp)
        carry, results = root / "carry", root / "results"
        env = {**os.environ, "PYTHONPATH": str(REPO), "RUNNER_PROGRESS": "off",
               "RUNNER_CACHE_DIR": str(root / "cache"),
               "RUNNER_RESULTS_URL": str(root / "results.sqlite")}
        prepare_s = runner("gpu-check", "prepare", "--profile", "cpu", "--batch-sizes", "1,2",
                           "--no-wheels", "--out", str(carry), env=env)
        run_s = runner("gpu-check", "run", "--carry", str(carry), "--out", str(results),
                       env=env)
        summary = json.loads((results / "gpu_check.json").read_text())
        result = {
            "prepare_s": prepare_s, "run_s": run_s, "carry_mb": tree_mb(carry),
            "cache_mb": tree_mb(carry / "cache"), "tiny_cpu_mb": tree_mb(carry / "tiny-cpu"),
            "status": summary["status"],
            "steps_s": {s["name"]: s["seconds"] for s in summary["steps"]},
            "mlperf_samples_per_s": (summary.get("mlperf") or {}).get("samples_per_s")}
    emit("gpu_check_cpu", result, args.record)


if __name__ == "__main__":
    main()

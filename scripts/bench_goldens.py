"""How long `runner goldens check` takes on the tiny suite, against doing the same by hand.

Three timings, all in this run on this machine:
  by hand  `iree-compile` then `iree-run-module --expected_output` per test, as the IREE
           golden-update guide describes (the baseline);
  cold     `runner goldens check` with an empty cache (compiles everything);
  warm     the same command again (every module comes from the compile cache).
Each check is a fresh `python -m runner` process, so imports are included.
Prints seconds and the ratios against the baseline, then one JSON line.

    python scripts/bench_goldens.py [--suite goldens/tiny] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measured import add_record_option, emit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(argv)}\n{proc.stdout}"
                         f"{proc.stderr}")
    return seconds


def by_hand(suite: Path, work: Path) -> float:
    """iree-compile + iree-run-module per test, with the commands `check` says it runs."""
    from runner.base.iree_tools import compiler_info
    from runner.goldens.check import run_module_command
    from runner.goldens.plan import CheckOptions, plan
    from runner.goldens.testfile import load_tests

    compiler = compiler_info()
    total = 0.0
    for i, test in enumerate(load_tests([suite])):
        p = plan(test, CheckOptions(), compiler)
        vmfb = work / f"{i}.vmfb"
        module = p.modules[0]
        total += timed([compiler.path, str(module.mlir), *module.flags, "-o", str(vmfb)],
                       dict(os.environ))
        total += timed(run_module_command(p, [str(vmfb)], work, None), dict(os.environ))
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default=str(REPO / "goldens" / "tiny"))
    parser.add_argument("--repeat", type=int, default=3, help="warm runs (the best counts)")
    add_record_option(parser)
    args = parser.parse_args()
    suite = Path(args.suite)
    check = [sys.executable, "-m", "runner", "goldens", "check", str(suite)]
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "RUNNER_CACHE_DIR": str(Path(tmp) / "cache"),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                           os.environ.get("PYTHONPATH")]))}
        hand = by_hand(suite, Path(tmp))
        cold = timed(check, env)
        warm = min(timed(check, env) for _ in range(args.repeat))
    print(f"tiny suite ({suite}):")
    print(f"  by hand (iree-compile + iree-run-module): {hand:7.2f} s   (baseline)")
    print(f"  goldens check, cold cache:                {cold:7.2f} s   ratio {cold / hand:.2f}")
    print(f"  goldens check, warm cache:                {warm:7.2f} s   ratio {warm / hand:.3f}")
    print(f"  warm / cold:                                          ratio {warm / cold:.3f}")
    emit("bench_goldens", {"suite": suite.name, "by_hand_s": round(hand, 2),
                           "cold_s": round(cold, 2), "warm_s": round(warm, 2),
                           "cold_vs_by_hand": round(cold / hand, 3),
                           "warm_vs_by_hand": round(warm / hand, 3)}, args.record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

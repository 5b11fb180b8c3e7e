"""A long fuzz run of the input boundary: the property tests of tests/test_inputs_fuzz.py
with a random seed and many examples per property (CI runs them derandomized, 50 each).

    python3 scripts/fuzz_inputs.py                      # 5000 examples per property
    python3 scripts/fuzz_inputs.py --examples 50000 -k yaml
    python3 scripts/fuzz_inputs.py --seed 1234          # replay one run

A failure prints the falsifying example (and hypothesis' reproduce blob); add it to the
test's strategy or to HOSTILE_TEXT so CI keeps checking it.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=5000, help="examples per property")
    parser.add_argument("--seed", type=int, help="hypothesis seed (default: a random one)")
    parser.add_argument("-k", dest="select", help="only properties matching (pytest -k)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"fuzzing with seed {seed}, {args.examples} examples per property", flush=True)
    env = {**os.environ, "RUNNER_FUZZ_PROFILE": "fuzz", "RUNNER_FUZZ_EXAMPLES":
           str(args.examples), "PYTHONPATH": os.pathsep.join(
               [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               str(REPO / "tests" / "test_inputs_fuzz.py"), f"--hypothesis-seed={seed}",
               "-W", "ignore::DeprecationWarning"]
    if args.select:
        command += ["-k", args.select]
    return subprocess.call(command, env=env, cwd=REPO)


if __name__ == "__main__":
    raise SystemExit(main())

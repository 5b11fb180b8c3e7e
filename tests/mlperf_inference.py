"""MLCommons' own tools (mlcommons/inference), when a checkout is at hand.

`MLPERF_INFERENCE_DIR` names the checkout's root (the directory holding `tools/` and
`compliance/`). The project's own tests never need it: each rule it enforces has a test of
ours; these only confirm that MLPerf's code agrees, and skip without a checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ENV = "MLPERF_INFERENCE_DIR"


def checkout() -> Path:
    value = os.environ.get(ENV)
    root = Path(value) if value else None
    if root is None or not (root / "tools" / "submission" / "submission_checker").is_dir():
        pytest.skip(f"no mlcommons/inference checkout (set {ENV})")
    return root


def checker_constants():
    root = checkout()
    sys.path.insert(0, str(root / "tools" / "submission"))
    try:
        from submission_checker import constants
    finally:
        sys.path.pop(0)
    return constants


def run_checker(tree: Path, version: str, submitter: str, tmp: Path) -> tuple[int, list[str]]:
    """(exit code, ERROR lines) of `submission_checker.main` on a tree."""
    root = checkout()
    done = subprocess.run(
        [sys.executable, "-m", "submission_checker.main", "--input", str(tree), "--version",
         version, "--submitter", submitter, "--csv", str(tmp / "summary.csv")],
        cwd=root / "tools" / "submission", capture_output=True, text=True, timeout=600,
        check=False)
    lines = (done.stdout + done.stderr).splitlines()
    return done.returncode, [line for line in lines if " ERROR]" in line or "Traceback" in line]


def run_script(script: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600, check=False)

"""mypy over runner/ at the strictness pyproject.toml's [tool.mypy] sets (mypy's default
rules plus `check_untyped_defs`; packages without type information are Any): a type error
anywhere in the library fails the suite, with mypy's own messages."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_runner_type_checks():
    proc = subprocess.run([sys.executable, "-m", "mypy", "runner"], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"mypy found errors:\n{proc.stdout}{proc.stderr}"

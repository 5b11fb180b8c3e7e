"""apache-otava's change points, for holding the history's detector against the field's.

Otava pins numpy and scipy older than the runner's, so it cannot share the suite's
interpreter: it is installed, at the pin pyproject.toml's `otava` extra names, into a venv of
its own under `$RUNNER_CACHE_DIR` (made once, reused by later sessions), and each call runs
its E-Divisive means analysis (`otava.analysis.compute_change_points`, what `otava analyze`
runs per metric) in that venv, with otava's own default options (`AnalysisOptions()`), on
the series handed over as JSON. Where the venv cannot be made (no package index), the tests
skip, except under CI (`CI` set), where that is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from repo_support import REPO
from shared_work import DONE, once

from runner.base.paths import cache_dir

ANALYZE = """
import json, sys
from otava.analysis import compute_change_points
from otava.series import AnalysisOptions

o = AnalysisOptions()
out = []
for values in json.load(sys.stdin):
    found, _ = compute_change_points(values, window_len=o.window_len, max_pvalue=o.max_pvalue,
                                     min_magnitude=o.min_magnitude)
    out.append([int(c.index) for c in found])
json.dump(out, sys.stdout)
"""


def requirement() -> str:
    """The otava pin, as the `otava` extra names it."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (pin,) = project["optional-dependencies"]["otava"]
    return str(pin)


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must install apache-otava from PyPI: {why}")
    pytest.skip(f"apache-otava cannot be installed here: {why}")


def otava_python(factory: pytest.TempPathFactory) -> Path:
    """The interpreter of the venv holding otava, made on first use."""
    pin = requirement()
    root = cache_dir() / "otava" / pin.replace("==", "-")
    python = root / "bin" / "python"
    with once(factory, "otava-venv"):
        if not (root / DONE).is_file():
            shutil.rmtree(root, ignore_errors=True)
            for argv in ([sys.executable, "-m", "venv", str(root)],
                         [str(python), "-m", "pip", "install", "--quiet",
                          "--disable-pip-version-check", pin]):
                proc = subprocess.run(argv, capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    _unavailable(f"{' '.join(argv)}: {proc.stderr[-1500:]}")
            (root / DONE).touch()
    return python


def otava_change_points(python: Path, series: list[list[float]]) -> list[list[int]]:
    """Each series' change points as otava finds them: the index of the first point after
    each step."""
    proc = subprocess.run([str(python), "-c", ANALYZE], input=json.dumps(series),
                          capture_output=True, text=True, check=True)
    found: list[list[int]] = json.loads(proc.stdout)
    return found

"""mypy over runner/ and scripts/ at the strictness pyproject.toml's [tool.mypy] sets (mypy's
default rules plus `check_untyped_defs`; packages without type information, and the model libraries
called at the runner's edges, are Any): a type error anywhere in the library or the scripts
around it (benchmarks, measurements, the conformance harness; most run in no test) fails the
suite, with mypy's own messages."""

import re
import subprocess
import sys

import pytest
from repo_support import REPO


@pytest.mark.slow
def test_runner_and_scripts_type_check():
    proc = subprocess.run([sys.executable, "-m", "mypy", "runner", "scripts"], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"mypy found errors:\n{proc.stdout}{proc.stderr}"


def test_pre_commit_runs_the_pinned_ruff_and_mypy_this_suite_runs():
    """.pre-commit-config.yaml's ruff is the `[dev]` pin, and so is the mypy installed here
    (the hook runs the project environment's own mypy, the one the test above runs)."""
    from importlib.metadata import version

    import yaml

    text = (REPO / "pyproject.toml").read_text()
    pins = dict(re.findall(r'"(ruff|mypy)==([^"]+)"', text))
    hooks = {h["id"]: (repo["repo"], repo.get("rev"), h)
             for repo in yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())["repos"]
             for h in repo["hooks"]}
    assert hooks["ruff"][:2] == ("https://github.com/astral-sh/ruff-pre-commit",
                                 f"v{pins['ruff']}")
    assert hooks["mypy"][2]["entry"] == "python3 -m mypy runner scripts"  # the command above
    assert version("ruff") == pins["ruff"] and version("mypy") == pins["mypy"]

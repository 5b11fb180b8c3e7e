"""The library surface: every ```python example of docs/python.md runs, in order, in one
fresh directory, and prints what it says; each package's `__all__` names what it has; and
importing a package imports none of the modules behind its entry points (`runner --help`
stays as fast)."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runner.base.paths import cache_dir

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "python.md"
FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
LAZY_PACKAGES = ("runner.bench", "runner.bisect", "runner.history", "runner.loadgen")


def examples() -> list[str]:
    return FENCE.findall(PAGE.read_text(encoding="utf-8"))


def packages() -> list[str]:
    """Every package of runner/ (runner/assets/ is package data)."""
    return sorted(".".join(p.parent.relative_to(REPO).parts)
                  for p in (REPO / "runner").rglob("__init__.py")
                  if "assets" not in p.relative_to(REPO).parts)


@pytest.mark.slow
def test_every_python_example_of_the_page_runs(tmp_path):
    found = examples()
    assert len(found) >= 5, "docs/python.md lost its examples"
    env = dict(os.environ, PYTHONPATH=str(REPO), RUNNER_PROGRESS="off",
               RUNNER_RESULTS_URL=str(tmp_path / "results.sqlite"),
               RUNNER_CACHE_DIR=str(cache_dir()))
    for number, code in enumerate(found, 1):
        done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        where = f"docs/python.md example {number}:\n{code}\n{done.stderr[-3000:]}"
        assert done.returncode == 0, where
        assert done.stdout.strip(), where
        if "exit code" in code:
            assert "exit code: 0" in done.stdout, where + done.stdout[-2000:]
    assert (tmp_path / "runs" / "first" / "summary.md").is_file()
    assert (tmp_path / "results.db").is_file()


def test_each_package_all_names_its_modules_and_entry_points():
    for name in packages():
        package = importlib.import_module(name)
        offered = getattr(package, "__all__", None)
        assert offered is not None, f"{name}: no __all__"
        folder = REPO.joinpath(*name.split("."))
        for item in offered:
            if (folder / f"{item}.py").is_file() or (folder / item / "__init__.py").is_file():
                continue
            assert getattr(package, item, None) is not None, f"{name}.{item}"


def test_importing_a_package_leaves_its_entry_modules_unimported():
    entries = {}
    for name in LAZY_PACKAGES:
        tree = ast.parse(REPO.joinpath(*name.split("."), "__init__.py").read_text())
        table = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == "_ENTRIES"
                             for t in n.targets))
        entries[name] = sorted({f"{name}.{m}" for m in ast.literal_eval(table).values()})
    modules = [m for found in entries.values() for m in found]
    code = (f"import sys\nimport {', '.join(LAZY_PACKAGES)}\n"
            f"print(sorted(m for m in {modules!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), check=True)
    assert done.stdout.strip() == "[]"


def test_a_lazy_name_that_is_not_there_is_an_attribute_error():
    import runner.bench

    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = runner.bench.nothing  # type: ignore[attr-defined]

"""The library surface: every ```python example of docs/python.md runs, in order, in one
fresh directory, and prints what it says; each package's `__all__` names what it has; and
importing a package imports none of the modules behind its entry points (`runner --help`
stays as fast)."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from host_support import host_build_tree

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
    for tree in ("iree-build-good", "iree-build-bad"):  # the bisect example's two builds
        host_build_tree(tmp_path / tree)
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
    bisected = json.loads((tmp_path / "runs" / "bisect" / "bisect.json").read_text())
    assert bisected["answer"]["first_bad"] == f"build-dir:{tmp_path / 'iree-build-bad'}"
    assert (tmp_path / "runs" / "bisect" / "reproduce.sh").is_file()


ENTRIES = ("runner.lifecycle.run_profile", "runner.validate.validate", "runner.bench.run_bench",
           "runner.loadgen.mlperf", "runner.bisect.bisect", "runner.history.open_store")


def test_each_workflow_entry_says_its_arguments_and_what_it_returns():
    """The page's table, one function per workflow: each is there, in the table, and its
    Google-style docstring names every parameter under Args and has a Returns section."""
    page = PAGE.read_text(encoding="utf-8")
    for dotted in ENTRIES:
        module, _, name = dotted.rpartition(".")
        function = getattr(importlib.import_module(module), name)
        assert f"`{dotted}(" in page, f"{dotted}: not in docs/python.md's table"
        doc = inspect.getdoc(function) or ""
        assert "Args:" in doc and "Returns:" in doc, f"{dotted}: no Args/Returns"
        args = doc.split("Args:")[1].split("Returns:")[0]
        named = set(re.findall(r"^    (\w+)(?: \(.*\))?:", args, re.M))
        missing = [p for p in inspect.signature(function).parameters if p not in named]
        assert missing == [], f"{dotted}: Args does not name {missing}"
        assert doc.split("Returns:")[1].strip(), f"{dotted}: Returns says nothing"


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


def test_bisect_from_plain_arguments_dry_run_writes_nothing(tmp_path, capsys):
    """`runner.bisect.bisect` checks the builds and lists them from its arguments, as
    `runner bisect --dry-run` does, and writes nothing (the profile file included)."""
    from runner.base.errors import BadInput
    from runner.bisect import bisect

    good, bad = host_build_tree(tmp_path / "good"), host_build_tree(tmp_path / "bad")
    out = tmp_path / "runs" / "bisect"
    state = bisect(f"build-dir:{good}", f"build-dir:{bad}", profile="cpu", out=out,
                   test="script:true", count=2, dry_run=True)
    assert "answer" not in state and not out.exists()
    printed = capsys.readouterr().out
    assert f"0  build-dir:{good} (good)" in printed and f"1  build-dir:{bad} (bad)" in printed
    with pytest.raises(BadInput, match="not a directory"):
        bisect(f"build-dir:{tmp_path / 'none'}", f"build-dir:{bad}", profile="cpu", out=out,
               dry_run=True)

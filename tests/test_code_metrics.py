"""The package's long functions can only get fewer: scripts/code_metrics.py counts them, and
these limits are the counts reached (lower a limit when a split brings its count down)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from script_support import SCRIPTS

OVER_50_LIMIT = 14  # functions over 50 lines in runner/, as reached (46 before)
# A function over 100 lines is one no reader holds at once: none is allowed.
OVER_100_LIMIT = 0


def metrics(package: Path | None = None) -> dict:
    argv = [sys.executable, str(SCRIPTS / "code_metrics.py")]
    argv += [str(package)] if package is not None else []
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_long_functions_stay_within_the_counts_reached():
    found = metrics()
    named = json.dumps(found["functions_over_50"], indent=1)
    assert found["over_100"] <= OVER_100_LIMIT, named
    assert found["over_50"] <= OVER_50_LIMIT, named
    assert found["public_top_level_names"] > 0 and found["modules_with_all"] >= 0


def test_counts_lines_of_functions_and_methods_and_leaves_out_package_data(tmp_path):
    package = tmp_path / "pkg"
    (package / "assets").mkdir(parents=True)
    body = "".join(f"    x{i} = {i}\n" for i in range(50))
    (package / "mod.py").write_text(
        "__all__ = ['long']\n\n"
        f"def long():\n{body}\n"  # 51 lines: def, 50 assignments
        f"def short():\n{body[:-len('    x49 = 49') - 1]}\n"  # 50 lines: not over 50
        f"class _C:\n    def method(self):\n{body.replace('    ', '        ')}"
        f"        def inner():\n{body.replace('    ', '            ')}")
    (package / "assets" / "data.py").write_text(f"def ignored():\n{body}")
    found = metrics(package)
    assert found["functions_over_50"] == {"pkg.mod:_C.method": 102, "pkg.mod:_C.method.inner": 51,
                                          "pkg.mod:long": 51}
    assert (found["over_50"], found["over_100"]) == (3, 1)
    assert found["public_top_level_names"] == 2  # long, short (not __all__, not _C)
    assert found["modules_with_all_names"] == ["pkg.mod"]


def test_the_before_and_after_table_measures_a_revision_and_this_checkout():
    """docs/CONTRIBUTING.md's table: a revision's runner/ (git archive) beside this one."""
    done = subprocess.run([sys.executable, str(SCRIPTS / "code_metrics.py"), "--compare",
                           "HEAD"], capture_output=True, text=True, check=True)
    rows = done.stdout.splitlines()
    assert rows[0] == "| | before (HEAD) | after |" and len(rows) == 8
    over_100 = next(r for r in rows if r.startswith("| functions over 100 lines |"))
    assert over_100.split("|")[3].strip() == "0"

"""One concept, one place: no public name is defined in two runner modules.

Two `ToolFailed`s (one a RuntimeError, one a RunnerError), three `parse_nvidia_smi`s
reading three different queries, two `TensorSpec`s with different fields: a reader who
finds one cannot tell which the code at hand means, and a caller that imports the wrong
one catches nothing. So each public top-level name (a class, a function, an UPPER_CASE
constant; not one starting with `_`) is defined once in `runner/`: a second module that
needs the concept imports it, and a different concept gets a name saying what it is.

The walk (scripts/code_metrics.py, which counts these for docs/CONTRIBUTING.md's table) is
made with `ast` over every file, so it sees modules no test imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

from script_support import load_script

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "runner"

code_metrics = load_script("code_metrics")


def test_the_walk_sees_definitions_and_leaves_imports_out():
    tree = ast.parse("from x import A\nB, C = 1, 2\nD: int = 3\nlow = 4\n_E = 5\n"
                     "T = TypeVar('T')\nclass F: ...\ndef g(): ...\ndef main(): ...\n")
    assert code_metrics.public_names(tree) == ["B", "C", "D", "F", "g"]


def test_no_public_name_is_defined_in_two_modules():
    twice = {name: paths for name, paths in code_metrics.definitions(PACKAGE).items()
             if len(paths) > 1}
    assert twice == {}, "\n".join(f"{name}: {', '.join(paths)}"
                                  for name, paths in sorted(twice.items()))

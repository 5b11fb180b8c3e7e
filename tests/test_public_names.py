"""One concept, one place: no public name is defined in two runner modules.

Two `ToolFailed`s (one a RuntimeError, one a RunnerError), three `parse_nvidia_smi`s
reading three different queries, two `TensorSpec`s with different fields: a reader who
finds one cannot tell which the code at hand means, and a caller that imports the wrong
one catches nothing. So each public top-level name (a class, a function, an UPPER_CASE
constant; not one starting with `_`) is defined once in `runner/`: a second module that
needs the concept imports it, and a different concept gets a name saying what it is.

The walk is made with `ast` over every file, so it sees modules no test imports.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "runner"

# Names every module of a kind defines because its caller reaches them by that name, through
# the module: one protocol, not one concept each.
PROTOCOL = {
    "main",  # a module's `python3 -m runner.x` entry point
    "register",  # each command package's hook that adds its subcommands to the parser
    "upgrade", "downgrade",  # an Alembic migration's two steps (history/migrations/)
    # A command's report module renders its own results in the same formats, each called as
    # `<command>.report.markdown(...)`: bench, goldens, history, loadgen, report.
    "markdown", "html", "junit_xml", "write_reports",
    "scheduler",  # an exportable model module's (sdxl_model, tiny_model) denoising scheduler
}

def _is_typevar(value: ast.expr | None) -> bool:
    """`T = TypeVar("T")`: a function's type parameter, local in meaning to its module."""
    return (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id == "TypeVar")


def public_names(tree: ast.Module) -> list[str]:
    """The public names a module's top level defines (not the ones it imports)."""
    names = []
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and not _is_typevar(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                elements = target.elts if isinstance(target, ast.Tuple) else [target]
                names.extend(e.id for e in elements
                             if isinstance(e, ast.Name) and e.id.isupper())
    return [n for n in names if not n.startswith("_") and n not in PROTOCOL]


def definitions() -> dict[str, list[str]]:
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        if "assets" in path.relative_to(PACKAGE).parts:
            continue  # assets/: package data run inside an image, not the library
        for name in set(public_names(ast.parse(path.read_text()))):
            where[name].append(str(path.relative_to(ROOT)))
    return where


def test_the_walk_sees_definitions_and_leaves_imports_out():
    tree = ast.parse("from x import A\nB, C = 1, 2\nD: int = 3\nlow = 4\n_E = 5\n"
                     "T = TypeVar('T')\nclass F: ...\ndef g(): ...\ndef main(): ...\n")
    assert public_names(tree) == ["B", "C", "D", "F", "g"]


def test_no_public_name_is_defined_in_two_modules():
    twice = {name: paths for name, paths in definitions().items() if len(paths) > 1}
    assert twice == {}, "\n".join(f"{name}: {', '.join(paths)}"
                                  for name, paths in sorted(twice.items()))

"""The package's size metrics, as JSON: long functions, public top-level names, `__all__`.

Read from the source with `ast` (nothing is imported), so any checkout can be measured; the
suite holds the counts to what has been reached (tests/test_code_metrics.py), so they can
only go down. A function's length is `end_lineno - lineno + 1`, decorators not counted;
nested functions and methods are counted on their own, and inside their enclosing one.

    python scripts/code_metrics.py             # runner/ of this checkout
    python scripts/code_metrics.py PACKAGE_DIR
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LONG = 50  # lines: a function over this is long
TOO_LONG = 100  # lines: a function over this is refused (tests/test_code_metrics.py)
EXCLUDED = ("assets",)  # package data (runner/assets/), not the library


def modules(package: Path) -> Iterator[Path]:
    """The package's Python files, package data left out."""
    for path in sorted(package.rglob("*.py")):
        if not set(EXCLUDED) & set(path.relative_to(package).parts):
            yield path


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """Every function and method under `tree`: its dotted name and its length in lines."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.end_lineno is not None
            yield f"{prefix}{node.name}", node.end_lineno - node.lineno + 1
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")
        else:
            yield from functions(node, prefix)


def top_level_names(tree: ast.Module) -> Iterator[str]:
    """The names a module's own statements bind at top level (imports not counted)."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                yield from (n.id for n in ast.walk(target) if isinstance(n, ast.Name))


def has_all(tree: ast.Module) -> bool:
    return "__all__" in top_level_names(tree)


def measure(package: Path) -> dict[str, object]:
    """The counts, with the long functions named (longest first) as `module:qualname`."""
    lengths: list[tuple[int, str]] = []
    public = 0
    with_all: list[str] = []
    for path in modules(package):
        tree = ast.parse(path.read_text(), str(path))
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        lengths += [(n, f"{module}:{name}") for name, n in functions(tree)]
        public += sum(not name.startswith("_") for name in top_level_names(tree))
        if has_all(tree):
            with_all.append(module)
    lengths.sort(key=lambda item: (-item[0], item[1]))
    long = {name: n for n, name in lengths if n > LONG}
    too_long = {name: n for name, n in long.items() if n > TOO_LONG}
    return {"over_50": len(long), "over_100": len(too_long), "functions_over_50": long,
            "functions_over_100": too_long, "public_top_level_names": public,
            "modules_with_all": len(with_all), "modules_with_all_names": with_all}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", nargs="?", type=Path, default=REPO / "runner")
    args = parser.parse_args(argv)
    json.dump(measure(args.package), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

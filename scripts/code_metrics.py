"""The package's size metrics, as JSON: long functions, public top-level names, `__all__`,
names defined in more than one module, CLI modules loose at the package's top.

Read from the source with `ast` (nothing is imported), so any checkout can be measured; the
suite holds the counts to what has been reached (tests/test_code_metrics.py), so they can
only go down. A function's length is `end_lineno - lineno + 1`, decorators not counted;
nested functions and methods are counted on their own, and inside their enclosing one.

    python scripts/code_metrics.py             # runner/ of this checkout
    python scripts/code_metrics.py PACKAGE_DIR
    python scripts/code_metrics.py --compare REV   # a Markdown table: REV's runner/ and this
                                                   # one's

The table is docs/CONTRIBUTING.md's "Before and after" (its rows as the script prints them).
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tarfile
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LONG = 50  # lines: a function over this is long
TOO_LONG = 100  # lines: a function over this is refused (tests/test_code_metrics.py)
EXCLUDED = ("assets",)  # package data (runner/assets/), not the library
# Names every module of a kind defines because its caller reaches them by that name, through
# the module: one protocol, not one concept each (tests/test_public_names.py).
PROTOCOL = {
    "main",  # a module's `python3 -m runner.x` entry point
    "register",  # each command package's hook that adds its subcommands to the parser
    "upgrade", "downgrade",  # an Alembic migration's two steps (history/migrations/)
    # A command's report module renders its own results in the same formats, each called as
    # `<command>.report.markdown(...)`: bench, goldens, history, loadgen, report.
    "markdown", "html", "junit_xml", "write_reports",
    "scheduler",  # an exportable model module's (sdxl_model, tiny_model) denoising scheduler
}


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


def _is_typevar(value: ast.expr | None) -> bool:
    """`T = TypeVar("T")`: a function's type parameter, local in meaning to its module."""
    return (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id == "TypeVar")


def public_names(tree: ast.Module) -> list[str]:
    """The public names a module's top level defines as concepts of its own: classes,
    functions, UPPER_CASE constants (not imports, not `_` names, not PROTOCOL's)."""
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


def definitions(package: Path) -> dict[str, list[str]]:
    """Each public name and the modules (paths from the package's parent) that define it."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in modules(package):
        for name in sorted(set(public_names(ast.parse(path.read_text(), str(path))))):
            where[name].append(str(path.relative_to(package.parent)))
    return dict(where)


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
    twice = sorted(name for name, paths in definitions(package).items() if len(paths) > 1)
    loose = sorted(p.name for p in package.glob("cli*.py"))
    return {"over_50": len(long), "over_100": len(too_long), "functions_over_50": long,
            "functions_over_100": too_long, "public_top_level_names": public,
            "modules_with_all": len(with_all), "modules_with_all_names": with_all,
            "defined_twice": len(twice), "defined_twice_names": twice,
            "loose_cli_modules": loose}


ROWS = (("functions over 50 lines", "over_50"), ("functions over 100 lines", "over_100"),
        ("public names defined in two or more modules", "defined_twice"),
        ("CLI modules loose at the top of runner/", "loose_cli_modules"),
        ("modules with `__all__`", "modules_with_all"),
        ("public top-level names", "public_top_level_names"))


def at_revision(rev: str, into: Path) -> Path:
    """`rev`'s runner/ written under `into` (git archive)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev, "runner"],
                             capture_output=True, check=True)
    tar = into / "rev.tar"
    tar.write_bytes(archive.stdout)
    with tarfile.open(tar) as f:
        f.extractall(into, filter="data")
    return into


def compare(rev: str) -> str:
    """The Markdown table of `rev` against this checkout."""
    with tempfile.TemporaryDirectory() as tmp:
        before = measure(at_revision(rev, Path(tmp)) / "runner")
    after = measure(REPO / "runner")

    def shown(value: object) -> str:
        return str(len(value)) if isinstance(value, list) else str(value)

    lines = [f"| | before ({rev}) | after |", "| --- | --- | --- |"]
    lines += [f"| {label} | {shown(before[key])} | {shown(after[key])} |" for label, key in ROWS]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", nargs="?", type=Path, default=REPO / "runner")
    parser.add_argument("--compare", metavar="REV",
                        help="print the Markdown table of REV's runner/ against this one")
    args = parser.parse_args(argv)
    if args.compare:
        print(compare(args.compare))
        return 0
    json.dump(measure(args.package), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

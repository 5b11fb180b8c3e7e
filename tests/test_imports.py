"""No import cycles between runner modules.

The rule: the graph of *top-level* imports between modules of the `runner` package has no
cycle. A top-level import is one executed when the module is imported: statements at module
level, including inside module-level `if`/`try` blocks, but not inside functions or classes'
methods, and not under `if TYPE_CHECKING:` (never executed). Function-local imports are
excluded on purpose: they run when called, after every module is loaded, and are how a
light module (the CLI, `runner status`) defers a heavy one; they cannot deadlock or
half-initialize a module. An edge goes to the imported module itself, so
`from runner.batch import run` depends on `runner.batch.run`, and every import of a submodule
also depends on its package `__init__` (Python runs it first).

The graph is built from the source with `ast`, so the test sees every module, including
ones no test happens to import.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "runner"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Import statements executed at import time (see the module docstring)."""
    out: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, ast.If):
            stack += node.orelse if _is_type_checking(node.test) else [*node.body, *node.orelse]
        elif isinstance(node, ast.Try):
            stack += [*node.body, *node.orelse, *node.finalbody,
                      *[s for h in node.handlers for s in h.body]]
        elif isinstance(node, (ast.With, ast.For, ast.While)):
            stack += [*node.body, *getattr(node, "orelse", [])]
    return out


def _with_packages(name: str, modules: dict[str, Path]) -> set[str]:
    """The module and the packages Python initializes before it."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & modules.keys()


def dependencies(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    deps: set[str] = set()
    for node in top_level_imports(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for target in targets:
            if target in modules:
                deps |= _with_packages(target, modules)
    deps.discard(name)
    # A package's own __init__ runs before its submodules: not a dependency back on it.
    return {d for d in deps if not name.startswith(d + ".")}


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {name: dependencies(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_in(c, graph) for c in components]


def _cycle_in(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A concrete path a -> b -> ... -> a inside a strongly connected component."""
    members = set(component)
    start = component[0]
    path, seen = [start], {start}
    while True:
        nxt = sorted(graph[path[-1]] & members)
        back = [n for n in nxt if n == start]
        if back and len(path) > 1:
            return [*path, start]
        step = next((n for n in nxt if n not in seen), None)
        if step is None:  # every way on was seen: close the loop where it meets the path
            loop_at = next(n for n in nxt if n in seen)
            return [*path[path.index(loop_at):], loop_at]
        path.append(step)
        seen.add(step)


def test_no_import_cycle_between_runner_modules():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles (top-level imports):\n" + "\n".join(
        " -> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle():
    """The check itself can fail: a two-module and a three-module cycle are reported."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    cycles = find_cycles(graph)
    assert sorted(len(c) for c in cycles) == [3, 4]
    for cycle in cycles:
        assert cycle[0] == cycle[-1]
        assert all(b in graph[a] for a, b in itertools.pairwise(cycle))


def test_type_checking_and_function_imports_are_not_edges():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\n"
                     "def f():\n    import y\ntry:\n    import z\nexcept ImportError:\n"
                     "    import w\n")
    names = sorted(a.name for n in top_level_imports(tree) if isinstance(n, ast.Import)
                   for a in n.names)
    assert names == ["w", "z"]


def test_executors_and_in_image_do_not_import_each_other():
    graph = import_graph()
    assert "runner.docker.in_image" not in graph["runner.batch.executors"]
    assert "runner.batch.executors" not in graph["runner.docker.in_image"]
    for name, other in (("batch/executors.py", "runner.docker"),
                        ("docker/in_image.py", "runner.batch")):
        source = (PACKAGE / name).read_text()
        assert other not in source, f"{name} mentions {other} (even a local import counts)"

"""The code's layers, and no import cycle between runner modules.

`runner/` is layered as its data flows (docs/CONTRIBUTING.md draws the map): the shared
`base`, the one input boundary `inputs`, `config` (profiles, layouts, the model a profile
names, and the profile a command's flags ask for), the `model` (compiled and run), the
`rundir` (a run's files, manifest, sample store, accuracy log), then `docker`, `batch`,
`accuracy`, `report`, the `preflight` a run passes before its first batch, the `lifecycle`
that orchestrates a run, and the workflows built on it; the CLI sits on top: the
`runner/cli/` package (the parser, its grammar, the --out rule, the reference page) and
each package's `cli.py`, which registers that package's commands. A module may import its
own package or a lower layer, never a higher one, so nothing below the CLI knows a flag's
spelling from the grammar (runner/batch/cluster.py holds the Slurm options' flags; the
CLI's grammar defines them).

Every import counts: at module level, inside functions (a deferred import still makes the
lower module know the higher one) and under `if TYPE_CHECKING:` (a type from a higher layer
is a dependency on it). An edge goes to the imported module itself, so
`from runner.batch import run` depends on `runner.batch.run`, and every import of a
submodule also depends on its package `__init__` (Python runs it first).

The graph is built from the source with `ast`, so the test sees every module, including
ones no test happens to import.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "runner"

# Lowest first. A package's modules share its layer; `runner.cli.*` and `*.cli` modules
# are the CLI layer.
LAYERS = ("base", "inputs", "config", "model", "rundir", "docker", "batch", "accuracy",
          "report", "preflight", "lifecycle", "goldens", "loadgen", "bench", "bisect",
          "validate", "gpucheck", "history", "nightly", "cli")
CLI_LAYER = {"runner.__main__"}  # the `runner` console script: the CLI's entry point


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    """Every module of the library; runner/assets/ is package data (the harness image's
    verify_iree.py among it), not modules."""
    return {module_name(p): p for p in PACKAGE.rglob("*.py")
            if p.relative_to(PACKAGE).parts[0] != "assets"}


def every_import(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, wherever it stands (see the module docstring)."""
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def layer_of(name: str) -> int:
    """The index in LAYERS of module `name` (`runner.x.y`)."""
    if name in CLI_LAYER or name.rsplit(".", 1)[-1] == "cli":
        return LAYERS.index("cli")
    part = name.split(".")[1]
    if part not in LAYERS:
        raise AssertionError(f"{name}: place `{part}` in LAYERS (tests/test_imports.py) and "
                             "in docs/CONTRIBUTING.md's map of the code")
    return LAYERS.index(part)


def _with_packages(name: str, modules: dict[str, Path]) -> set[str]:
    """The module and the packages Python initializes before it."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & modules.keys()


def dependencies(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    deps: set[str] = set()
    for node in every_import(tree):
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


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """`a -> b` for every import of a higher layer's module."""
    return [f"{a} ({LAYERS[layer_of(a)]}) -> {b} ({LAYERS[layer_of(b)]})"
            for a in sorted(graph) for b in sorted(graph[a])
            if b != "runner" and a != "runner" and layer_of(b) > layer_of(a)]


def test_no_import_cycle_between_runner_modules():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_module_imports_a_higher_layer():
    upward = upward_imports(import_graph())
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_every_top_level_module_and_package_has_a_layer():
    for name in all_modules().keys() - {"runner"}:
        layer_of(name)  # raises naming the missing layer


def test_the_layer_check_finds_an_upward_import():
    """The check itself can fail: config importing the model, a deferred import included."""
    graph = {"runner.config.profile": {"runner.model.compile"},
             "runner.model.compile": {"runner.base.errors"},
             "runner.accuracy.cli": {"runner.lifecycle"}}
    assert upward_imports(graph) == [
        "runner.config.profile (config) -> runner.model.compile (model)"]
    tree = ast.parse("def f():\n    import runner.x\nif TYPE_CHECKING:\n    import runner.y\n")
    assert sorted(a.name for n in every_import(tree) for a in n.names) == ["runner.x",
                                                                         "runner.y"]


def test_the_cycle_finder_finds_a_cycle():
    """The check itself can fail: a two-module and a three-module cycle are reported."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    cycles = find_cycles(graph)
    assert sorted(len(c) for c in cycles) == [3, 4]
    for cycle in cycles:
        assert cycle[0] == cycle[-1]
        assert all(b in graph[a] for a, b in itertools.pairwise(cycle))


def test_executors_and_in_image_do_not_import_each_other():
    graph = import_graph()
    assert "runner.docker.in_image" not in graph["runner.batch.executors"]
    assert "runner.batch.executors" not in graph["runner.docker.in_image"]
    for name, other in (("batch/executors.py", "runner.docker"),
                        ("docker/in_image.py", "runner.batch")):
        source = (PACKAGE / name).read_text()
        assert other not in source, f"{name} mentions {other} (even a local import counts)"

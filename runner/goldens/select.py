"""Which golden tests run: pytest's `-m` marker and `-k` keyword expressions, the
environment variables IREE CI's runners read, and `--model/--submodel/--backend`.

IREE CI's torch_models suite selects with pytest markers (`-m "hip and gfx942"`,
`-m "quick or compstat"`); each test's markers are its file's `markers` plus its `type`.
The older sharktank runners read `BACKEND` (which files run), `ROCM_CHIP` (what the
compiler targets) and `SKU` (which tuner file and benchmark goldens apply) from the
environment. Here a flag wins over its environment variable, and an explicitly chosen chip or
SKU also leaves out torch-layout tests marked for another one (a `gfx950` runner does not
run the `gfx942` files), the way a CI job picks its files with `-m`.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from runner.base.errors import BadInput, RunnerError
from runner.inputs.expression import check_expression

ENV_BACKEND, ENV_ROCM_CHIP, ENV_SKU = "BACKEND", "ROCM_CHIP", "SKU"
_CHIP_MARKER = re.compile(r"^gfx[0-9a-z]+$")
_SKU_MARKER = re.compile(r"^mi[0-9]+[a-z]*$")
_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")


class Expression:
    """pytest's `-m`/`-k` grammar: names joined by `and`, `or`, `not` and parentheses."""

    def __init__(self, text: str, where: str):
        self.text, self.where = text, where
        self._tokens = [t for t in _TOKEN.findall(text)]
        check_expression(text, self._tokens, where)  # bounded before the recursive parse
        self._pos = 0
        if not self._tokens:
            raise BadInput("empty expression", where=where, fix="e.g. \"hip and gfx942\"")
        self._tree = self._or()
        if self._pos != len(self._tokens):
            raise self._error(f"unexpected {self._tokens[self._pos]!r}")

    def _error(self, message: str) -> RunnerError:
        return RunnerError(f"cannot read {self.text!r}: {message}", where=self.where,
                           fix='write names joined by and/or/not, e.g. "cpu and not compstat"')

    def _peek(self) -> str | None:
        return self._tokens[self._pos] if self._pos < len(self._tokens) else None

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            raise self._error("it ends too early")
        self._pos += 1
        return token

    def _or(self) -> tuple:
        return self._chain("or", self._and)

    def _and(self) -> tuple:
        return self._chain("and", self._not)

    def _chain(self, op: str, operand: Callable[[], tuple]) -> tuple:
        """`operand (op operand)*`, grouped from the left: `or` and `and` are parsed alike,
        each over the next tighter level (which is what makes `and` bind tighter)."""
        node = operand()
        while self._peek() == op:
            self._take()
            node = (op, node, operand())
        return node

    def _not(self) -> tuple:
        token = self._take()
        if token == "not":
            return ("not", self._not())
        if token == "(":
            node = self._or()
            if self._take() != ")":
                raise self._error("a `(` is not closed")
            return node
        if token in ("and", "or", ")"):
            raise self._error(f"{token!r} where a name should be")
        return ("name", token)

    def names(self) -> set[str]:
        return {t for t in self._tokens if t not in ("and", "or", "not", "(", ")")}

    def matches(self, has: Callable[[str], bool]) -> bool:
        def walk(node: tuple) -> bool:
            op = node[0]
            if op == "name":
                return has(node[1])
            if op == "not":
                return not walk(node[1])
            left, right = walk(node[1]), walk(node[2])
            return left and right if op == "and" else left or right
        return walk(self._tree)


class Selectable(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def backend(self) -> str: ...

    @property
    def markers(self) -> tuple[str, ...]: ...


T = TypeVar("T", bound=Selectable)


@dataclass(frozen=True)
class Selection:
    """What to keep. `rocm_chip`/`sku` are set only when chosen explicitly (a flag or the
    environment), so the defaults never hide a file."""

    model: str | None = None
    submodel: str = "*"
    backend: str | None = None
    marker: Expression | None = None
    keyword: Expression | None = None
    rocm_chip: str | None = None
    sku: str | None = None

    def platform_ok(self, test: Selectable) -> bool:
        chips, skus = marked_chips(test.markers), marked_skus(test.markers)
        return not (self.rocm_chip and chips and self.rocm_chip not in chips) and \
            not (self.sku and skus and self.sku not in skus)

    def accepts(self, test: Selectable, submodel: str) -> bool:
        if not (fnmatch.fnmatchcase(submodel, self.submodel)
                or fnmatch.fnmatchcase(f"{submodel}_{test.backend}", self.submodel)):
            return False
        if self.backend and test.backend != self.backend:
            return False
        if self.marker and not self.marker.matches(set(test.markers).__contains__):
            return False
        name = test.name.lower()
        if self.keyword and not self.keyword.matches(lambda word: word.lower() in name):
            return False
        return self.platform_ok(test)

    def describe(self) -> str:
        parts = [f"{k} {v}" for k, v in (("backend", self.backend),
                                          ("ROCm chip", self.rocm_chip), ("SKU", self.sku)) if v]
        parts += [f"{e.where} {e.text!r}" for e in (self.marker, self.keyword) if e]
        if self.submodel != "*":
            parts.append(f"--submodel {self.submodel}")
        return ", ".join(parts) or "everything"


def marked_chips(markers: Iterable[str]) -> list[str]:
    """The ROCm chips (`gfx942`) among a test's markers."""
    return [m for m in markers if _CHIP_MARKER.match(m)]


def marked_skus(markers: Iterable[str]) -> list[str]:
    """The SKUs (`mi325`) among a test's markers."""
    return [m for m in markers if _SKU_MARKER.match(m)]


def from_env(flag: str | None, variable: str) -> tuple[str | None, str]:
    """A flag's value, else its environment variable's; with where it came from."""
    if flag is not None:
        return flag, "flag"
    value = os.environ.get(variable, "").strip()
    return (value or None), f"${variable}"


def backend_name(value: str | None, where: str) -> str | None:
    """`BACKEND`/`--backend` as IREE CI spells it: cpu, rocm (or hip)."""
    if value is None:
        return None
    backend = {"hip": "rocm"}.get(value.lower(), value.lower())
    if backend not in ("cpu", "rocm"):
        raise BadInput(f"unknown backend {value!r}", where=where,
                       fix="use cpu or rocm (hip)")
    return backend


def select(tests: Iterable[tuple[T, str]], selection: Selection, where: Iterable[Path]
           ) -> list[T]:
    """The tests `selection` keeps (each given with its submodel); none kept is an error
    that says which choice excluded them and what the files offer."""
    tests = list(tests)
    kept = [t for t, sub in tests if selection.accepts(t, sub)]
    if kept:
        return kept
    places = ", ".join(str(p) for p in where)
    if not tests:
        raise BadInput("no tests here", where=places,
                       fix="point at IREE CI test JSON files or their directory")
    markers = sorted({m for t, _ in tests for m in t.markers})
    if selection.marker is not None:
        unknown = sorted(selection.marker.names() - set(markers))
        raise BadInput(
            f"no test has markers matching {selection.marker.text!r}"
            + (f" ({', '.join(unknown)}: no test has it)" if unknown else ""),
            where=f"{selection.marker.where} ({places})",
            fix=f"the tests here have markers: {', '.join(markers)}")
    if selection.keyword is not None:
        raise BadInput(f"no test name matches {selection.keyword.text!r}",
                       where=f"{selection.keyword.where} ({places})",
                       fix="names here: " + ", ".join(sorted(t.name for t, _ in tests)))
    raise BadInput(f"no test matches the selection ({selection.describe()})", where=places,
                   fix="check --model, --submodel, --backend, --rocm-chip, --sku (or "
                   f"BACKEND, ROCM_CHIP, SKU); markers here: {', '.join(markers)}")

"""`iree-run-module`'s expected-output comparison, re-done in numpy so a failure says where.

`iree-run-module --expected_output` (IREE 3.12+) passes an element when
`|actual - expected| <= atol + rtol * |expected|`, with atol per element type
(`--expected_f16_threshold` 0.001, `f32`/`f64` 0.0001, `bf16` 0.01), rtol
(`--expected_rtol`) 1e-5 shared by float types, NaN equal to NaN, and integers compared
exactly; `--equality_mode=exact` compares bytes. Older runtimes had no rtol: pass
`--expected_rtol=0` in `threshold_args` to reproduce them. Unlike the tool, this reports
max_abs, mean_abs, max_rel and the worst elements, and accepts expected outputs that
cover only the first k results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from runner.base.errors import BadInput
from runner.model.tensors import TensorSpec

DEFAULT_ATOL = {"f16": 1e-3, "f32": 1e-4, "f64": 1e-4, "bf16": 1e-2}
DEFAULT_RTOL = 1e-5
# |expected| below this is treated as zero for max_rel, so noise around 0 cannot dominate.
REL_FLOOR = 1e-6
WORST_ELEMENTS = 5


@dataclass(frozen=True)
class Thresholds:
    atol: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_ATOL))
    rtol: float = DEFAULT_RTOL
    mode: str = "approximate"  # or "exact"
    passthrough: tuple[str, ...] = ()  # other args, handed to iree-run-module unchanged

    @classmethod
    def parse(cls, args: tuple[str, ...] | list[str], where: str = "threshold_args"
              ) -> Thresholds:
        """Reads IREE CI's `threshold_args` (`--expected_f16_threshold=1.0f`, ...)."""
        atol, rtol, mode, rest = dict(DEFAULT_ATOL), DEFAULT_RTOL, "approximate", []
        for arg in args:
            name, eq, value = arg.partition("=")
            key = name.lstrip("-")
            if key.startswith("expected_") and key.endswith("_threshold"):
                dtype = key.removeprefix("expected_").removesuffix("_threshold")
                if dtype not in DEFAULT_ATOL:
                    raise BadInput(f"unknown threshold type {dtype!r} in {arg!r}",
                                   where=where, fix=f"use one of {sorted(DEFAULT_ATOL)}")
                atol[dtype] = _number(value, arg, where)
            elif key == "expected_rtol":
                rtol = _number(value, arg, where)
            elif key == "equality_mode":
                mode = value.strip('"')
                if mode not in ("approximate", "exact"):
                    raise BadInput(f"unknown equality mode in {arg!r}", where=where,
                                   fix="use approximate or exact")
            elif not eq and key.startswith("expected"):
                raise BadInput(f"{arg!r} has no value", where=where,
                               fix=f"write it as {arg}=VALUE")
            else:
                rest.append(arg)
        return cls(atol, rtol, mode, tuple(rest))

    def atol_for(self, dtype: str) -> float | None:
        """None for types compared exactly (integers, i1)."""
        return self.atol.get(dtype) if self.mode == "approximate" else None


def _number(value: str, arg: str, where: str) -> float:
    try:
        number = float(value.strip().rstrip("fF"))
    except ValueError as e:
        raise BadInput(f"cannot read the number in {arg!r}", where=where,
                       fix="write it as --expected_f16_threshold=0.02f or =0.02") from e
    if not math.isfinite(number) or number < 0:
        raise BadInput(f"threshold in {arg!r} must be a finite number >= 0", where=where,
                       fix="e.g. --expected_f32_threshold=0.001")
    return number


@dataclass(frozen=True)
class WorstElement:
    index: tuple[int, ...]
    expected: float
    actual: float
    abs_err: float


@dataclass(frozen=True)
class OutputComparison:
    """One result against its golden. `error` is set when they cannot be compared."""

    index: int
    source: str
    spec: str
    passed: bool
    atol: float | None = None
    rtol: float = 0.0
    max_abs: float = 0.0
    mean_abs: float = 0.0
    max_rel: float = 0.0
    mismatches: int = 0
    elements: int = 0
    worst: tuple[WorstElement, ...] = ()
    error: str | None = None

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("index", "source", "spec", "passed", "atol",
                                             "rtol", "max_abs", "mean_abs", "max_rel",
                                             "mismatches", "elements", "error")}
        out["worst"] = [{"index": list(w.index), "expected": w.expected, "actual": w.actual,
                         "abs_err": w.abs_err} for w in self.worst]
        return out

    def describe(self) -> str:
        if self.error:
            return f"output {self.index} ({self.source}): {self.error}"
        tol = ("exact" if self.atol is None
               else f"atol {self.atol:g} + rtol {self.rtol:g}*|expected|")
        head = (f"output {self.index} ({self.spec}): {self.mismatches}/{self.elements} "
                f"elements over tolerance ({tol}); max_abs {self.max_abs:.6g}, "
                f"mean_abs {self.mean_abs:.6g}, max_rel {self.max_rel:.6g}")
        if not self.worst:
            return head
        rows = "\n".join(f"    at {list(w.index)}: expected {w.expected:.8g}, actual "
                         f"{w.actual:.8g} (|diff| {w.abs_err:.6g})" for w in self.worst)
        return f"{head}\n  worst elements:\n{rows}"


def compare(index: int, source: str, expected: np.ndarray, actual: np.ndarray,
            thresholds: Thresholds, worst: int = WORST_ELEMENTS) -> OutputComparison:
    spec = TensorSpec.of(expected)
    name = str(spec)
    if expected.shape != actual.shape or expected.dtype != actual.dtype:
        return OutputComparison(index, source, name, False, error=(
            f"the module returned {TensorSpec.of(actual)}, the golden is {spec}"))
    n = int(expected.size)
    atol = thresholds.atol_for(spec.dtype)
    if thresholds.mode == "exact":
        width = expected.dtype.itemsize
        eb = np.ascontiguousarray(expected).reshape(-1).view(np.uint8).reshape(n, width)
        ab = np.ascontiguousarray(actual).reshape(-1).view(np.uint8).reshape(n, width)
        bad = (eb != ab).any(axis=1).reshape(expected.shape)
    e = expected.astype(np.float64)
    a = actual.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - e)
        both_nan = np.isnan(e) & np.isnan(a)
        same_inf = np.isinf(e) & (e == a)
        diff = np.where(both_nan | same_inf, 0.0, diff)
        diff = np.where(np.isnan(diff), np.inf, diff)  # NaN against a number: worst possible
        if thresholds.mode != "exact":
            if atol is None:  # integers: exact
                bad = diff != 0
            else:
                scale = np.where(np.isfinite(e), np.abs(e), 0.0)
                bad = diff > atol + thresholds.rtol * scale
        rel = np.where(np.abs(e) >= REL_FLOOR, diff / np.maximum(np.abs(e), REL_FLOOR), 0.0)
    finite = diff[np.isfinite(diff)]
    order = np.argsort(-np.where(bad, diff, -1.0), axis=None, kind="stable")[:worst]
    worst_list = tuple(
        WorstElement(tuple(int(i) for i in np.unravel_index(flat, expected.shape)),
                     float(e.flat[flat]), float(a.flat[flat]), float(diff.flat[flat]))
        for flat in order if bad.flat[flat])
    mismatches = int(np.count_nonzero(bad))
    return OutputComparison(
        index=index, source=source, spec=name, passed=mismatches == 0, atol=atol,
        rtol=thresholds.rtol if atol is not None else 0.0,
        max_abs=float(diff.max()) if n else 0.0,
        mean_abs=float(finite.mean()) if finite.size else (math.inf if n else 0.0),
        max_rel=float(rel.max()) if n else 0.0, mismatches=mismatches, elements=n,
        worst=worst_list)


def stats(expected: np.ndarray, actual: np.ndarray) -> dict[str, float]:
    """max_abs, mean_abs, max_rel of two same-shaped arrays (the per-step table)."""
    e = np.asarray(expected, np.float64)
    a = np.asarray(actual, np.float64)
    diff = np.abs(a - e)
    rel = np.where(np.abs(e) >= REL_FLOOR, diff / np.maximum(np.abs(e), REL_FLOOR), 0.0)
    return {"max_abs": float(diff.max()), "mean_abs": float(diff.mean()),
            "max_rel": float(rel.max())}

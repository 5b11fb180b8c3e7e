"""Goldens from evidence: `runner goldens propose` suggests a benchmark test's
`golden_time_ms` and its tolerance, dispatch count and binary size from the history of
`runner bench goldens` on one SKU, as a diff of the test file with the runs it used and the
headroom it added, so a golden update is reviewed rather than guessed.

The window: the runs from the series' latest build change (changes.detect: a step between
two builds) up to the first machine change after it (a step with the same build on both
sides: the machine, its load or its inputs moved, not IREE), never across one. Runs after a
machine change measure conditions the next ordinary run may not have; runs before the build
change measure another build. At least `min_runs` of them are needed.

- golden_time_ms: the window's median, to 3 significant digits (the statistic each run is
  is the one IREE CI's rule compares: the mean, or the fastest repetition for torch-layout
  files);
- tolerance: the smallest multiplier that keeps the slowest run of the window inside the
  band and 4 robust standard deviations (1.4826 x MAD) above the median, at least
  MIN_TOLERANCE, rounded up to 0.01; with normal noise a good build then fails about 3 times
  in 100,000;
- golden_dispatch and golden_size: the window's largest, with no headroom. IREE CI's runner
  (sharktank_models model_benchmark_run.py) fails when the compile's count or module size is
  above its golden (`<=`), and both are fixed for one build and its flags: headroom would let
  that much regression through.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from runner.base.errors import BadInput
from runner.goldens.testfile import BenchmarkTest, layout
from runner.history.changes import Change, detect
from runner.history.extract import BENCH_GOLDENS_CMD
from runner.history.model import Result
from runner.history.series import Point, Series, series_of

MIN_TOLERANCE = 1.05
SIGMAS = 4.0
MIN_RUNS = 5


@dataclass
class Proposal:
    test: str
    file: Path
    sku: str
    runs: list[Point] = field(default_factory=list)
    golden_time_ms: float | None = None
    tolerance: float | None = None
    dispatch_count: int | None = None
    size_bytes: int | None = None
    notes: list[str] = field(default_factory=list)
    headroom: list[str] = field(default_factory=list)  # how each golden was set, and why
    old_text: str = ""
    new_text: str = ""

    @property
    def changed(self) -> bool:
        return self.old_text != self.new_text

    def diff(self) -> str:
        return "".join(difflib.unified_diff(
            self.old_text.splitlines(keepends=True), self.new_text.splitlines(keepends=True),
            f"a/{self.file.name}", f"b/{self.file.name}"))

    def to_dict(self) -> dict[str, Any]:
        return {"test": self.test, "file": str(self.file), "sku": self.sku,
                "golden_time_ms": self.golden_time_ms, "tolerance": self.tolerance,
                "dispatch_count": self.dispatch_count, "size_bytes": self.size_bytes,
                "notes": self.notes, "headroom": self.headroom, "diff": self.diff(),
                "runs": [{"finished_at": p.when.isoformat() + "Z", "value": p.value,
                          "build": p.build, "machine": p.result.machine,
                          "out_dir": p.result.out_dir} for p in self.runs]}


def _round_up(x: float, step: float = 0.01) -> float:
    return round(math.ceil(x / step - 1e-9) * step, 10)


@dataclass(frozen=True)
class TimeGolden:
    """A time golden and the numbers it came from, printed with the proposal."""
    golden: float
    tolerance: float
    runs: int
    median: float
    fastest: float
    slowest: float
    sigma: float  # 1.4826 x MAD

    def why(self) -> str:
        spread = self.median + SIGMAS * self.sigma
        return (f"golden_time_ms {self.golden:g}: the median of {self.runs} run(s) "
                f"({self.fastest:.4g}..{self.slowest:.4g} ms) to 3 significant digits; "
                f"tolerance x{self.tolerance:g} ({self.golden * self.tolerance:.4g} ms): the "
                f"largest of x{MIN_TOLERANCE:g}, the slowest run "
                f"(x{self.slowest / self.golden:.3f}) and the median + {SIGMAS:g} robust "
                f"standard deviations ({self.median:.4g} + {SIGMAS:g} x {self.sigma:.3g} = "
                f"{spread:.4g} ms, x{spread / self.golden:.3f}), rounded up to 0.01")


def time_golden(values: list[float]) -> TimeGolden:
    """The golden time and tolerance for these runs' times (see the module docstring)."""
    arr = np.array(values, dtype=float)
    median = float(np.median(arr))
    sigma = 1.4826 * float(np.median(np.abs(arr - median)))
    golden = float(f"{median:.3g}")
    tolerance = max(MIN_TOLERANCE, float(arr.max()) / golden, (median + SIGMAS * sigma) / golden)
    return TimeGolden(golden, _round_up(tolerance), len(arr), median, float(arr.min()),
                      float(arr.max()), sigma)


def _machine_step(change: Change) -> bool:
    """A step the machine made, not IREE: the same build on both sides."""
    return change.same_build


def golden_window(changes: list[Change], n: int) -> tuple[int, int, list[str]]:
    """(start, end) of the runs a golden comes from, in a series of `n` points with these
    change points, and what was left out and why (see the module docstring)."""
    builds = [c for c in changes if not _machine_step(c)]
    start = builds[-1].index if builds else 0
    notes = [f"the build changed at {builds[-1].line()}: the window starts there"] if builds else []
    later = [c for c in changes if _machine_step(c) and c.index > start]
    end = later[0].index if later else n
    if later:
        notes.append(f"{n - end} later run(s) left out: at {later[0].line()} the build stayed "
                     "the same, so the machine, its load or its inputs moved, not IREE; a "
                     "window never spans such a step")
    return start, end, notes


def _series(results: list[Result], test: str, sku: str, metric: str) -> Series | None:
    chosen = [s for s in series_of(results) if s.command == BENCH_GOLDENS_CMD and s.sku == sku
              and s.metric == metric and s.subject == test]
    if not chosen:
        return None
    # One series per machine: the one with the most runs is the evidence.
    return max(chosen, key=lambda s: len(s.points))


def propose(bench: BenchmarkTest, results: list[Result], sku: str,
            min_runs: int = MIN_RUNS) -> Proposal:
    """The proposal for one benchmark file from `results` (bench goldens, any SKU)."""
    p = Proposal(bench.name, bench.path, sku)
    try:
        p.old_text = bench.path.read_text(encoding="utf-8")
        raw = json.loads(p.old_text)
    except (OSError, ValueError) as e:
        raise BadInput(f"cannot read the benchmark file: {e}", where=str(bench.path),
                       fix="pass IREE CI benchmark JSONs") from None
    times = _series(results, bench.name, sku, "time_ms")
    if times is None:
        p.notes.append(f"no `runner bench goldens --sku {sku}` result of {bench.name} in the "
                       "history: nothing to propose")
        p.new_text = p.old_text
        return p
    start, end, notes = golden_window(detect(times), len(times.points))
    p.notes += notes
    p.runs = list(times.points[start:end])
    if len(p.runs) < min_runs:
        p.notes.append(f"{len(p.runs)} run(s) in the window, fewer than {min_runs}: no golden "
                       "time proposed (run `runner bench goldens` again)")
    else:
        tg = time_golden([pt.value for pt in p.runs])
        p.golden_time_ms, p.tolerance = tg.golden, tg.tolerance
        p.headroom.append(tg.why())
    _compile_goldens(p, results, sku)
    p.new_text = _edited(raw, p, p.old_text)
    return p


def _compile_goldens(p: Proposal, results: list[Result], sku: str) -> None:
    """golden_dispatch and golden_size from the window's runs, exact (module docstring)."""
    used = {id(pt.result) for pt in p.runs}
    for metric, key in (("dispatch_count", "golden_dispatch"), ("size_bytes", "golden_size")):
        s = _series(results, p.test, sku, metric)
        seen = sorted({round(pt.value) for pt in (s.points if s else []) if id(pt.result) in used})
        if not seen:
            continue
        setattr(p, metric, seen[-1])
        varied = f" (it varied {seen[0]}..{seen[-1]} in the window)" if len(seen) > 1 else ""
        p.headroom.append(f"{key} {seen[-1]}: the window's largest{varied}, no headroom: "
                          "IREE CI fails a compile above it, and one build with its flags "
                          "gives the same on one SKU's machines")


def _indent(text: str) -> int:
    for line in text.splitlines()[1:]:
        stripped = line.lstrip(" ")
        if stripped:
            return len(line) - len(stripped) or 4
    return 4


def _edited(raw: dict[str, Any], p: Proposal, old_text: str) -> str:
    """The file with the proposed values, written as IREE's files are (indented JSON)."""
    raw = json.loads(json.dumps(raw))
    if layout(raw) == "torch":
        if p.golden_time_ms is not None:
            raw["golden_time_ms"], raw["tolerance_factor"] = p.golden_time_ms, p.tolerance
    else:
        for key, value in (("golden_time_ms", p.golden_time_ms),
                           ("golden_time_tolerance_multiplier", p.tolerance),
                           ("golden_dispatch", p.dispatch_count), ("golden_size", p.size_bytes)):
            if value is not None:
                entry = raw.get(key)
                raw[key] = {**(entry if isinstance(entry, dict) else {}), p.sku: value}
    text = json.dumps(raw, indent=_indent(old_text)) + ("\n" if old_text.endswith("\n") else "")
    return old_text if json.loads(text) == json.loads(old_text) else text

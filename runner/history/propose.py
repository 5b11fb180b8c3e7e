"""Goldens from evidence: `runner goldens propose` suggests a benchmark test's
`golden_time_ms` and its tolerance from the history of `runner bench goldens` on one SKU,
and its dispatch count and binary size from the newest result, as a diff of the test file
with the runs it used, so a golden update is reviewed rather than guessed.

The rule, for the runs since the series' last change point (changes.detect; before it the
build was another one) and at least `min_runs` of them:
- golden_time_ms: their median, to 3 significant digits (the statistic each is is the one
  IREE CI's rule compares: the mean, or the fastest repetition for torch-layout files);
- tolerance: the smallest multiplier that keeps the slowest of them inside the band and
  4 robust standard deviations (1.4826 x MAD) above the median, at least MIN_TOLERANCE,
  rounded up to 0.01; with normal noise a good build then fails about 3 times in 100,000.
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
from runner.history.changes import detect
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
                "notes": self.notes, "diff": self.diff(),
                "runs": [{"finished_at": p.when.isoformat() + "Z", "value": p.value,
                          "build": p.build, "machine": p.result.machine,
                          "out_dir": p.result.out_dir} for p in self.runs]}


def _round_up(x: float, step: float = 0.01) -> float:
    return round(math.ceil(x / step - 1e-9) * step, 10)


def time_golden(values: list[float]) -> tuple[float, float]:
    """(golden_time_ms, tolerance) for these runs' times (see the module docstring)."""
    arr = np.array(values, dtype=float)
    median = float(np.median(arr))
    sigma = 1.4826 * float(np.median(np.abs(arr - median)))
    golden = float(f"{median:.3g}")
    tolerance = max(MIN_TOLERANCE, float(arr.max()) / golden, (median + SIGMAS * sigma) / golden)
    return golden, _round_up(tolerance)


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
    changes = detect(times)
    start = changes[-1].index if changes else 0
    if changes:
        p.notes.append(f"the time moved at {changes[-1].line()}: only the runs since count")
    p.runs = list(times.points[start:])
    if len(p.runs) < min_runs:
        p.notes.append(f"{len(p.runs)} run(s) since the last change, fewer than {min_runs}: "
                       "no golden time proposed (run `runner bench goldens` again)")
    else:
        p.golden_time_ms, p.tolerance = time_golden([pt.value for pt in p.runs])
    for metric in ("dispatch_count", "size_bytes"):
        s = _series(results, bench.name, sku, metric)
        if s is not None:
            setattr(p, metric, round(s.points[-1].value))
    p.new_text = _edited(raw, p, p.old_text)
    return p


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

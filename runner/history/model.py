"""The plain records between the extraction, the store and the readers.

A `Result` is one finished command's outcome; its `Metric`s are long-format rows (one number
each: a score, a rate, a stage's or a dispatch's time, a count), so a new kind of number
needs no schema change. A metric's `band` is what its verdict was judged against (MLPerf's
range, a golden x its tolerance), drawn on the history's charts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runner.history.environment import Environment

# Which way is worse, per metric name: +1 a rise is a regression (times, counts, sizes,
# FID), -1 a fall is (rates, CLIP). Names not here are reported as changes, not regressions.
WORSE_WHEN = {
    "stage_ms": 1, "dispatch_ms": 1, "time_ms": 1, "latency_ms": 1, "dispatch_count": 1,
    "size_bytes": 1, "fid": 1, "wall_s": 1,
    "samples_per_s": -1, "clip": -1,
}
UNITS = {"stage_ms": "ms", "dispatch_ms": "ms", "time_ms": "ms", "latency_ms": "ms",
         "dispatch_count": "", "size_bytes": "B", "fid": "", "clip": "", "wall_s": "s",
         "samples_per_s": "samples/s"}


@dataclass(frozen=True)
class Metric:
    """One number of a result. `subject` says what it measures within the result: a stage
    (`unet`), a layout (`bs1 cpd1`), a golden test (`clip_cpu`), a dispatch; '' for the
    whole result. `golden`/`low`/`high`: the band it was judged against, `verdict` how."""

    name: str
    subject: str
    value: float
    golden: float | None = None
    low: float | None = None
    high: float | None = None
    verdict: str | None = None  # pass | fail | None (not judged)

    @property
    def unit(self) -> str:
        return UNITS.get(self.name, "")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "value": self.value,
                "unit": self.unit, "golden": self.golden, "low": self.low, "high": self.high,
                "verdict": self.verdict}


@dataclass(frozen=True)
class Result:
    """One finished command: where and with what it ran, how it was judged, its metrics.
    `key` is its identity (the command, its out dir and when its attempt started), so
    importing a run dir twice, or recording it at the end and importing it later, keeps one
    copy."""

    key: str
    command: str  # run | bench | bench goldens | mlperf | validate | goldens check
    out_dir: str
    finished_at: datetime  # UTC, naive
    profile: str = ""
    model: str = ""
    layout: str = ""
    machine: str = ""  # the host it ran on
    device: str = ""  # what it ran on: `cpu:host`, `rocm:gfx942`, a golden's SKU device
    sku: str = ""  # benchmark goldens' SKU
    compiler_version: str = ""
    compiler_commit: str = ""
    runtime_version: str = ""
    runtime_commit: str = ""
    build: str = ""  # the IREE build as asked for (`wheels:3.13.0`), where the command had one
    runner_version: str = ""
    runner_commit: str = ""
    verdict: str = ""
    exit_code: int | None = None
    metrics: tuple[Metric, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)  # argv, notes
    environment: Environment | None = None  # None: the out dir recorded none

    @property
    def iree(self) -> str:
        """`3.13.0 @ 89ece87` (compiler, else runtime)."""
        version = self.compiler_version or self.runtime_version or "?"
        commit = (self.compiler_commit or self.runtime_commit)[:7]
        return f"{version} @ {commit}" if commit else version

    def to_dict(self, metrics: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": self.key, "command": self.command, "out_dir": self.out_dir,
            "finished_at": self.finished_at.isoformat() + "Z", "profile": self.profile,
            "model": self.model, "layout": self.layout, "machine": self.machine,
            "device": self.device, "sku": self.sku,
            "iree": {"compiler_version": self.compiler_version,
                     "compiler_commit": self.compiler_commit,
                     "runtime_version": self.runtime_version,
                     "runtime_commit": self.runtime_commit, "build": self.build},
            "runner": {"version": self.runner_version, "commit": self.runner_commit},
            "verdict": self.verdict, "exit_code": self.exit_code, "details": self.details,
            "environment": self.environment.to_dict() if self.environment else None}
        if metrics:
            out["metrics"] = [m.to_dict() for m in self.metrics]
        return out


@dataclass(frozen=True)
class Confirmation:
    """A change measured again: the last good and first bad builds, interleaved (good, bad,
    bad, good, ...) on one machine, `rounds` times each. `holds` when the bad/good ratio
    from every repetition of each pair of rounds has its interval wholly on the worse side
    of 1, by at least the change asked for (runner.history.paired; `details["verdict"]`).
    `series` is the series' key (runner.history.series.Series.key)."""

    series: dict[str, str]
    good: str  # the build specs measured (`wheels:3.12.0`)
    bad: str
    good_values: tuple[float, ...]
    bad_values: tuple[float, ...]
    holds: bool
    confirmed_at: datetime  # UTC, naive
    machine: str
    out_dir: str = ""
    details: dict[str, Any] = field(default_factory=dict)  # spreads, conditions, commands

    def to_dict(self) -> dict[str, Any]:
        return {"series": self.series, "good": self.good, "bad": self.bad,
                "good_values": list(self.good_values), "bad_values": list(self.bad_values),
                "holds": self.holds, "confirmed_at": self.confirmed_at.isoformat() + "Z",
                "machine": self.machine, "out_dir": self.out_dir, "details": self.details}

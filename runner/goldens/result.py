"""What `goldens check` found: per test (`TestResult`, with its compile statistics'
`StatCheck`s) and for the whole run (`CheckReport`); `check` fills them, `report` renders them."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

import numpy as np

from runner.base.iree_tools import CompilerInfo
from runner.goldens.plan import CheckOptions
from runner.goldens.testfile import GoldenTest
from runner.goldens.thresholds import OutputComparison

STATUSES = ("passed", "failed", "error", "xfailed", "skipped", "planned")


@dataclass(frozen=True)
class StatCheck:
    """One compile statistic against its golden (a maximum, as IREE CI checks it)."""

    name: str  # dispatch_count | binary_size
    measured: int
    golden: int | None

    @property
    def ok(self) -> bool | None:
        return None if self.golden is None else self.measured <= self.golden

    @property
    def delta(self) -> int | None:
        return None if self.golden is None else self.measured - self.golden

    def describe(self) -> str:
        if self.golden is None:
            return f"{self.name} {self.measured} (no golden)"
        verdict = "ok" if self.ok else "OVER"
        return (f"{self.name} {self.measured}, golden {self.golden} "
                f"(delta {self.delta:+d}) {verdict}")

    def to_dict(self) -> dict:
        return {"name": self.name, "measured": self.measured, "golden": self.golden,
                "delta": self.delta, "ok": self.ok}


@dataclass
class TestResult:
    test: GoldenTest
    status: str = "planned"
    phase: str = ""
    message: str = ""
    compile_seconds: float = 0.0
    compile_cached: bool = True
    run_seconds: float = 0.0
    outputs: list[OutputComparison] = field(default_factory=list)
    stats: list[StatCheck] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    actual: tuple[np.ndarray, ...] = ()
    tool: str | None = None  # why the run went through iree-run-module itself

    @property
    def ok(self) -> bool:
        return self.status in ("passed", "xfailed", "skipped", "planned")

    def to_dict(self) -> dict:
        return {"name": self.test.name, "file": str(self.test.path), "kind": self.test.kind,
                "status": self.status, "phase": self.phase, "message": self.message,
                "compile_seconds": self.compile_seconds, "compile_cached": self.compile_cached,
                "run_seconds": self.run_seconds,
                "outputs": [o.to_dict() for o in self.outputs],
                "compile_stats": [s.to_dict() for s in self.stats],
                "commands": [shlex.join(c) for c in self.commands], "notes": self.notes,
                "warnings": self.warnings}


@dataclass
class CheckReport:
    results: list[TestResult]
    options: CheckOptions
    compiler: CompilerInfo
    seconds: float

    @property
    def exit_code(self) -> int:
        return 0 if all(r.ok for r in self.results) else 1

    def counts(self) -> dict[str, int]:
        return {s: sum(r.status == s for r in self.results) for s in STATUSES
                if any(r.status == s for r in self.results)}

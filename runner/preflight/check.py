"""One preflight fact (`PreflightCheck`) and the verdict over all of them (`Preflight`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from runner.base import shellscript
from runner.base.errors import BadInput, RunnerError


class CheckState(str, Enum):
    OK = "ok"
    FAILED = "failed"  # the run would fail: it does not start
    ABSENT = "absent"  # nothing to check here (a CPU layout's GPUs, Slurm nodes' python)
    SHARED = "shared"  # GPUs other processes hold, used anyway as asked (--share-gpus)


@dataclass(frozen=True)
class PreflightCheck:
    what: str  # e.g. "FID statistics", "worker environment"
    state: CheckState
    detail: str
    where: str = ""  # the file, flag or field at fault (failed) or read (ok)
    fix: str = ""

    @classmethod
    def failed(cls, what: str, error: RunnerError) -> PreflightCheck:
        return cls(what, CheckState.FAILED, error.message, error.where or "", error.fix or "")

    def line(self) -> str:
        return f"preflight {self.state.value:<6} {self.what}: {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "state": self.state.value, "detail": self.detail,
                "where": self.where, "fix": self.fix}


@dataclass(frozen=True)
class Preflight:
    checks: tuple[PreflightCheck, ...]

    @classmethod
    def of(cls, checks: Iterable[PreflightCheck]) -> Preflight:
        return cls(tuple(checks))

    @property
    def failures(self) -> list[PreflightCheck]:
        return [c for c in self.checks if c.state is CheckState.FAILED]

    def lines(self) -> list[str]:
        return [c.line() for c in self.checks]

    def comments(self, indent: str = "") -> list[str]:
        """The lines as a dry run prints them among its commands: `# ` comments, each one
        line whatever a path in it holds (a newline, a control character)."""
        return [f"#{indent} {shellscript.sanitize(line)}" for line in self.lines()]

    def to_dict(self) -> list[dict[str, Any]]:
        return [c.to_dict() for c in self.checks]

    def shown(self, dry_run: bool, say: Callable[[str], None]) -> Preflight:
        """Raises (exit 2) with every line shown when a check fails, on stdout in a dry run
        (its output) and through `say` otherwise; else shows the lines, as `# ` comments in
        a dry run's printed commands."""
        self.raise_if_failed(print if dry_run else say)
        for line in self.comments() if dry_run else self.lines():
            print(line, flush=True) if dry_run else say(line)
        return self

    def raise_if_failed(self, echo: Callable[[str], None]) -> None:
        """Every line echoed first, so one attempt shows every fix to make, not only the
        first; then the first failure raised (exit 2), naming how many there are."""
        failures = self.failures
        if not failures:
            return
        for line in self.lines():
            echo(line)
        first = failures[0]
        more = (f" (and {len(failures) - 1} more failed check(s), listed above: "
                + ", ".join(f.what for f in failures[1:]) + ")") if len(failures) > 1 else ""
        raise BadInput(f"preflight: {first.what}: {first.detail}{more}; nothing was run",
                       where=first.where or None, fix=first.fix or None)

"""One resumable-step record: the words every attempt and step is recorded with, and the
table of finished steps that a rerun into the same `--out` skips.

Each command that can be stopped and run again records how its attempt ended
(attempt.json, run.json's `attempts`) and which parts of it finished (validate.json's and
bisect.json's `steps`, gpu_check.json's). They record it in these words, so a report, `runner
status`, the history import and the docs read one vocabulary; which words end an attempt, and
what a rerun does with it, is decided here and in runner/base/outdir.py (the `--out` rules).

Files written before the words were one keep reading: run.json's `killed` is `interrupted`,
validate.json's `done` is `finished` (`StepStatus("killed") is StepStatus.INTERRUPTED`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from runner.base.errors import EXIT_FAILED, EXIT_INCOMPLETE, EXIT_OK


class StepStatus(str, Enum):
    """How an attempt, or one step of it, stands. A `str`, so the JSON files hold the
    words themselves (and a file from an older runner compares equal)."""

    RUNNING = "running"  # written when it starts: a driver killed with SIGKILL leaves it
    FINISHED = "finished"  # ran to its verdict (a test that fails finished too)
    FAILED = "failed"  # an error the runner could name stopped it (exit 2, a full disk)
    INCOMPLETE = "incomplete"  # ended with parts missing (exit 3)
    INTERRUPTED = "interrupted"  # a signal stopped it, or its driver died (was `killed`)
    DRY_RUN = "dry run"  # printed, not run: never counts as finished

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def _missing_(cls, value: object) -> StepStatus | None:
        """The words of files written before there was one vocabulary."""
        return _OLD_WORDS.get(value) if isinstance(value, str) else None

    @classmethod
    def read(cls, word: object) -> StepStatus:
        """A status as a file holds it: an older runner's word as its own, a missing one as
        `running`, and so is a word this runner does not know (a newer runner's): never
        finished, so no step is skipped for a state this runner cannot judge."""
        try:
            return cls(word)
        except ValueError:
            return cls.RUNNING

    def settled(self) -> StepStatus:
        """The status as the next driver, holding the out dir's lock, takes it: an attempt
        still `running` then is one whose driver died without a word."""
        return StepStatus.INTERRUPTED if self is StepStatus.RUNNING else self

    @classmethod
    def of_exit(cls, exit_code: int) -> StepStatus:
        """How an attempt that ended with `exit_code` ended (runner/base/errors.py's codes:
        a verdict, passed or failed, is finished)."""
        if exit_code in (EXIT_OK, EXIT_FAILED):
            return cls.FINISHED
        return cls.INCOMPLETE if exit_code == EXIT_INCOMPLETE else cls.FAILED

    @classmethod
    def of_error(cls, error: BaseException) -> StepStatus:
        """How an attempt stopped by `error` ended: a signal (the runner raises them as
        KeyboardInterrupt) interrupts it, anything else fails it."""
        return cls.INTERRUPTED if isinstance(error, KeyboardInterrupt) else cls.FAILED


_OLD_WORDS = {"killed": StepStatus.INTERRUPTED, "done": StepStatus.FINISHED}


@dataclass
class Steps:
    """The finished steps of a command's out dir, by name: each a dict holding `key` (of
    the step's inputs), `status`, `seconds` and what the command keeps of it. `table` is
    the dict inside the command's state file, and `save` writes that file (atomically) after
    every recorded step, so an interrupted command loses only the step it was in."""

    table: dict[str, dict[str, Any]]
    save: Callable[[], None]

    def finished(self, name: str, key: str) -> dict[str, Any] | None:
        """The step `name` where it finished with inputs `key` (else None: run it)."""
        step = self.table.get(name)
        if not step or step.get("key") != key:
            return None
        return step if StepStatus.read(step.get("status")) is StepStatus.FINISHED else None

    def kept(self, name: str, key: str,
             done: Callable[[dict[str, Any]], bool] = lambda step: True) -> dict[str, Any] | None:
        """What a rerun does with the step `name`, for every record alike: the step where it
        finished with inputs `key` and `done` finds its outputs as recorded (keep it), else
        None (run it). A finished step whose outputs are gone or changed is dropped from the
        table, so a rerun cut short before recording it again never finds it finished."""
        step = self.finished(name, key)
        if step is None:
            return None
        if done(step):
            return step
        del self.table[name]
        self.save()
        return None

    def record(self, name: str, key: str, status: StepStatus, seconds: float,
               **fields: Any) -> dict[str, Any]:
        """Records the step `name` (replacing an earlier one) and saves the table."""
        self.table[name] = step = {"key": key, "status": status,
                                   "seconds": round(seconds, 3), **fields}
        self.save()
        return step

    def run(self, name: str, key: str, fn: Callable[[], dict[str, Any]], *,
            done: Callable[[dict[str, Any]], bool] = lambda step: True,
            dry_run: bool = False, say: str = "") -> tuple[dict[str, Any], bool]:
        """(the step's `detail`, whether it was skipped): the finished step `name` with
        inputs `key` where `done` accepts it (its outputs are still there), else `fn()`,
        recorded as finished or a dry run; one that raises is recorded failed or interrupted
        (with the error), and the error goes on."""
        step = self.kept(name, key, done)
        if step is not None:
            if say:
                print(f"{say}: {name}: up to date, skipped", file=sys.stderr)
            return step.get("detail", {}), True
        if say:
            print(f"{say}: {name} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        try:
            detail = fn()
        except BaseException as e:
            self.record(name, key, StepStatus.of_error(e), time.perf_counter() - start,
                        detail={"error": str(e) or type(e).__name__})
            raise
        self.record(name, key, StepStatus.DRY_RUN if dry_run else StepStatus.FINISHED,
                    time.perf_counter() - start, detail=detail)
        return detail, False

"""Running the check's steps one at a time inside a budget, and what each step's outcome is.

A step is started only with `min_start` seconds of budget left (else: skipped: budget), and
one still running when the budget ends is stopped: SIGTERM to it, SIGKILL to it and
whatever it started after `grace`, then waited for, so that no process of the check
outlives its step and holds the GPU while the next one measures. Around each step the GPU's
compute processes are listed (runner.base.gpu_holders): one left holding GPU memory is
recorded.

What a finished command means is the step's kind's (`judge`): a larger batch that ran out
of GPU memory "did not fit" (the ladder goes on to the next smaller one); a dispatch
profile whose mechanism this IREE's driver lacks is "unavailable", with the tool's reason;
a short MLPerf test that LoadGen calls INVALID (it is short by design) still measured its
rate.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from runner.base import gpu_holders
from runner.base.errors import RunnerError, ToolFailed
from runner.base.procs import ProcessGuard
from runner.base.steps import StepStatus
from runner.gpucheck.plan import DISPATCHES, LADDER, MLPERF, Step, shown
from runner.inputs.jsonfile import read_json

MIN_START_S = 30.0  # a step is not started with less budget than this left
STEP_STOP_GRACE_S = 10.0  # SIGTERM, then SIGKILL after this long
# A step's verdict, in words of the check's own; a step still going, or stopped by a signal,
# is in the words of every resumable record (runner/base/steps.py).
PASSED, FAILED, NOT_NEEDED, SKIPPED_BUDGET = "passed", "failed", "not needed", "skipped: budget"
UNAVAILABLE, DID_NOT_FIT = "unavailable", "did not fit"
# Statuses a finished check accepts: each says what was found out.
ACCEPTED = (PASSED, NOT_NEEDED, UNAVAILABLE, DID_NOT_FIT)
# What IREE's HAL, CUDA and HIP say when a device allocation fails.
OUT_OF_MEMORY = ("RESOURCE_EXHAUSTED", "out of memory", "CUDA_ERROR_OUT_OF_MEMORY",
                 "hipErrorOutOfMemory")
# What IREE 3.13's iree-benchmark-module says where a driver has no HAL-native profiler.
PROFILER_MISSING = "profiling is not implemented"


class StepRunner:
    """Runs steps one at a time inside a budget of seconds from its creation."""

    def __init__(self, budget: float, logs: Path, env: dict[str, str],
                 say: Callable[[str], None], min_start: float = MIN_START_S,
                 grace: float = STEP_STOP_GRACE_S):
        self.budget, self.logs, self.env, self.say = budget, logs, env, say
        self.min_start, self.grace = min_start, grace
        self.started = time.monotonic()

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.started)

    def can_start(self, step: Step) -> bool:
        """False (the step recorded skipped) with less than `min_start` seconds left."""
        if self.left() >= self.min_start:
            return True
        step.status = SKIPPED_BUDGET
        step.note = f"{max(self.left(), 0):.0f}s of the budget left, under {self.min_start:.0f}s"
        return False

    def run(self, step: Step) -> Step:
        if not self.can_start(step):
            return step
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{step.name}.log"
        step.log, step.command = str(log), shown(step.argv, self.env)
        before = _holders()
        guard = ProcessGuard()
        t0 = time.monotonic()
        proc: subprocess.Popen | None = None
        try:
            with open(log, "wb") as out:
                proc = subprocess.Popen(step.argv, stdout=out, stderr=out,
                                        stdin=subprocess.DEVNULL, env={**os.environ, **self.env})
                try:
                    step.exit_code = proc.wait(timeout=max(self.left(), 0.01))
                    step.status = PASSED if step.exit_code == 0 else FAILED
                except subprocess.TimeoutExpired:
                    step.status, step.note = FAILED, (f"stopped: the budget of "
                                                      f"{self.budget:.0f}s ran out")
                    step.exit_code = self._stop(proc, guard)
        except OSError as e:  # the program is not there, or the log cannot be written
            step.status, step.note = FAILED, f"could not start: {e}"
        except BaseException:  # a signal (Interrupted): stop the child before leaving
            step.status = StepStatus.INTERRUPTED
            if proc is not None:
                step.exit_code = self._stop(proc, guard)
            raise
        finally:
            step.seconds = round(time.monotonic() - t0, 2)
            step.gpu_holders = _holders_after(before)
        judge_step(step)
        if step.status == FAILED and not step.note:
            step.note = f"exited {step.exit_code}: see {log.name}"
        return step

    def _stop(self, proc: subprocess.Popen, guard: ProcessGuard) -> int | None:
        """SIGTERM to the step's command (a `runner` stops its own workers on it), SIGKILL
        after the grace; then whatever it started and left behind, the same way. Its exit
        status, as Popen gives it (-15: SIGTERM)."""
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            proc.wait(timeout=self.grace)
        except subprocess.TimeoutExpired:
            self.say(f"pid {proc.pid} still running {self.grace:.0f}s after SIGTERM: SIGKILL")
            proc.kill()
            proc.wait()
        guard.stop(self.grace, self.say)
        return proc.returncode


def judge_step(step: Step) -> None:
    """What a finished command means for its kind of step (module docstring)."""
    if step.kind == LADDER and step.status == FAILED and step.log:
        text = _tail(Path(step.log))
        found = next((s for s in OUT_OF_MEMORY if s.lower() in text.lower()), None)
        if found:
            step.status, step.note = DID_NOT_FIT, f"out of GPU memory ({found} in {step.log})"
    elif step.kind == DISPATCHES and step.status in (PASSED, FAILED) and step.outputs:
        reason = profiler_missing(Path(step.outputs[0]))
        if reason:
            step.status, step.note = UNAVAILABLE, reason
    elif step.kind == MLPERF and step.status == FAILED and step.outputs:
        rate, why = mlperf_rate(Path(step.outputs[0]))
        if rate is not None:  # measured; LoadGen's verdict on a short test is INVALID
            step.status, step.note = PASSED, f"{rate:.3f} samples/s; LoadGen: {why}"


def _tail(path: Path, size: int = 1 << 16) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def profiler_missing(bench_json: Path) -> str:
    """The tool's reason, where no stage of the bench has a dispatch profile because the
    driver has no profiler (`unavailable`, or IREE 3.13's "not implemented" error); "" when
    any stage has one, or a stage failed for another reason (a real failure)."""
    try:
        bench = read_json(bench_json, what="bench result")
    except RunnerError:  # no result: the step's own failure stands
        return ""
    profiles = [s.get("dispatch_profile") or {} for s in bench.get("stages", [])]
    if not profiles:
        return ""
    reasons = []
    for p in profiles:
        note = str(p.get("note", ""))
        if p.get("status") == "unavailable" or (p.get("status") == "error"
                                                and PROFILER_MISSING in note):
            reasons.append(note.strip().splitlines()[0] if note.strip() else "no profiler")
        else:
            return ""
    return f"unavailable: {reasons[0]}"


def mlperf_rate(results_json: Path) -> tuple[float | None, str]:
    """The Offline performance test's samples/s and LoadGen's verdict on it."""
    for test in (load_own(results_json) or {}).get("tests", []):
        s = test.get("summary") or {}
        if test.get("mode") == "performance" and isinstance(s.get("samples_per_second"),
                                                            int | float):
            why = "VALID" if s.get("valid") else "INVALID (" + "; ".join(
                s.get("reasons") or ["a short test"]) + ")"
            return float(s["samples_per_second"]), why
    return None, ""


def load_own(path: Path) -> dict | None:
    """A `runner mlperf` record: the runner's own file, whose LoadGen settings hold 64-bit
    unsigned seeds that the input boundary's JSON reader (signed 64-bit) refuses."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _holders() -> gpu_holders.Snapshot | str:
    try:
        return gpu_holders.snapshot()
    except ToolFailed as e:
        return f"no snapshot: {e}"


def _holders_after(before: gpu_holders.Snapshot | str) -> dict:
    if isinstance(before, str):
        return {"tool": None, "note": before, "leaks": []}
    try:
        found = gpu_holders.check_leaks(before)
    except ToolFailed as e:
        return {"tool": before.tool, "note": f"no check: {e}", "leaks": []}
    return {"tool": found.tool, "note": " ".join(found.lines()),
            "leaks": [asdict(p) for p in found.leaks]}

"""A worker's environment, started the way the executor starts a worker, asked whether it
can import what a worker imports. A venv with the runner installed without its
dependencies, or an image without the IREE runtime, otherwise shows up as every worker's
traceback after the run and an "incomplete" run no resume can finish."""

from __future__ import annotations

from runner.batch.executors import Executor, WorkerProbe
from runner.config.layout import Plan
from runner.preflight.check import CheckState, PreflightCheck

WHAT = "worker environment"


def worker_env_check(executor: Executor, plan: Plan) -> PreflightCheck:
    return probe_check(executor.probe_worker(plan))


def probe_check(probe: WorkerProbe) -> PreflightCheck:
    """What a worker's `--check` said, judged (a caller that starts the worker's python
    itself, as bisect's builds and gpu-check's steps do, hands its probe here)."""
    if probe.returncode is None:
        return PreflightCheck(WHAT, CheckState.ABSENT,
                              f"not started here ({probe.output}); to check it: "
                              f"{probe.command}")
    if probe.returncode == 0:
        return PreflightCheck(WHAT, CheckState.OK, probe.output.splitlines()[-1]
                              if probe.output else "imports ok", probe.command)
    return PreflightCheck(
        WHAT, CheckState.FAILED,
        f"a worker cannot start (exit {probe.returncode}): {_last_line(probe.output)}",
        probe.command,
        f"install the runner with its dependencies where the workers run "
        f"(`pip install iree-sdxl-runner`, or an image built by `runner image build`); "
        f"try it with: {probe.command}")


def _last_line(output: str) -> str:
    """A traceback's last line is its error (`ModuleNotFoundError: No module named ...`)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1].removeprefix("error: ") if lines else "no output"

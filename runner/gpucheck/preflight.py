"""`runner gpu-check run`'s preflight: what would make every step fail, checked before the
first, so a machine lent for minutes is not spent finding, step by step, that the carry was
copied without its MLPerf settings, that no worker can import the IREE runtime, that the
GPUs are in another partition mode or busy, or that the disk is full.

What applies of a run's preflight (runner/preflight/): not captions or scoring (the check
scores nothing), but the carry's files the steps read, a worker's environment started as
the steps' runs start theirs (this Python, with the steps' environment), the GPU the steps
use (device 0, as `--devices 0 --cpd 1` in each step) and the disk under the results. Each
step's own run still runs its preflight; this one fails the check before it starts.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from runner.base import shellscript
from runner.batch.executors import probe_argv, run_probe
from runner.batch.run import plan_for
from runner.config.layout import Plan
from runner.config.profile import Profile, load_profile
from runner.gpucheck.plan import Step
from runner.preflight.check import CheckState, Preflight, PreflightCheck
from runner.preflight.disk import disk_check
from runner.preflight.gpus import gpu_checks
from runner.preflight.worker_env import WHAT, probe_check


@dataclasses.dataclass(frozen=True)
class CheckPreflight:
    """What `runner gpu-check run` will do: the carry, its steps, the children's
    environment, the results directory."""

    carry: Path
    manifest: dict
    todo: list[Step]
    env: dict[str, str]  # what each step's command is given besides this environment
    results: Path
    site: Path | None  # where the carried wheels go (None: this Python has what it needs)
    share_gpus: bool = False


def steps_profile(manifest: dict) -> tuple[Profile, Plan]:
    """The carry's profile laid out as its steps run it: one worker on device 0."""
    profile = load_profile(manifest["profile"])
    layout = profile.layout.with_overrides(devices="0", cpd=1, where="runner gpu-check run")
    profile = dataclasses.replace(profile, layout=layout)
    return profile, plan_for(profile)


def carry_check(carry: Path, todo: list[Step]) -> PreflightCheck:
    """Every path in the carry a step's command names, that no step writes."""
    written = {o for step in todo for o in step.outputs}
    read = sorted({a for step in todo for a in step.argv
                   if a.startswith(str(carry) + os.sep) and a not in written})
    missing = [a for a in read if not Path(a).exists()]
    where = f"--carry {carry}"
    if missing:
        return PreflightCheck(
            "carry", CheckState.FAILED, f"{len(missing)} of the {len(read)} file(s) the steps "
            f"read are missing (first: {Path(missing[0]).relative_to(carry)})", where,
            "copy the whole directory `runner gpu-check prepare` wrote, or prepare it again")
    names = ", ".join(str(Path(a).relative_to(carry)) for a in read) or "none"
    return PreflightCheck("carry", CheckState.OK, f"{len(read)} file(s) the steps read: "
                          f"{names}", where)


def worker_check(request: CheckPreflight, plan: Plan) -> PreflightCheck:
    """The first worker's `--check` in this Python with the steps' environment: what each
    step's run starts its workers with."""
    if request.site is not None and not request.site.is_dir():
        return PreflightCheck(WHAT, CheckState.ABSENT,
                              f"this Python lacks the runtime: the check's first step installs "
                              f"the carried wheels into {request.site}, and each step's run "
                              "checks its workers then")
    worker = plan.workers[0]
    argv = probe_argv(worker, sys.executable)
    env = {**request.env, **worker.env}
    shown = shellscript.join(["env", *(f"{k}={v}" for k, v in env.items()), *argv])
    return probe_check(run_probe(argv, {**os.environ, **env}, shown))


def stored_samples(todo: list[Step]) -> int:
    """The images the steps store at most: each `--count` a step's command gives."""
    return sum(int(step.argv[i + 1]) for step in todo
               for i, word in enumerate(step.argv[:-1]) if word == "--count")


def gpu_check_preflight(request: CheckPreflight) -> Preflight:
    profile, plan = steps_profile(request.manifest)
    return Preflight.of([
        carry_check(request.carry, request.todo), worker_check(request, plan),
        *gpu_checks(plan, request.share_gpus),
        disk_check(request.results, profile, plan, stored_samples(request.todo), 0)])

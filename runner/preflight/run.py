"""Every preflight check of one run, in the order the run would meet them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from runner.batch.executors import Executor
from runner.config.layout import Plan
from runner.config.profile import Profile
from runner.preflight.check import CheckState, Preflight, PreflightCheck
from runner.preflight.disk import disk_check
from runner.preflight.files import captions_check, scoring_checks
from runner.preflight.gpus import gpu_checks
from runner.preflight.worker_env import worker_env_check


@dataclass(frozen=True)
class PreflightRequest:
    """What a run will do: where it writes, which samples' worth, whether it scores."""

    run_dir: Path
    profile: Profile
    plan: Plan
    samples: int  # how many samples it stores
    score: bool
    captions: Path | None = None
    share_gpus: bool = False  # GPUs other processes hold are used anyway
    logged: int | None = None  # how many its MLPerf log holds (None: `samples`)


def run_preflight(request: PreflightRequest, executor: Executor) -> Preflight:
    """Reads and starts nothing the run would not (and writes nothing): the captions, what
    scoring reads, a worker's environment, the GPUs, the disk."""
    r = request
    # The worker's python (a process of its own, most of the preflight's time) starts
    # first and imports while this one reads the files.
    with ThreadPoolExecutor(1) as pool:
        worker = pool.submit(worker_env_check, executor, r.plan)
        files = [captions_check(r.captions), *scoring_checks(r.profile, r.score)]
        if executor.on_this_host:
            gpus = gpu_checks(r.plan, r.share_gpus)
        else:
            gpus = [PreflightCheck("GPUs", CheckState.ABSENT,
                                   f"on the {executor.name} nodes, not this host")]
        return Preflight.of([*files, worker.result(), *gpus,
                             disk_check(r.run_dir, r.profile, r.plan, r.samples,
                                        r.samples if r.logged is None else r.logged)])

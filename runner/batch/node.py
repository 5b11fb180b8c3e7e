"""One node of a Slurm run: `python -m runner.batch.node --run-dir RUN --job J`.

Run by each array task of the batch script runner/batch/slurm.py submits. It plans this
node's workers from the run's recorded profile with this node's cores (a layout names device
IDs, which every node has; the cores are the node's own), starts them with the recorded node
executor, and watches them like a local run does, but never fills the queue and never writes
run.json: the submitter owns both, so N nodes cannot race on them. What the node knows
(hostname, SLURM_JOB_NODELIST, its plan and workers, how it ended) goes into its own state
file, slurm/nodes/<key>.json, which the submitter folds into run.json.

On SIGTERM (scancel, time limit, preemption) the node kills its workers, hands their claimed
batches back to the queue and records `cancelled`, so the other nodes can take them at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runner.base.errors import RunnerError, StepFailed
from runner.batch.cluster import (
    SlurmOptions,
    node_key,
    worker_prefix,
    write_node_state,
)
from runner.batch.executor_for import executor_for
from runner.batch.executors import WorkerPool, watch
from runner.batch.queue import WorkQueue
from runner.batch.run import recorded_profile
from runner.config.layout import Plan, parse_device_ids, plan_workers
from runner.config.profile import Profile
from runner.model.compiled_model import CompiledModel
from runner.rundir.directory import RunDir


class Terminated(Exception):
    """SIGTERM from Slurm, raised in the main thread so every cleanup path runs."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def allocated_cores() -> tuple[tuple[int, ...], str]:
    """The cores this task may use, and how that was decided.

    Where Slurm binds tasks (task/affinity, task/cgroup) the process's affinity already is
    the allocation. With task/none it is the whole machine even when the job got a few
    CPUs, and two array tasks sharing a node would plan workers on the same cores; then the
    allocation is read from `scontrol show job -d` (CPU_IDs). Those are Slurm's CPU
    indices, which match the OS's on machines that number cores plainly (as here); they are
    only used when the affinity is wider than the allocation, never to widen it.
    """
    affinity = tuple(sorted(os.sched_getaffinity(0)))
    try:
        want = int(os.environ.get("SLURM_CPUS_ON_NODE", "0"))
    except ValueError:
        want = 0
    job = os.environ.get("SLURM_JOB_ID")
    if not want or len(affinity) <= want or not job:
        return affinity, "process affinity"
    try:
        proc = subprocess.run(["scontrol", "show", "job", "-d", job], capture_output=True,
                              text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return affinity, "process affinity (scontrol failed)"
    m = re.search(r"\bCPU_IDs=(\S+)", proc.stdout)
    if proc.returncode != 0 or not m:
        return affinity, "process affinity (no CPU_IDs from scontrol)"
    try:
        ids = parse_device_ids(m.group(1), "scontrol CPU_IDs")
    except RunnerError:
        return affinity, f"process affinity (unreadable CPU_IDs {m.group(1)})"
    picked = tuple(sorted(c for c in ids if c in affinity))
    if len(picked) != want:
        return affinity, f"process affinity (CPU_IDs {m.group(1)} do not fit it)"
    return picked, f"Slurm allocation CPU_IDs={m.group(1)} (task/none does not bind)"


def node_plan(profile: Profile, key: str, cores: tuple[int, ...]) -> Plan:
    """The layout expanded on this node, workers renamed `<key>-wNNN`."""
    plan = plan_workers(profile.layout, cores, where=f"{profile.path} (on node {key})")
    workers = tuple(dataclasses.replace(w, name=f"{worker_prefix(key)}{w.name}")
                    for w in plan.workers)
    return Plan(plan.layout, workers, plan.notes)


def check_shared_files(compiled: CompiledModel, captions: Path) -> None:
    """Everything a worker opens must be visible here under the submitter's paths."""
    paths = [p for m in compiled.modules for p in m.vmfbs]
    paths += [m.weights for m in compiled.modules if m.weights]
    paths.append(captions)
    for path in paths:
        if not Path(path).is_file():
            raise StepFailed(
                f"not visible on node {socket.gethostname()}", where=str(path),
                fix="the compile cache ($RUNNER_CACHE_DIR), model files and captions must be "
                "on a filesystem every node mounts at the same path")


def _starting_state(key: str, job_index: int, task: int) -> dict[str, Any]:
    """The node's record as it starts: which Slurm job, array task, host and incarnation
    it is, so a run's report can tell its nodes (and a requeued one's restarts) apart."""
    env = os.environ
    return {
        "key": key, "job_index": job_index, "array_task": task,
        "array_job_id": env.get("SLURM_ARRAY_JOB_ID"), "slurm_job_id": env.get("SLURM_JOB_ID"),
        "hostname": socket.gethostname(), "nodelist": env.get("SLURM_JOB_NODELIST"),
        "slurmd_nodename": env.get("SLURMD_NODENAME"),
        "restart_count": int(env.get("SLURM_RESTART_COUNT", "0") or 0), "pid": os.getpid(),
        "state": "starting", "started_at": _now(), "started": time.time(),
    }


def _worker_pool(run: RunDir, key: str, state: dict[str, Any]) -> WorkerPool:
    """The pool of this node's workers, planned on the cores Slurm gave it, each to take
    batches from the run's shared queue; what they are is added to the node's `state`."""
    manifest = run.load()
    profile = recorded_profile(manifest.profile_config, manifest.profile_path,
                               manifest.layout, str(run.manifest_path))
    options = SlurmOptions.from_dict(manifest.slurm_options)
    cores, how = allocated_cores()
    plan = node_plan(profile, key, cores)
    compiled = CompiledModel.from_dict(manifest.compiled)
    captions = Path(manifest.captions)
    check_shared_files(compiled, captions)
    launcher = executor_for(options.node_executor, profile, image=options.image,
                            captions=captions)
    state.update(cores=list(cores), cores_from=how, layout=plan.layout.to_dict(),
                 plan=plan.to_dict(), workers=[w.name for w in plan.workers],
                 executor=options.node_executor)
    print(f"node {key} on {state['hostname']}: {len(plan.workers)} worker(s) on cores "
          f"{list(cores)} ({how})", file=sys.stderr, flush=True)
    return WorkerPool(run.path, plan, compiled, manifest.captions,
                      launcher, set(manifest.sample_ids))  # type: ignore[arg-type]


def run_node(run_dir: Path, job_index: int) -> int:
    run = RunDir(run_dir)
    run_dir = run.path
    task = int(os.environ.get("SLURM_ARRAY_TASK_ID", "0"))
    key = node_key(job_index, task)
    state = _starting_state(key, job_index, task)
    write_node_state(run_dir, key, state)
    signal.signal(signal.SIGTERM, _on_sigterm)
    queue = WorkQueue(run_dir)
    # A requeued task runs again under the same key: its earlier incarnation is dead.
    stale = queue.release_prefix(worker_prefix(key))
    if stale:
        state["released_at_start"] = stale

    def end(how: str, code: int, **extra: Any) -> int:
        state.update(state=how, ended_at=_now(), ended=time.time(), exit_code=code, **extra)
        write_node_state(run_dir, key, state)
        return code

    try:
        pool = _worker_pool(run, key, state)
        state.update(state="running", worker_commands=pool.commands)
        write_node_state(run_dir, key, state)
        watch([pool])
        deaths = pool.deaths
    except Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one cleanup, even if signalled again
        released = queue.release_prefix(worker_prefix(key))
        print(f"node {key}: SIGTERM; {sum(map(len, released.values()))} batch(es) back in "
              "the queue", file=sys.stderr, flush=True)
        return end("cancelled", 143, released=released)
    except RunnerError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        released = queue.release_prefix(worker_prefix(key))
        return end("failed", 2, error=str(e), released=released)
    except BaseException as e:
        released = queue.release_prefix(worker_prefix(key))
        end("failed", 1, error=f"{type(e).__name__}: {e}", released=released)
        raise
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the work is over; record it whole
    print(f"node {key}: queue empty, {len(deaths)} worker death(s)", file=sys.stderr,
          flush=True)
    return end("failed" if deaths else "done", 1 if deaths else 0, deaths=deaths)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="runner.batch.node", description=__doc__,
                                     allow_abbrev=False)
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--job", required=True, type=int,
                        help="this run's submission index (the J of node key jJnT)")
    args = parser.parse_args(argv)
    return run_node(args.run_dir, args.job)


if __name__ == "__main__":
    raise SystemExit(main())

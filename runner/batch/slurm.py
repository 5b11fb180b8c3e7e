"""`runner run --executor slurm`: one run across many lab nodes, aggregated as one run.

The submitting process compiles, writes the manifest, fills the run's file queue once and
submits one `sbatch` job array with one array task per node. Each array task is a node task
(`python -m runner.batch.node`, runner/batch/node.py): it plans that node's workers from the
recorded profile (on the node, since cores and devices are the node's), starts them with the
local or docker executor, and watches them. Every worker on every node pulls batches from
the one queue and writes into the one sample store; the submitter waits, shows progress,
deals with failed node tasks, and then the usual completeness check and aggregation run once.

Why `sbatch` job arrays and not submitit: the cluster already gives us what submitit adds
(a job per node, restart on preemption), and what we need from it has to outlive Python
objects: the exact command to rerun (`reproduce.sh` must show plain sbatch lines a lab
engineer can read and retype), a batch script that is a file in the run dir, and state a
later `runner run --resume` or `runner status` can pick up from files alone. submitit
pickles a callable into its own folder, which ties a node task to the submitter's Python
and package versions and hides the command behind a pickle. One array is also one
scheduling decision and one job ID for N nodes (`scancel 1234` stops the run), instead of
N unrelated jobs.

Why one shared queue rather than static slices of the sample set: the queue *is* the split
across nodes, decided batch by batch as nodes ask for work, instead of up front. Nodes do
not start together (the scheduler starts array tasks as nodes free up), do not run at the
same speed (CPX vs SPX layouts, thermals, a slow NFS client), and can die; with static
slices the run takes as long as the slowest or latest node's slice, and a dead node's slice
must be re-planned. With the queue a node that starts late or runs slowly simply takes
fewer batches, a node that dies has its claimed batches renamed back into `pending/` for
the others, and a run is still exactly the requested sample set with every sample stored
once (the store is keyed by qsl_idx, and workers skip samples already stored). The split a
run actually got is recorded afterwards, per sample (worker and node in each PNG's tEXt and
in dataset.json), per worker (stats) and per node (slurm/nodes/*.json); `runner status`
shows it live. Results do not depend on which node made which sample, as long as every node
runs the same layout and compiled modules, which the manifest pins.

Failure handling. A node task writes its own state file (slurm/nodes/<key>.json: host,
SLURM_JOB_NODELIST, its plan, workers, state); only the submitter writes run.json. When an
array task leaves the queue (squeue) without having written state `done`, whether it
failed, was cancelled, hit its time limit or its node died, the submitter renames its
workers' claimed batches back to `pending/` (the node does the same itself on SIGTERM, and
a requeued task does it for its previous incarnation on start) and, while samples are
missing, submits a replacement array task (at most `max_resubmits` times per invocation),
so a run keeps its node count. Tasks are submitted with `--requeue`, so a preempted task
comes back under the same key; its batches are released as soon as squeue shows it waiting
again. Once every sample is stored, tasks still waiting for a node are cancelled (recorded
as `withdrawn`), so a run on a busy cluster ends when its work does. Ctrl-C in the
submitter cancels the run's jobs (as a local run kills its workers); if the submitter dies
otherwise (logout, SIGKILL), the jobs go on, and `runner run --resume DIR` re-attaches to
the ones still queued or running, releases the batches of those that are gone, and tops the
run up to its node count.

Simulated cluster (tests, scripts/slurm_setup.sh): one machine is the only node, with
CPUs=nproc. Array tasks are submitted with `--cpus-per-node 1` (`--cpus-per-task=1`), so
each "node" gets its own core and runs the cpu profile with one device (`--devices 0`). With
task/none Slurm does not bind the task to its core, so the node task reads the cores Slurm
allocated (`scontrol show job -d`, CPU_IDs) and plans its workers on those: two simulated
nodes never share a core. On a real lab node the default is `--exclusive` (the whole node).

Node keys are `j<J>n<T>`: submission J of this run (0 = the first array, then replacements
and resumes), array task T. Worker names are `<key>-w000`..., so every sample and batch
claim says which node made it, and releasing a node's work is a prefix match.

Requirements on a real cluster: the run dir, the compile cache ($RUNNER_CACHE_DIR), the
model files and the captions must be on a filesystem every node sees under the same path
(a node task checks this and fails with a clear error otherwise); the submitter's
environment is exported to the nodes (sbatch's default --export=ALL).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.base import shellscript
from runner.base.errors import ToolFailed
from runner.base.progress import Progress
from runner.base.shellscript import Script
from runner.batch.cluster import (
    LIVE_STATES,
    SLURM_DIR,
    SlurmOptions,
    cancel,
    check_slurm_commands,
    job_record,
    live_tasks,
    node_key,
    node_log_path,
    read_node_state,
    run_command,
    slurm_options,
    slurm_version,
    task_ids,
    worker_prefix,
)
from runner.batch.executors import CompileFn, Executed, Executor, WorkerProbe, probe_argv
from runner.batch.queue import WorkQueue
from runner.batch.run import log_tail, write_reproduce
from runner.config.layout import Plan, plan_workers
from runner.rundir.directory import RunDir
from runner.rundir.manifest import RunManifest
from runner.rundir.store import SampleStore

# squeue states of a task waiting to (re)start: a requeued task is back in one of these.
WAITING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD"})
# squeue failing this many times in a row (controller down) ends the wait; jobs go on.
MAX_QUERY_FAILURES = 30
# A task squeue has never listed counts as gone only after this long without a final state.
SUBMIT_GRACE_SECONDS = 120.0
# The CLI-facing names, importable from here too (they live in cluster.py, which is light).
__all__ = ["RunWatch", "SlurmExecutor", "SlurmOptions", "slurm_options"]


# --- submission -------------------------------------------------------------------------

def batch_script_text(run_dir: Path, job_index: int, reason: str) -> str:
    """The array's batch script: every task runs the same node command; the task id comes
    from SLURM_ARRAY_TASK_ID. A file in the run dir, so no command goes through --wrap.
    Rendered by runner/base/shellscript.py: the run dir is a quoted word, and comment lines
    start with `# `, so no name can become a command or an `#SBATCH` directive."""
    command = [sys.executable, "-m", "runner.batch.node", "--run-dir", str(run_dir.resolve()),
               "--job", str(job_index)]
    script = Script(shebang="#!/bin/bash")
    script.comment(f"iree-sdxl-runner node task, run {run_dir.resolve()}, submission "
                   f"j{job_index}: {reason}.")
    script.comment("One array task per node: plans this node's workers, starts them, and "
                   "pulls batches")
    script.comment("from the run's shared queue until it is empty (see runner/batch/slurm.py).")
    return script.run(command, exec_=True).text()


def sbatch_argv(run_dir: Path, options: SlurmOptions, job_index: int, tasks: int,
                script: Path) -> list[str]:
    argv = ["sbatch", "--parsable", f"--job-name=runner-{run_dir.resolve().name}",
            f"--array=0-{tasks - 1}", "--nodes=1", "--ntasks=1"]
    argv.append(f"--cpus-per-task={options.cpus_per_node}" if options.cpus_per_node
                else "--exclusive")
    if options.partition:
        argv.append(f"--partition={options.partition}")
    if options.time:
        argv.append(f"--time={options.time}")
    if options.account:
        argv.append(f"--account={options.account}")
    # sbatch expands %-patterns in --output (%a: the array task); a `%` in the run dir's
    # own path is doubled so it stays literal and node logs land where node_log_path reads.
    log = f"{str(RunDir(run_dir).logs).replace('%', '%%')}/node-j{job_index}n%a.log"
    argv += ["--requeue", f"--output={log}", "--open-mode=append", *options.sbatch_args,
             str(script.resolve())]
    return argv


def submit(run: RunDir, manifest: RunManifest, options: SlurmOptions, tasks: int,
           reason: str) -> dict[str, Any]:
    """Writes the batch script, runs sbatch, records the job in run.json and reproduce.sh."""
    run_dir = run.path
    slurm = _slurm_record(manifest)
    index = len(slurm["jobs"])
    script = run_dir / SLURM_DIR / f"j{index}.sbatch"
    text = batch_script_text(run_dir, index, reason)
    run.write_text(script, text)
    script.chmod(0o755)
    run.logs.mkdir(parents=True, exist_ok=True)
    argv = sbatch_argv(run_dir, options, index, tasks, script)
    try:
        proc = run_command(argv)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolFailed(f"sbatch did not run: {e}", where="sbatch",
                         fix="run on a login node where sbatch works (`sbatch --version`)") from e
    if proc.returncode != 0:
        raise ToolFailed(f"sbatch refused the job: {proc.stderr.strip() or proc.stdout.strip()}",
                         where=shlex.join(argv),
                         fix="check --slurm-partition, --account, --slurm-time and --sbatch-arg "
                         "against `sinfo` and your site's limits")
    job_id = proc.stdout.strip().split(";")[0]
    job = {"index": index, "job_id": job_id, "tasks": tasks, "reason": reason,
           "sbatch": argv, "script": str(script), "script_text": text,
           "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "submitted": time.time()}
    slurm["jobs"].append(job)
    run.save(manifest)
    with run.writing(run.reproduce_path):
        write_reproduce(run_dir, manifest)
    print(f"submitted Slurm job {job_id}: {tasks} node task(s) ({reason})", file=sys.stderr,
          flush=True)
    return job


# --- the submitter's wait ---------------------------------------------------------------

def _slurm_record(manifest: RunManifest) -> dict[str, Any]:
    """run.json's `slurm` record (options, version, jobs, nodes), made on first use."""
    if manifest.slurm is None:
        manifest.slurm = {}
    for key, empty in (("jobs", []), ("nodes", {})):
        manifest.slurm.setdefault(key, empty)
    return manifest.slurm


@dataclass
class RunWatch:
    """A Slurm run's node tasks as one `Execution` (runner/batch/executors.py)."""

    run: RunDir
    manifest: RunManifest
    options: SlurmOptions
    plan: Plan  # as expanded on the submitting host; each node plans its own
    requested: set[int]
    open: dict[str, str] = field(default_factory=dict)  # key -> slurm id, not concluded
    states: dict[str, str] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)  # keys squeue listed at least once
    submitted: dict[str, float] = field(default_factory=dict)  # key -> monotonic time
    withdrawn: set[str] = field(default_factory=set)  # cancelled by us: no work left
    resubmits: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)
    label: str = ""  # names the run in progress lines when several are watched at once
    meter: Progress | None = None  # set by begin()
    query_failures: int = 0

    @property
    def run_dir(self) -> Path:
        return self.run.path

    @property
    def interval(self) -> float:
        return self.options.poll_seconds

    @property
    def batch_size(self) -> int:
        return self.plan.layout.batch_size

    @property
    def store(self) -> SampleStore:
        return SampleStore(self.run_dir)

    def missing(self) -> set[int]:
        return self.requested - self.store.done_ids()

    def work_left(self) -> bool:
        """Samples missing, or a LoadGen driver still feeding the open queue (its run lists
        no samples: LoadGen issues them), so node tasks are wanted."""
        return bool(self.missing()) or WorkQueue(self.run_dir).is_open()

    def repair_queue(self) -> int:
        """Batches for missing samples no batch file holds (a lost release); normally 0."""
        queue = WorkQueue(self.run_dir)
        lost = self.missing() - queue.covered_ids()
        return queue.add(lost, self.batch_size) if lost else 0

    def submit(self, tasks: int, reason: str) -> None:
        job = submit(self.run, self.manifest, self.options, tasks, reason)
        for t in range(tasks):
            key = node_key(job["index"], t)
            self.open[key] = f"{job['job_id']}_{t}"
            self.submitted[key] = time.monotonic()

    def gone(self, key: str, slurm_id: str) -> bool:
        """Not listed by squeue: ended, unless it was just submitted and never listed yet
        (a federated or busy controller may lag); then only a final state says so."""
        if key in self.seen or key not in self.submitted:
            return True
        state = job_record(slurm_id).get("JobState")
        if state and state not in LIVE_STATES:
            return True
        return time.monotonic() - self.submitted[key] > SUBMIT_GRACE_SECONDS

    def withdraw_waiting(self) -> None:
        """Every sample is stored: tasks still waiting for a node (or for a requeue's
        restart) would only start, find the queue empty and exit, maybe hours later on a
        busy cluster. Cancel them so the run can end now."""
        waiting = {k: sid for k, sid in self.open.items()
                   if self.states.get(k) in WAITING_STATES and k not in self.withdrawn}
        if waiting:
            cancel(sorted(waiting.values()))
            self.withdrawn.update(waiting)
            print(f"\nall samples stored: cancelled {len(waiting)} node task(s) still "
                  f"waiting to start ({', '.join(sorted(waiting.values()))})",
                  file=sys.stderr, flush=True)

    def release_if_requeued(self, key: str) -> None:
        """A task back in the queue after it ran (node failure, preemption: --requeue)
        holds no worker any more; its batches go to the running nodes now rather than when
        Slurm restarts it."""
        if read_node_state(self.run_dir, key).get("state") in ("starting", "running"):
            released = WorkQueue(self.run_dir).release_prefix(worker_prefix(key))
            if released:
                print(f"\nnode task {key} was requeued by Slurm; "
                      f"{sum(map(len, released.values()))} batch(es) back in the queue",
                      file=sys.stderr, flush=True)

    def conclude(self, key: str, slurm_id: str) -> dict[str, Any]:
        """An array task Slurm no longer runs: record how it ended, release its batches."""
        node = read_node_state(self.run_dir, key)
        final = job_record(slurm_id)
        outcome = node.get("state") if node.get("state") in ("done", "failed", "cancelled") \
            else "lost"
        if key in self.withdrawn and outcome != "done":
            outcome = "withdrawn"  # not a failure: every sample was stored without it
        released = {}
        if outcome != "done":
            released = WorkQueue(self.run_dir).release_prefix(worker_prefix(key))
        record = {**node, "key": key, "slurm_id": slurm_id, "slurm": final,
                  "outcome": outcome, "released_by_submitter": released}
        if outcome not in ("done", "withdrawn"):
            record["log_tail"] = log_tail(node_log_path(self.run_dir, key))
            by_node = node.get("released", {})  # the node's own SIGTERM/error release
            failure = {"node": key, "slurm_id": slurm_id, "outcome": outcome,
                       "job_state": final.get("JobState", "?"),
                       "requeued": sorted(b for bs in [*released.values(), *by_node.values()]
                                          for b in bs),
                       "log_tail": record["log_tail"]}
            self.failures.append(failure)
            print(f"\nnode task {key} ({slurm_id} on {node.get('hostname', '?')}) ended "
                  f"{outcome} (Slurm: {final.get('JobState', '?')}); "
                  f"{len(failure['requeued'])} batch(es) back in the queue. Last log lines:\n"
                  f"{record['log_tail']}", file=sys.stderr, flush=True)
        _slurm_record(self.manifest)["nodes"][key] = record
        self.run.save(self.manifest)
        return record

    def progress(self, final: bool = False) -> None:
        if self.meter is None:
            return
        done = len(self.requested) - len(self.missing())
        counts: dict[str, int] = {}
        for state in self.states.values():
            counts[state.lower()] = counts.get(state.lower(), 0) + 1
        nodes = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none live"
        if final:
            self.meter.finish(extra=f"node tasks: {nodes}", done=done)
        else:
            self.meter.update(done, extra=f"node tasks: {nodes}")

    def begin(self, initial_tasks: int, reason: str) -> None:
        """Starts the clock and submits `initial_tasks` node tasks (if any)."""
        # Several runs watched at once (a sweep) print whole lines, each named by its label.
        self.meter = Progress(self.label or "run", len(self.requested), unit="samples",
                              already=len(self.requested) - len(self.missing()),
                              live=not self.label)
        if initial_tasks:
            self.submit(initial_tasks, reason)

    def job_ids(self) -> list[str]:
        return sorted({sid.split("_")[0] for sid in self.open.values()})

    def poll(self) -> bool:
        """One look at the run's node tasks: records the ones that ended, releases their
        batches, submits replacements while samples are missing. False once no task of
        the run is live (the run is over, complete or not)."""
        live = live_tasks(self.job_ids())
        if live is None:
            self.query_failures += 1
            if self.query_failures >= MAX_QUERY_FAILURES:
                raise ToolFailed(
                    "squeue keeps failing; stopped waiting (the node tasks go on)",
                    where="squeue", fix=f"when Slurm answers again, `runner run "
                    f"--resume {self.run_dir}` re-attaches")
            return True
        self.query_failures = 0
        failed_now = 0
        for key, sid in list(self.open.items()):
            if sid in live:
                self.states[key] = live[sid]["state"]
                self.seen.add(key)
                if live[sid]["state"] in WAITING_STATES:
                    self.release_if_requeued(key)
                continue
            if not self.gone(key, sid):
                continue
            del self.open[key]
            self.states.pop(key, None)
            if self.conclude(key, sid)["outcome"] not in ("done", "withdrawn"):
                failed_now += 1
        need = failed_now or (0 if self.open else self.options.nodes)
        if need and self.work_left():
            if self.resubmits < self.options.max_resubmits:
                self.repair_queue()
                self.resubmits += 1
                batches = WorkQueue(self.run_dir).pending_count()
                tasks = max(1, min(need, self.options.nodes, batches or 1))
                why = (f"replaces {failed_now} failed node task(s)" if failed_now
                       else f"{len(self.missing())} samples left after every node "
                       "task ended")
                self.submit(tasks, why)
            elif not self.open:
                print(f"\nno node task left and --max-resubmits "
                      f"{self.options.max_resubmits} used up; "
                      f"{len(self.missing())} samples missing", file=sys.stderr)
        if not self.work_left():
            self.withdraw_waiting()
        if not self.open:
            self.progress(final=True)
            return False
        self.progress()
        return True


    def stop(self) -> None:
        """Ctrl-C in the submitter cancels the run's jobs (as a local run kills its
        workers); a submitter that dies otherwise leaves them working, and `runner run
        --resume DIR` re-attaches."""
        jobs = self.job_ids()
        cancel(jobs)
        print(f"\ninterrupted: cancelled Slurm job(s) {', '.join(jobs) or '-'}; "
              f"`runner run --resume {self.run_dir}` completes the run", file=sys.stderr)

    def result(self) -> Executed:
        """Every node's workers, deaths and worker commands; the wall time from the first
        node task starting to the last one ending, so time spent waiting in the Slurm
        queue does not count."""
        records = _all_node_records(self.run_dir, self.manifest)
        deaths: list[dict[str, Any]] = list(self.failures)
        commands: dict[str, str] = {}
        workers: list[str] = []
        for record in records.values():
            deaths += [{**d, "node": record.get("key")} for d in record.get("deaths", [])]
            commands.update(record.get("worker_commands", {}))
            workers += record.get("workers", [])
        nodes = [n for n in records.values() if n.get("started")]
        if nodes:
            start = min(n["started"] for n in nodes)
            end = max(n.get("ended", n["started"]) for n in nodes)
        else:
            start = end = time.time()
        return Executed(start, end - start, workers, deaths, commands)


def _all_node_records(run_dir: Path, manifest: RunManifest) -> dict[str, dict[str, Any]]:
    out = {}
    slurm = _slurm_record(manifest)
    for key in task_ids(slurm):
        record = slurm["nodes"].get(key) or read_node_state(run_dir, key)
        if record:
            out[key] = record
    return out


class SlurmExecutor:
    """Node tasks as one sbatch job array over the run's shared queue (see the module
    docstring); each node task starts its workers with the `node` executor's launcher."""

    name = "slurm"
    on_this_host = False

    def __init__(self, options: SlurmOptions, node: Executor, label: str = ""):
        self.options, self.node, self.label = options, node, label

    def compiler(self, work_dir: Path, dry_run: bool = False) -> CompileFn:
        """The node executor's: the host's for local workers, the image's for docker."""
        return self.node.compiler(work_dir, dry_run)

    def image_info(self) -> dict[str, Any] | None:
        """The harness image as this host's engine sees it; None without one here (the
        nodes, not the login node, need the image)."""
        try:
            return self.node.image_info()
        except Exception:  # no docker here: the nodes record what they ran
            return None

    def check(self, plan: Plan, where: str, dry_run: bool = False) -> list[str]:
        """The Slurm commands are here (a dry run too: it fails where the run would), and
        a cpu layout fits the CPUs each node task gets (else every node would fail)."""
        check_slurm_commands()
        cpus = self.options.cpus_per_node
        if cpus and plan.layout.backend == "cpu":
            plan_workers(plan.layout, tuple(range(cpus)),
                         where=f"{where} (a node task with --cpus-per-node {cpus})")
        return []

    def probe_worker(self, plan: Plan) -> WorkerProbe:
        """Not started from the submitting host (an srun would wait in the queue): the
        command that asks one node, as its node tasks will start workers."""
        o = self.options
        srun = ["srun", "--nodes=1", "--ntasks=1",
                *([f"--partition={o.partition}"] if o.partition else []),
                *([f"--account={o.account}"] if o.account else [])]
        return WorkerProbe(shellscript.join([*srun, *probe_argv(plan.workers[0], "python3")]),
                           None, "on the Slurm nodes, as each node task starts")

    def keeps_queue(self, run: RunDir, manifest: RunManifest) -> bool:
        """True while node tasks of an earlier submitter are queued or running."""
        return bool(self._unconcluded(manifest)) and bool(self._live(manifest))

    def _unconcluded(self, manifest: RunManifest) -> dict[str, str]:
        slurm = _slurm_record(manifest)
        return {k: sid for k, sid in task_ids(slurm).items()
                if slurm["nodes"].get(k, {}).get("outcome") is None}

    def _live(self, manifest: RunManifest) -> dict[str, dict[str, str]]:
        unconcluded = self._unconcluded(manifest)
        if not unconcluded:
            return {}
        live = live_tasks(sorted({sid.split("_")[0] for sid in unconcluded.values()}))
        if live is None:
            raise ToolFailed("squeue failed; cannot tell which node tasks still run",
                             where="squeue", fix="retry when the Slurm controller answers")
        return live

    def commands(self, run_dir: Path, plan: Plan) -> list[str]:
        """The first submission: its sbatch command and the node command of its batch
        script (each node task then plans and starts its own workers, as the node executor
        would on this host's plan, shown after it)."""
        run = RunDir(run_dir)
        script = run.path / SLURM_DIR / "j0.sbatch"
        node = [sys.executable, "-m", "runner.batch.node", "--run-dir", str(run.path),
                "--job", "0"]
        return [shellscript.join(sbatch_argv(run.path, self.options, 0, self.options.nodes,
                                             script)),
                f"# {shellscript.sanitize(str(script))} runs on each node: "
                f"{shellscript.join(node)}",
                "# which starts, on a node like this host:",
                *[f"#   {line}" for line in self.node.commands(run.path, plan)]]

    def start(self, run: RunDir, manifest: RunManifest, plan: Plan) -> RunWatch:
        """Submits the run's node tasks, or re-attaches to those of an earlier submitter
        that are still queued or running and tops the run up to its node count."""
        self.check(plan, manifest.profile_path)
        options = self.options
        slurm = _slurm_record(manifest)
        slurm.update(options=options.to_dict(), version=slurm_version())
        watch = RunWatch(run, manifest, options, plan, set(manifest.sample_ids),
                         label=self.label)
        live = self._live(manifest)
        for key, sid in self._unconcluded(manifest).items():
            if sid in live:
                watch.open[key] = sid
            else:
                watch.conclude(key, sid)
        if watch.open:
            print(f"re-attached to {len(watch.open)} running node task(s)", file=sys.stderr)
        run.save(manifest)
        extra = max(0, options.nodes - len(watch.open)) if watch.work_left() else 0
        first = not slurm["jobs"]
        watch.begin(extra, f"initial: {extra} node(s)" if first else f"resume: {extra} node(s)")
        return watch

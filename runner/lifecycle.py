"""A run's whole life, in one place: plan -> compile -> fill queue -> execute -> aggregate
-> score -> report, and resume.

Every driver goes through `Lifecycle`: `runner run` (runner/batch/cli.py), `runner validate`,
`runner bench` (runner/bench/sweep.py) and the LoadGen driver. None of them re-implements a
step; they differ only in which executor runs the work and which steps they ask for.

Public API (the shape other drivers build on):

    lc = Lifecycle.create(run_dir, profile, sample_ids, argv, executor,
                          captions=None, compile_fn=None, score=True)
        # takes the run dir's lock, plans, compiles, writes run.json + reproduce.sh
    lc = Lifecycle.open(run_dir)        # takes the lock, loads the manifest; a dangling
                                        # `running` attempt (its driver was killed) ->
                                        # interrupted
    lc.check_request(profile, sample_ids)   # a resume asking for something else: error
    lc.resume(executor, compile_fn=None)    # same modules or an error; status running
    execution = lc.start(fill=True)     # records the attempt as running, fills the queue
                                        # (fill=False: the caller feeds it, e.g. LoadGen),
                                        # starts the executor (None: nothing left to do)
    watch([execution, ...])             # runner/batch/executors.py: poll until all ended
    outcome = lc.finish_attempt(execution.result())   # attempt finished, completeness
    outcome = lc.execute()              # start + watch + finish_attempt
    done = lc.complete()                # aggregate -> score (if the run scores) -> status
                                        # complete -> reports
    lc.aggregate(); lc.score(...); lc.report(...)     # the steps one by one (validate)
    lc.close()                          # releases the lock (also `with Lifecycle...`)

`execute_run(...)` is create -> execute in one call (benchmarks that time only that).
`executor_for(name, profile, ...)` makes the executor for a name (`local`, `docker`,
`slurm`); nothing else in the runner branches on an executor's name.

Status in run.json: `running` while a driver works on it (or until a killed driver's run is
resumed), `incomplete` when an attempt ended with samples missing or a disk filled up,
`executed` when every sample is stored but the dataset is not aggregated yet (a bench run
stops there), `complete` only once every sample, the MLPerf accuracy log and dataset.json (and
accuracy.json for a scored run) are written. Reports are written after that; they are views
that `runner report DIR` can always rewrite.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runner.base import shellscript
from runner.base.closing import Closes
from runner.base.conditions import Watch
from runner.base.errors import BadInput, RunnerError, StepFailed, recorded_name
from runner.base.progress import echo
from runner.base.provenance import host_info, iree_provenance
from runner.base.steps import StepStatus
from runner.batch.aggregate import AggregateResult, aggregate
from runner.batch.executor_for import executor_for
from runner.batch.executors import Executed, Execution, Executor, LocalExecutor, watch
from runner.batch.lifeline import reap_orphans
from runner.batch.queue import WorkQueue
from runner.batch.run import RunOutcome, plan_for, recorded_profile, write_reproduce
from runner.batch.worker import stats_path
from runner.config.layout import Plan
from runner.config.mlperf_data import CAPTIONS_FILE
from runner.config.profile import Profile
from runner.preflight.check import CheckState, Preflight, PreflightCheck
from runner.preflight.run import PreflightRequest, run_preflight
from runner.rundir.directory import DiskFull, RunDir
from runner.rundir.manifest import Attempt, RunManifest, now_text
from runner.rundir.mlperf_log import LOG_NAME
from runner.rundir.store import SampleStore

ACCURACY_JSON = "accuracy.json"
LOW_SPACE_BYTES = 4 << 20  # an SDXL sample PNG is about 1.5 MB


@dataclass
class Completed:
    """What the last steps produced: the dataset, the verdict (None: not scored) and the
    report files."""

    aggregate: AggregateResult
    score: Any = None  # runner.accuracy.evaluate.RunScore
    reports: list[Path] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return self.score.verdict.exit_code if self.score is not None else 0


class Lifecycle(Closes):
    """One run dir, driven by this process, which holds its lock until `close()`."""

    def __init__(self, run: RunDir, manifest: RunManifest, profile: Profile,
                 executor: Executor | None, plan: Plan | None = None):
        self.run, self.manifest, self.profile = run, manifest, profile
        self.executor = executor
        self.plan = plan or plan_for(profile)
        self.attempt: Attempt | None = None
        self._watch: Watch | None = None

    def close(self) -> None:
        self.run.unlock()

    @property
    def store(self) -> SampleStore:
        return SampleStore(self.run.path)

    @property
    def requested(self) -> set[int]:
        return set(self.manifest.sample_ids)

    # --- a new run ----------------------------------------------------------------------
    @classmethod
    def create(cls, run_dir: Path | str, profile: Profile, sample_ids: list[int],
               argv: list[str], executor: Executor, *, captions: Path | None = None,
               compile_fn: Any = None, score: bool = True, plan: Plan | None = None,
               share_gpus: bool = False, checked: Preflight | None = None) -> Lifecycle:
        """Plans, runs the preflight (exit 2 before anything is compiled when a check
        fails), compiles, creates the run dir and its manifest; runs nothing.

        `compile_fn(profile, batch, vae_batch)` defaults to the executor's compiler (the
        harness image's own for containers), whose IREE is then the one recorded.
        `checked`: the preflight its caller ran already (LoadGen's, which knows the
        samples and the scoring its tests need)."""
        run = RunDir(run_dir)
        created = not run.path.exists()
        _check_free(run)
        plan = plan or plan_for(profile)
        executor.check(plan, str(profile.path))
        # The model's files opened as the export opens them, with the other checks: a
        # missing checkpoint is listed beside a missing statistics file, not found after.
        model = [] if compile_fn else [dry_compile(executor, run.path, profile)[1]]
        checked = checked or preflight(
            PreflightRequest(run.path, profile, plan, len(sample_ids), score, captions,
                             share_gpus), executor, dry_run=False, before=model)
        run.lock()
        try:
            _check_free(run)  # made meanwhile by a driver that has finished since
            layout = plan.layout
            compile_fn = compile_fn or executor.compiler(run.path)
            compiled = compile_fn(profile, layout.batch_size, layout.vae_batch_size)
            image = executor.image_info()
            manifest = RunManifest(
                argv=list(argv), profile=profile.name, profile_path=str(profile.path),
                profile_config=profile.to_dict(), layout=layout.to_dict(), plan=plan.to_dict(),
                sample_ids=sorted(sample_ids),
                captions=str((captions or CAPTIONS_FILE).resolve()),
                compiled=compiled.to_dict(), host=host_info(),
                iree=(image or {}).get("provenance") or iree_provenance(),
                executor=executor.name, image=image, score=score, cwd=os.getcwd(),
                model=profile.model.record(), preflight=checked.to_dict())
            run.save(manifest)
            run.write_sample_ids(manifest.sample_ids)
            lc = cls(run, manifest, profile, executor, plan)
            lc.write_reproduce()
            return lc
        except BaseException:
            run.unlock()
            if created and not run.exists():
                _remove_empty(run.path)
            raise

    # --- an existing run ----------------------------------------------------------------
    @classmethod
    def open(cls, run_dir: Path | str) -> Lifecycle:
        """Locks and loads a run. An attempt still `running` belongs to a driver that is
        gone (we hold the lock now): it is recorded as `interrupted` (StepStatus.settled)."""
        run = RunDir(run_dir)
        if not run.exists():
            run.load()  # the clear "not a run dir" error, without creating anything
        run.lock()
        try:
            manifest = run.load()
            profile = recorded_profile(manifest.profile_config, manifest.profile_path,
                                       manifest.layout, str(run.manifest_path))
            # Workers of a driver that died stop (or are stopped) before anything here
            # judges which samples are done: none is still being written.
            orphans = reap_orphans(run.path, lambda line: print(line, file=sys.stderr))
            dangling = [a for a in manifest.attempts if a.status is StepStatus.RUNNING]
            for attempt in dangling:
                attempt.status = attempt.status.settled()
                if orphans:
                    attempt.error = (f"driver died; {len(orphans)} worker(s) still running "
                                     "were stopped: " + ", ".join(
                                         f"{o.name} (pid {o.process.pid})" for o in orphans))
            if dangling:
                if manifest.status == "running":
                    manifest.status = "incomplete"
                run.save(manifest)
            return cls(run, manifest, profile, None)
        except BaseException:
            run.unlock()
            raise

    def check_request(self, requested: Profile | None = None,
                      sample_ids: list[int] | None = None) -> None:
        """A resume that asks for another profile, layout or sample set is refused: results
        are not bit-identical across layouts, and a run is one fixed sample set."""
        where = str(self.run.manifest_path)
        recorded = self.profile
        if requested is not None and (requested.to_dict() != recorded.to_dict()
                                      or requested.layout != recorded.layout):
            raise BadInput(
                f"run was made with profile {recorded.name} and layout "
                f"{recorded.layout.to_dict()}; resuming with {requested.name} / "
                f"{requested.layout.to_dict()} would mix results", where=where,
                fix="resume without --profile/--set/layout flags, or start a new --out")
        if sample_ids is not None and sorted(sample_ids) != sorted(self.manifest.sample_ids):
            raise BadInput(
                f"run was made for {len(self.manifest.sample_ids)} samples; this resume asks "
                f"for {len(sample_ids)} others", where=where,
                fix="resume without --count/--ids, or start a new --out for another set")

    def resume(self, executor: Executor, compile_fn: Any = None, *, share_gpus: bool = False,
               checked: Preflight | None = None) -> None:
        """The preflight for the samples still missing (`checked`: its caller's), then the
        run's modules again (a cache hit normally); other modules are refused."""
        missing = len(self.requested - self.store.done_ids())
        checked = checked or preflight(
            PreflightRequest(self.run.path, self.profile, self.plan, missing,
                             self.manifest.score, Path(self.manifest.captions), share_gpus,
                             len(self.requested)),
            executor, dry_run=False)
        self.manifest.preflight = checked.to_dict()
        self.executor = executor
        layout = self.profile.layout
        compile_fn = compile_fn or executor.compiler(self.run.path)
        compiled = compile_fn(self.profile, layout.batch_size, layout.vae_batch_size)
        if [c.key for c in compiled.compiled] != self.manifest.compiled_keys:
            raise BadInput("the compiled modules differ from the ones this run started with "
                           "(another iree-compile or changed flags/MLIR)",
                           where=str(self.run.manifest_path),
                           fix="resume with the IREE the run started with, or start a new "
                           "--out")
        self.manifest.compiled = compiled.to_dict()
        self.manifest.executor = executor.name
        self.manifest.status = "running"
        self.run.save(self.manifest)

    # --- execute ------------------------------------------------------------------------
    def start(self, fill: bool = True) -> Execution | None:
        """Records this attempt as running, fills the queue with the missing samples and
        starts the executor; None when no sample is missing and nothing is left running.
        With fill=False the workers start on the queue as it is (a LoadGen driver feeds
        it query by query)."""
        executor = self._executor()
        self.attempt = Attempt(executor=executor.name)
        self._watch = Watch().start()
        self.manifest.attempts.append(self.attempt)
        self.manifest.status = "running"
        self.run.save(self.manifest)
        # Every sample checked against its sha256: a corrupt one is moved aside and redone.
        missing = self.requested - self.store.verified_ids(self.requested)
        queue = WorkQueue(self.run.path)
        with self.run.writing(queue.root):
            if not fill:
                pass
            elif executor.keeps_queue(self.run, self.manifest):
                lost = missing - queue.covered_ids()
                if lost:
                    queue.add(lost, self.plan.layout.batch_size)
            elif missing:
                queue.fill(missing, self.plan.layout.batch_size)
            else:
                return None
            return executor.start(self.run, self.manifest, self.plan)

    def finish_attempt(self, executed: Executed | None) -> RunOutcome:
        """Ends the attempt in the manifest (deaths, worker stats and commands) and checks
        completeness; a disk that filled up under the workers is said so."""
        done = self.store.done_ids()
        requested = self.requested
        executed = executed or Executed(time.time(), 0.0)
        attempt = self.attempt or Attempt(executor=self._executor().name)
        attempt.status, attempt.finished_at = StepStatus.FINISHED, now_text()
        attempt.seconds, attempt.deaths = executed.seconds, executed.deaths
        attempt.conditions = _conditions(self._watch, attempt.executor)
        m = self.manifest
        if executed.workers:
            m.workers = _worker_stats(self.run.path, executed.workers)
            m.worker_commands = executed.commands
        m.missing = sorted(requested - done)
        m.unexpected = sorted(done - requested)
        failed = self.store.failures(m.missing)
        m.failed = [f.to_dict() for f in failed.values()]
        m.status = "executed" if not m.missing else "incomplete"
        full = None
        if m.missing and executed.deaths and _disk_full(self.run.path, executed.deaths):
            self.run.remove_temp_files(self.store.dir)
            full = DiskFull(self.store.dir, self.run.path)
            attempt.status, attempt.error = StepStatus.FAILED, str(full)
        self.run.save(m)
        self.write_reproduce()
        if full is not None:
            raise full
        return RunOutcome(self.run.path, len(requested), len(requested & done),
                          executed.seconds, executed.deaths, failed)

    def execute(self) -> RunOutcome:
        """start -> watch -> finish_attempt; an interrupt (Ctrl-C, SIGTERM raised as an
        exception) ends the attempt as `interrupted`, a full disk or another error as
        `failed` (StepStatus.of_error)."""
        try:
            execution = self.start()
            if execution is not None:
                watch([execution])
            return self.finish_attempt(execution.result() if execution else None)
        except BaseException as e:  # a full disk, Ctrl-C, SIGTERM: the attempt says so
            if self.attempt is not None and self.attempt.status is StepStatus.RUNNING:
                self.attempt.status = StepStatus.of_error(e)
                self.attempt.error = (recorded_name(e) if self.attempt.status is
                                      StepStatus.INTERRUPTED else str(e))
                self.attempt.finished_at = now_text()
                self.manifest.status = "incomplete"
                with contextlib.suppress(OSError):  # DiskFull is one
                    self.run.save(self.manifest)
            raise

    # --- the last steps -----------------------------------------------------------------
    def aggregate(self, allow_incomplete: bool = False) -> AggregateResult:
        with self._step(self.run.path / LOG_NAME):
            return aggregate(self.run.path, allow_incomplete=allow_incomplete)

    def score(self, profile: str | None = None, allow_subset: bool = False,
              require_full: bool = False) -> Any:
        """FID/CLIP against the profile's ranges; None (saying why) when the profile has no
        ranges or the [metrics] extra is missing. `require_full`: a subset fails."""
        if profile is None and not self.profile.accuracy.has_ranges():
            print("not scored: the profile has no accuracy ranges", file=sys.stderr)
            return None
        try:
            from runner.accuracy.evaluate import evaluate_run
        except ImportError as e:
            print(f"not scored: {e} (pip install -e '.[metrics]')", file=sys.stderr)
            return None
        with self._step(self.run.path / ACCURACY_JSON):
            # The metrics the run was made with (`--metrics` is an override of the recorded
            # profile, which a profile file read again would not have).
            return evaluate_run(self.run.path, profile=profile, allow_subset=allow_subset,
                                require_full=require_full,
                                metrics=None if profile else self.profile.accuracy.metrics)

    def report(self, against: Path | None = None) -> list[Path]:
        from runner.report import write_reports

        with self._step(self.run.path / "summary.md"):
            return list(write_reports(self.run.path, against=against))

    def complete(self, score: bool | None = None, reports: bool = True,
                 require_full: bool = False) -> Completed:
        """Aggregate -> score (as the run was made, unless told) -> complete -> reports
        (left to the caller with reports=False, e.g. to compare against a baseline)."""
        result = Completed(self.aggregate())
        if self.manifest.score if score is None else score:
            result.score = self.score(require_full=require_full)
        self.manifest.status = "complete"
        self.run.save(self.manifest)
        if reports:
            result.reports = self.report()
        return result

    def rescore(self, require_full: bool = False) -> Completed:
        """A complete run scored again (asked for with --rescore), reports rewritten."""
        result = Completed(self.aggregate(), self.score(require_full=require_full))
        result.reports = self.report()
        return result

    def write_reproduce(self) -> None:
        with self.run.writing(self.run.reproduce_path):
            write_reproduce(self.run.path, self.manifest)

    # --- helpers ------------------------------------------------------------------------
    def _executor(self) -> Executor:
        if self.executor is None:
            raise StepFailed("internal: Lifecycle.resume(executor) was not called",
                             where=str(self.run.path),
                             fix="call resume(executor) before start(); a runner bug")
        return self.executor

    @contextlib.contextmanager
    def _step(self, target: Path) -> Iterator[None]:
        """A last step's writes: a full disk leaves the run `incomplete` (never complete
        without its outputs) and no temp file behind."""
        try:
            with self.run.writing(target):
                yield
        except DiskFull:
            self.manifest.status = "incomplete"
            with contextlib.suppress(DiskFull):  # else run.json keeps its last state,
                self.run.save(self.manifest)     # which is not `complete` either
            raise


def preflight(request: PreflightRequest, executor: Executor, dry_run: bool,
              before: Sequence[PreflightCheck] = ()) -> Preflight:
    """The preflight run, judged and shown as every command's is (`Preflight.shown`): a
    failure raises (exit 2) after every check's line, so one try shows every fix to make;
    else a dry run prints the lines as comments ahead of its commands, and a real run on
    stderr. `before`: checks its caller made already (a dry run's compile plan)."""
    checked = Preflight.of([*before, *run_preflight(request, executor).checks])
    return checked.shown(dry_run, echo)


def dry_run_lines(run_dir: Path | str, profile: Profile, sample_ids: list[int],
                  executor: Executor, *, score: bool = True, captions: Path | None = None,
                  share_gpus: bool = False) -> list[str]:
    """What `create` then `execute` would run, exactly, with the inputs checked first as
    `create` checks them (the run dir holds no run, the layout plans, the preflight, whose
    lines it prints): the compile commands (modules already in the cache are reused), the
    worker plan and each worker's (or the Slurm submission's) command. Nothing is created,
    compiled or started."""
    run = RunDir(run_dir)
    _check_free(run)
    plan = plan_for(profile)
    notes = executor.check(plan, str(profile.path), dry_run=True)
    compiled, model = dry_compile(executor, run.path, profile)
    preflight(PreflightRequest(run.path, profile, plan, len(sample_ids), score, captions,
                               share_gpus), executor, True, [model])
    return [f"# {shellscript.sanitize(note)}" for note in notes] + plan_lines(
        plan, executor, run.path, compiled,
        f"# runner run: {len(sample_ids)} samples of profile {profile.name} "
        f"into {shellscript.sanitize(str(run.path))}, executor {executor.name}")


def dry_compile(executor: Executor, work_dir: Path, profile: Profile
                ) -> tuple[Any, PreflightCheck]:
    """The compile a dry run prints (the checkpoint and exports opened as the export opens
    them), as the preflight's first check: a missing checkpoint is listed with the other
    failures, not found alone after they are fixed."""
    layout = profile.layout
    try:
        compiled = executor.compiler(work_dir, dry_run=True)(profile, layout.batch_size,
                                                             layout.vae_batch_size)
    except RunnerError as e:
        return None, PreflightCheck.failed("model", e)
    return compiled, PreflightCheck("model", CheckState.OK,
                                    f"{profile.model.name}: {len(compiled.compiled)} module(s)")


def plan_lines(plan: Plan, executor: Executor, run_dir: Path, compiled: Any,
               heading: str) -> list[str]:
    """A dry run's lines for the workers of one run dir (`runner run`, `runner mlperf`)."""
    return [heading, "# compile (modules already in the cache are reused):",
            *[shellscript.join(c.command) for c in compiled.compiled],
            f"# {len(plan.workers)} worker(s):", *[f"#   {line}" for line in
                                                   plan.table().splitlines()],
            *[f"#   note: {note}" for note in plan.notes],
            *executor.commands(run_dir, plan)]


def _check_free(run: RunDir) -> None:
    if run.exists():
        raise BadInput("this directory already holds a run", where=str(run.path),
                       fix=f"use `runner run --resume {run.path}` or another --out")


def execute_run(run_dir: Path | str, profile: Profile, sample_ids: list[int],
                argv: list[str], executor: Executor | None = None, **create: Any
                ) -> RunOutcome:
    """A new run up to its stored samples (create -> execute; no aggregation or score):
    what a throughput benchmark times."""
    with Lifecycle.create(run_dir, profile, sample_ids, argv, executor or LocalExecutor(),
                          score=False, **create) as lc:
        return lc.execute()


def _conditions(watch: Watch | None, executor: str) -> dict[str, Any] | None:
    """What else the machine did while the workers ran. Only local workers are this
    process' children, whose CPU time it can tell from others'; docker's and Slurm's are
    not, so their runs record the load and the CPU's settings, and no foreign share."""
    if watch is None:
        return None
    c = watch.stop()
    if executor != "local":
        c = replace(c, foreign_cores=None, own_cores=None)
    return c.to_dict()


def _disk_full(run_dir: Path, deaths: list[dict[str, Any]]) -> bool:
    """Whether the workers died of a full disk: their logs say so, or (a log cannot be
    written on a full disk either) less than one SDXL sample's worth of space is left."""
    if any("No space left" in d.get("log_tail", "") for d in deaths):
        return True
    return shutil.disk_usage(run_dir).free < LOW_SPACE_BYTES


def _worker_stats(run_dir: Path, names: list[str]) -> dict[str, Any]:
    out = {}
    for name in names:
        path = stats_path(run_dir, name)
        try:
            out[name] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a worker that never finished a batch wrote none
    return out


def _remove_empty(path: Path) -> None:
    """A new run that failed before its manifest leaves no directory behind."""
    try:
        for sub in sorted(path.rglob("*"), reverse=True):
            if sub.is_dir():
                sub.rmdir()
        path.rmdir()
    except OSError:
        pass  # something is in there: keep it


def run_profile(profile: Profile | str, out: Path | str,
                sample_ids: Sequence[int] | None = None, *, score: bool = True,
                captions: Path | str | None = None, executor: Executor | None = None,
                require_full: bool = False, argv: Sequence[str] | None = None) -> Completed:
    """Runs a profile's samples into a new run dir, end to end, as `runner run` does.

    Compiles (through the compile cache), creates the run dir and its `run.json`, runs the
    workers until every sample is stored, aggregates MLPerf's accuracy log, scores FID/CLIP
    against the profile's ranges (unless `score` is False) and writes the reports
    (summary.md, results.json, junit.xml, report.html). `runner run --resume OUT` resumes it.

    Args:
        profile: a `Profile` (`runner.config.profile.load_profile`) or a profile's name or
            path, e.g. `"cpu"`: the tiny model on the CPU.
        out: the run dir to create; it must not hold a run already.
        sample_ids: the MLPerf caption indices to generate (default: `0..count-1`, the
            profile's `count`).
        score: score and judge FID/CLIP (False is `runner run --no-score`).
        captions: MLPerf's captions TSV (default: the copy shipped with the runner).
        executor: where the workers run (default: local processes).
        require_full: a subset of the samples the ranges were set for fails (exit code 1)
            instead of being labelled "not judged".
        argv: the command line `run.json` and `reproduce.sh` record (default: the
            `runner run` line asking for the same profile file and samples).

    Returns:
        The `Completed` run: `aggregate` (the dataset), `score` (the verdict, None when not
        scored), `reports` (the files written) and `exit_code` (1 when the verdict fails).

    Raises:
        BadInput: a wrong profile, sample id or captions file, or an `out` holding a run.
        StepFailed: a compile, a worker or the score could not finish.
        RunnerError: samples failed (the message has the first one's reason and fix).
        IncompleteRun: the workers stopped with samples missing (resume the run dir).
    """
    from runner.batch.run import validate_ids
    from runner.config.profile import load_profile

    profile = load_profile(profile) if isinstance(profile, str) else profile
    captions = Path(captions) if captions is not None else None
    ids = validate_ids(list(range(profile.count)) if sample_ids is None else list(sample_ids),
                       "sample_ids", captions)
    argv = _run_argv(profile, ids, captions, score) if argv is None else argv
    with Lifecycle.create(out, profile, ids, list(argv), executor or LocalExecutor(),
                          captions=captions, score=score) as lc:
        _check_outcome(lc, lc.execute())
        return lc.complete(require_full=require_full)


def _run_argv(profile: Profile, ids: list[int], captions: Path | None, score: bool
              ) -> list[str]:
    """The `runner run` command line asking for this profile file and these samples."""
    from runner.accuracy.samples import format_ids

    return ["run", "--profile", str(profile.path), "--samples", format_ids(ids),
            *(["--captions", str(captions)] if captions else []),
            *([] if score else ["--no-score"])]


def _check_outcome(lc: Lifecycle, outcome: RunOutcome) -> None:
    """Failed or missing samples raised as errors, after the reports say so."""
    from runner.base.errors import IncompleteRun
    from runner.rundir.store import failures_error

    if outcome.failed:
        lc.report()
        raise failures_error(outcome.failed, outcome.requested, str(lc.run.path),
                             "no dataset is written and the run is not scored")
    if not outcome.complete:
        lc.report()
        raise IncompleteRun(f"run incomplete: {outcome.done}/{outcome.requested} samples",
                            where=str(lc.run.path),
                            fix=f"finish it with `runner run --resume {lc.run.path}`")


__all__ = ["Completed", "Lifecycle", "execute_run", "executor_for", "run_profile", "watch"]

"""`runner plan`, `runner run`, `runner aggregate` and `runner status`: a per-device batch
run from its plan to its dataset, and where one stands. `register(subparsers)` adds them to
the `runner` parser (runner/cli/main.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from runner.base.errors import EXIT_INCOMPLETE, EXIT_OK, BadInput
from runner.base.outdir import REFUSES, Rerun
from runner.batch.status import format_status, run_status
from runner.cli.context import CommandContext
from runner.cli.grammar import (
    ACCURACY_FAILED,
    DEFAULT_PROFILE,
    DISK_FULL,
    SAMPLES_MISSING,
    Exits,
    add_captions,
    add_dry_run,
    add_json,
    add_judged,
    add_layout,
    add_no_score,
    add_out,
    add_profile,
    add_results,
    add_run_inputs,
    add_share_gpus,
    add_workers,
    document,
    print_json,
    sample_ids,
)
from runner.config.overrides import layout_overrides, profile_from_args, profile_overrides
from runner.config.reads import ProfileReads, effective_values

# The profile fields each command acts on (runner.config.reads): a `--set` of another is
# refused. The plan is the layout and the devices it opens (backend and driver); a run is
# made and scored by everything but the MLPerf section and the SKU golden benchmarks judge.
PLAN_READS = ProfileReads("plan", ("target.backend", "target.driver", "layout"))
RUN_READS = ProfileReads("run", ("name", "count", "model", "target", "layout", "accuracy"),
                         but=("target.sku",))

RUN_RERUN = Rerun(REFUSES, "every finished sample: only the missing ones are generated; "
                  "a complete run does nothing unless --rescore", ("run.json",))


def cmd_plan(ctx: CommandContext) -> int:
    from runner.batch.run import plan_for

    args = ctx.args
    plan = plan_for(profile_from_args(args, PLAN_READS))
    if args.json:
        print_json(plan.to_dict())
        return 0
    print(plan.table())
    for note in plan.notes:
        print(f"note: {note}")
    print(f"{len(plan.workers)} workers")
    return 0


def cmd_run(ctx: CommandContext) -> int:
    """A thin layer over runner/lifecycle.py: a new run, or a resume of one."""
    from runner.batch.cluster import slurm_options
    from runner.lifecycle import Lifecycle, dry_run_lines, executor_for
    from runner.rundir.directory import RunDir

    args = ctx.args
    # A full disk (DiskFull) is an IncompleteRun: main() prints it and exits 3, and what
    # was written is kept for --resume.
    captions = Path(args.captions) if args.captions else None
    # --resume of a run with its run.json goes on from it; one killed before its manifest
    # (while compiling) was given its recorded command line again (runner/cli/output.py).
    own = bool(args.resume) and RunDir(args.resume).exists()
    if own and args.dry_run:
        raise BadInput("--dry-run prints a new run's commands", where="--dry-run",
                       fix=f"drop --dry-run (`runner status {args.resume}` shows where the "
                       "run stands)")
    if own:
        lc = Lifecycle.open(args.resume)
    else:
        args.profile = args.profile or DEFAULT_PROFILE
        profile = profile_from_args(args, RUN_READS)
        ids = sample_ids(args, captions, profile.count)
        executor = executor_for(args.executor or "local", profile, image=args.image,
                                captions=captions, slurm=slurm_options(args))
        if args.dry_run:
            # What was set, as the run would use it, even where the preflight then refuses.
            for line in effective_values(profile, profile_overrides(args.set)):
                print(line, flush=True)
            print("\n".join(dry_run_lines(Path(args.out), profile, ids, executor,
                                          score=args.score, captions=captions,
                                          share_gpus=args.share_gpus)))
            return EXIT_OK
        lc = Lifecycle.create(Path(args.out), profile, ids, ctx.argv, executor,
                              captions=captions, score=args.score, share_gpus=args.share_gpus)
    with lc:
        if own:
            code = _resume(args, lc)
            if code is not None:
                return code
        return _run_to_end(args, lc)


def _resume(args: argparse.Namespace, lc) -> int | None:
    """Checks a resume against the run and prepares it; an exit code when there is nothing
    to run (a complete run: nothing, or a re-score when --rescore asks for one)."""
    from runner.batch.cluster import slurm_options
    from runner.lifecycle import executor_for

    m = lc.manifest
    requested = None
    if args.profile or args.set or args.metrics or layout_overrides(args):
        args.profile = args.profile or m.profile_path
        requested = profile_from_args(args, RUN_READS)
    ids = (sample_ids(args, Path(m.captions), len(m.sample_ids))
           if args.ids or args.samples or args.count is not None else None)
    lc.check_request(requested, ids)
    # A complete run whose samples fail their sha256 (moved aside) is resumed like any other.
    if m.complete and lc.store.verified_ids(m.sample_ids) >= set(m.sample_ids):
        if not args.rescore:
            print(f"run {lc.run.path} is already complete ({len(m.sample_ids)} samples); "
                  "nothing to do (`--rescore` scores it again)", file=sys.stderr)
            return 0
        done = lc.rescore(require_full=args.require_full)
        return _print_completed(lc, done)
    name = args.executor or m.executor
    executor = executor_for(name, lc.profile, image=args.image or m.image_ref,
                            captions=Path(m.captions),
                            slurm=slurm_options(args, m.slurm_options or None))
    lc.resume(executor, share_gpus=args.share_gpus)
    if not args.score:
        lc.manifest.score = False
    return None


def _run_to_end(args: argparse.Namespace, lc) -> int:
    from runner.rundir.store import failures_error

    outcome = lc.execute()
    run_dir = lc.run.path
    if outcome.failed:  # no resume of the same model makes them: the fix is elsewhere
        lc.report()
        raise failures_error(outcome.failed, outcome.requested, str(run_dir),
                             "no dataset is written and the run is not scored")
    if not outcome.complete:
        lc.report()
        print(f"run incomplete: {outcome.done}/{outcome.requested} samples in {run_dir}; "
              f"finish it with `runner run --resume {run_dir}`", file=sys.stderr)
        return EXIT_INCOMPLETE
    print(f"{outcome.done} samples in {outcome.seconds:.1f}s "
          f"({outcome.done / max(outcome.seconds, 1e-9):.2f} samples/s); "
          f"{len(outcome.deaths)} worker death(s)")
    return _print_completed(lc, lc.complete(require_full=args.require_full))


def _print_completed(lc, done) -> int:
    """The dataset, the verdict (exit code 1 when it fails) and the reports."""
    result = done.aggregate
    print(f"dataset: {result.log} ({result.samples} records, {result.mb_per_s:.0f} MB/s)")
    if done.score is not None:
        print("\n".join([*done.score.result.files_lines(), *done.score.verdict.lines()]))
    print(f"reports: {', '.join(str(p) for p in done.reports)}")
    print(f"run dir: {lc.run.path}")
    return done.exit_code


def cmd_aggregate(ctx: CommandContext) -> int:
    from runner.lifecycle import Lifecycle

    args = ctx.args
    if args.dry_run:
        from runner.batch.aggregate import aggregate_plan

        print("\n".join(aggregate_plan(Path(args.run_dir), args.allow_incomplete)))
        return EXIT_OK

    with Lifecycle.open(args.run_dir) as lc:
        result = lc.aggregate(allow_incomplete=args.allow_incomplete)
    print(f"{result.samples} samples -> {result.log} ({result.log_bytes / 1e6:.1f} MB, "
          f"{result.mb_per_s:.0f} MB/s); review images: {len(result.review)}")
    return 0


def cmd_status(ctx: CommandContext) -> int:
    args = ctx.args
    status = run_status(Path(args.run_dir))
    if args.json:
        print_json(status)
    else:
        print(format_status(status))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("plan",
                              help="print the worker table of a profile's layout; runs nothing")
    add_profile(p)
    add_layout(p)
    add_json(p, "the plan")
    p.set_defaults(func=cmd_plan)
    document(p, "runner plan --profile mi325x", "runner plan --profile mi325x --partition spx",
             "runner plan --profile mi325x --cpd 2 --json",
             exits=Exits())

    p = subparsers.add_parser("run",
                              help="per-device batch run: workers, resume, aggregated dataset")
    add_run_inputs(p, None, f"{DEFAULT_PROFILE}; on --resume, as recorded",
                   samples_note="; on --resume, as recorded: other samples are an error")
    add_judged(p)
    add_captions(p)
    add_workers(p, None, "; on --resume, as recorded")
    add_out(p, "the run directory to create", RUN_RERUN, own_resume=True)
    p.add_argument("--rescore", action="store_true",
                   help="with --resume of a complete run: score it again, rewrite reports")
    add_no_score(p, "; the run stops after aggregation")
    add_share_gpus(p)
    add_results(p)
    add_dry_run(p, "the compile commands, the worker plan and each worker's (or the sbatch) "
                "command")
    p.set_defaults(func=cmd_run)
    document(p, "runner run --profile cpu --count 32 --out runs/main",
             "runner run --profile cpu --count 4 --out runs/smoke   # a subset: not judged, "
             "exit 0",
             "runner run --profile cpu --count 4 --out runs/smoke --dry-run",
             "runner run --resume runs/main",
             "runner run --profile mi325x --executor slurm --nodes 4 --slurm-partition mi325x "
             "--out /shared/runs/acc",
             out="the run directory: run.json, samples/, the MLPerf log, scores, reports",
             exits=Exits(verdict=ACCURACY_FAILED,
                         incomplete=SAMPLES_MISSING, scores=True))

    p = subparsers.add_parser("aggregate",
                              help="write a run's MLPerf accuracy log and review images")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run dir")
    p.add_argument("--allow-incomplete", action="store_true",
                   help="write the log from the samples there are")
    add_dry_run(p, "the samples it would aggregate and the files it would write")
    p.set_defaults(func=cmd_aggregate)
    document(p, "runner aggregate runs/main",
             exits=Exits(incomplete=DISK_FULL))

    p = subparsers.add_parser("status", help="a run's progress per node and per worker, "
                              "from its run dir (while it runs or after)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run dir (local or shared)")
    add_json(p, "the status")
    p.set_defaults(func=cmd_status)
    document(p, "runner status runs/main", "runner status /shared/runs/acc --json",
             exits=Exits())

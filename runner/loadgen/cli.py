"""`runner mlperf`: LoadGen-driven runs; flags named after AMD's harness where it has them
(--scenario, --count, --user-conf, --audit-conf), LoadGen's minimum test duration
--min-duration (in seconds; its user.conf key is in ms) and --min-query-count, a QPS flag
per scenario named as the profile's `mlperf:` key it overrides, the runner's layout,
executor and Slurm flags as everywhere else."""

from __future__ import annotations

import argparse
from pathlib import Path

from runner.base.outdir import REFUSES, Rerun
from runner.cli.context import CommandContext
from runner.cli.grammar import (
    SAMPLES_MISSING,
    Exits,
    add_captions,
    add_dry_run,
    add_layout,
    add_no_score,
    add_out,
    add_profile,
    add_results,
    add_samples,
    add_share_gpus,
    add_workers,
    document,
    renamed,
)
from runner.config.overrides import profile_from_args
from runner.config.reads import ProfileReads
from runner.inputs.cliargs import COUNT, RATE, TEST_SECONDS
from runner.loadgen.conf import MODES, SCENARIOS, Flags
from runner.loadgen.rules import COMPLIANCE_TESTS, DIVISIONS

# The profile fields `runner mlperf` acts on (runner.config.reads): a run's (LoadGen sets the
# QSL's count unless --count or user.conf says) and the MLPerf section; a `--set` of another
# is refused.
MLPERF_READS = ProfileReads("mlperf", ("name", "count", "model", "target", "layout",
                                       "accuracy", "mlperf"), but=("target.sku",))

# Each scenario's QPS flag, which user.conf writes as that scenario's target_qps and the
# profile holds as mlperf.<the flag's name>: (scenario, flag, what the QPS is to it).
_QPS_FLAGS = (
    ("Offline", "--offline-expected-qps", "expected QPS, which sizes its one query"),
    ("Server", "--server-target-qps", "target QPS, the rate LoadGen issues queries at"),
)


def _split(items: list[str]) -> tuple[str, ...]:
    """`--scenario a,b --scenario c` -> (a, b, c)."""
    return tuple(t.strip() for item in items for t in item.split(",") if t.strip())


def _audit_confs(items: list[str] | None) -> dict[str, Path]:
    """`--audit-conf TEST04=FILE` items."""
    from runner.base.errors import BadInput

    out: dict[str, Path] = {}
    for item in items or []:
        test, eq, path = item.partition("=")
        if not eq or test not in COMPLIANCE_TESTS or not path:
            raise BadInput(f"`--audit-conf {item}` is not TEST=FILE", where="--audit-conf",
                           fix=f"e.g. --audit-conf TEST04=my-audit.config "
                           f"({', '.join(COMPLIANCE_TESTS)})")
        out[test] = Path(path)
    return out


def cmd_mlperf(ctx: CommandContext) -> int:
    from runner.batch.cluster import slurm_options
    from runner.lifecycle import executor_for
    from runner.loadgen.command import run_mlperf
    from runner.loadgen.run import MlperfRequest

    args = ctx.args
    profile = profile_from_args(args, MLPERF_READS)
    compliance = None if args.compliance is None else tuple(
        t for item in args.compliance for t in item.split(",") if t)
    captions = Path(args.captions) if args.captions else None
    request = MlperfRequest(
        profile=profile, scenarios=_split(args.scenario), mode=args.mode, out=Path(args.out),
        compliance=compliance, user_conf=Path(args.user_conf) if args.user_conf else None,
        audit_confs=_audit_confs(args.audit_conf),
        flags=Flags(args.count, args.min_duration, args.offline_expected_qps,
                    args.server_target_qps, args.min_query_count),
        argv=ctx.argv, captions=captions,
        score=args.score, share_gpus=args.share_gpus, division=args.division,
        submitter=args.submitter,
        nodes=(args.nodes or 1) if args.executor == "slurm" else 1)
    executor = executor_for(args.executor, profile, image=args.image, captions=captions,
                            slurm=slurm_options(args))
    return run_mlperf(request, executor, dry_run=args.dry_run, attempt=ctx.attempt)


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "mlperf", help="MLPerf LoadGen tests (Offline/Server; accuracy, performance, "
        "submission with compliance) over the per-device workers",
        description="LoadGen issues the samples and measures; the runner's workers compute "
        "them. A submission runs the accuracy test, the performance test and the compliance "
        "tests, verifies them and writes MLPerf's submission tree.")
    add_profile(p)
    p.add_argument("--scenario", required=True, action="append", metavar="NAME[,NAME]",
                   help=f"LoadGen scenario(s), run in the order given: "
                   f"{', '.join(SCENARIOS.values())} (any case; a submission needs the set "
                   "its system_type takes in the round)")
    p.add_argument("--mode", required=True, choices=list(MODES),
                   help="accuracy (every QSL sample once, scored), performance (timed), "
                   "submission (both, plus --compliance tests and the submission tree)")
    p.add_argument("--compliance", action="append", metavar="TEST",
                   help=f"compliance tests with --mode submission: {','.join(COMPLIANCE_TESTS)}"
                   " (default: both; SDXL requires both)")
    p.add_argument("--division", choices=list(DIVISIONS),
                   help="submission division (default: the profile's mlperf.division)")
    p.add_argument("--submitter", metavar="NAME",
                   help="submitter, the tree's <division>/<submitter>/ (default: the "
                   "profile's mlperf.submitter)")
    p.add_argument("--user-conf", metavar="FILE", help="LoadGen user.conf (checked line by "
                   "line; merged with the profile's `mlperf:` values; default: none)")
    p.add_argument("--audit-conf", action="append", metavar="TEST=FILE",
                   help="replaces a compliance test's shipped audit.config (MLPerf's own); "
                   "a result run so is not a valid submission (default: the shipped ones)")
    add_samples(p, note="; the QSL, and the performance sample count", choose=False)
    p.add_argument("--min-duration", type=TEST_SECONDS, metavar="S",
                   help="LoadGen's minimum test duration in seconds, e.g. 2 (written to "
                   "user.conf as min_duration in milliseconds, 2000; default: the user.conf's, "
                   "else MLPerf's 600 s)")
    p.add_argument("--min-query-count", type=COUNT, metavar="N",
                   help="LoadGen's minimum query count (user.conf's min_query_count): a test "
                   "ends once N queries and --min-duration are done. Offline issues one query "
                   "of N samples, MLPerf's 5000 for SDXL by default, so a short performance "
                   "run sets it, e.g. 16 (default: the user.conf's, else MLPerf's)")
    for scenario, flag, what in _QPS_FLAGS:
        p.add_argument(flag, type=RATE, metavar="QPS",
                       help=f"the {scenario} scenario's {what} (user.conf's {scenario} "
                       f"target_qps; default: the profile's mlperf.{flag[2:].replace('-', '_')})")
    renamed(p, "--qps", "--offline-expected-qps QPS or --server-target-qps QPS",
            "one flag per scenario")
    add_layout(p)
    add_captions(p)
    add_workers(p, "local", "; LoadGen itself runs on this host", resumable=False)
    add_no_score(p, "; a submission tree then lacks accuracy.txt")
    add_share_gpus(p)
    add_out(p, "directory to create",
            Rerun(REFUSES, "each LoadGen test whose logs are complete is kept; the others run "
                  "again", ("mlperf.json",)))
    add_dry_run(p, "the compile and worker commands and LoadGen's settings")
    add_results(p)
    document(p, "runner mlperf --profile cpu --scenario offline --mode performance "
             "--count 16 --min-duration 0.1 --min-query-count 16 --out runs/lg-perf",
             "runner mlperf --profile mi325x --scenario singlestream,offline,server "
             "--mode submission --out runs/lg-sub --dry-run",
             "runner mlperf --profile mi325x --scenario Offline --mode performance --cpd 2 "
             "--batch-size 8 --out runs/lg-cpd2 --dry-run",
             out="LoadGen's logs per scenario and test (<Scenario>/accuracy/, performance/, "
             "TEST01/, TEST04/), user.conf, work/ (the workers' run dir), "
             "submission/<division>/<submitter>/ (MLPerf's tree), results.json, summary.md, "
             "report.html",
             exits=Exits(verdict="a scenario's accuracy or performance run did not pass",
                         incomplete=SAMPLES_MISSING, scores=True))
    p.set_defaults(func=cmd_mlperf)
    return p

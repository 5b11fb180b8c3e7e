"""`runner mlperf`: LoadGen-driven runs; flags named after AMD's harness where it has them
(--scenario, --count, --time, --qps, --user-conf, --audit-conf)."""

from __future__ import annotations

import argparse
from pathlib import Path

from runner.base.outdir import REFUSES, Rerun
from runner.clihelp import add_out, add_profile, document, profile_overrides
from runner.inputs.cliargs import COUNT, COUNT_OR_ZERO, RATE, TEST_SECONDS
from runner.loadgen.conf import MODES, SCENARIOS, Flags
from runner.loadgen.rules import COMPLIANCE_TESTS, DIVISIONS


def _slurm(args: argparse.Namespace):
    """SlurmOptions from this command's flags (`--time` is LoadGen's duration here, so the
    node tasks' time limit is `--slurm-time`)."""
    from runner.batch.cluster import SlurmOptions

    given = {"nodes": args.nodes, "partition": args.slurm_partition, "time": args.slurm_time,
             "node_executor": args.node_executor, "image": args.image,
             "cpus_per_node": args.cpus_per_node, "sbatch_args": args.sbatch_arg}
    return SlurmOptions.from_dict({k: v for k, v in given.items() if v is not None})


def _split(items: list[str]) -> tuple[str, ...]:
    """`--scenario a,b --scenario c` -> (a, b, c)."""
    return tuple(t.strip() for item in items for t in item.split(",") if t.strip())


def _audit_confs(items: list[str] | None) -> dict[str, Path]:
    """`--audit-conf TEST04=FILE` items."""
    from runner.base.errors import RunnerError

    out: dict[str, Path] = {}
    for item in items or []:
        test, eq, path = item.partition("=")
        if not eq or test not in COMPLIANCE_TESTS or not path:
            raise RunnerError(f"`--audit-conf {item}` is not TEST=FILE", where="--audit-conf",
                              fix=f"e.g. --audit-conf TEST04=my-audit.config "
                              f"({', '.join(COMPLIANCE_TESTS)})")
        out[test] = Path(path)
    return out


def cmd_mlperf(args: argparse.Namespace) -> int:
    from runner.config.profile import load_profile
    from runner.lifecycle import executor_for
    from runner.loadgen.command import run_mlperf
    from runner.loadgen.run import MlperfRequest

    profile = load_profile(args.profile, profile_overrides(args.set))
    compliance = None if args.compliance is None else tuple(
        t for item in args.compliance for t in item.split(",") if t)
    captions = Path(args.captions) if args.captions else None
    request = MlperfRequest(
        profile=profile, scenarios=_split(args.scenario), mode=args.mode, out=Path(args.out),
        compliance=compliance, user_conf=Path(args.user_conf) if args.user_conf else None,
        audit_confs=_audit_confs(args.audit_conf),
        flags=Flags(args.count, args.time, args.qps), argv=args.argv, captions=captions,
        score=args.score, division=args.division, submitter=args.submitter,
        nodes=(args.nodes or 1) if args.executor == "slurm" else 1)
    executor = executor_for(args.executor, profile, image=args.image, captions=captions,
                            slurm=_slurm(args))
    return run_mlperf(request, executor, dry_run=args.dry_run, attempt=args.attempt)


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "mlperf", help="MLPerf LoadGen tests (Offline/Server; accuracy, performance, "
        "submission with compliance) over the per-device workers",
        description="LoadGen issues the samples and measures; the runner's workers compute "
        "them. A submission runs the accuracy test, the performance test and the compliance "
        "tests, verifies them and writes MLPerf's submission tree.")
    add_profile(p)
    p.add_argument("--scenario", required=True, action="append", metavar="NAME[,NAME]",
                   help=f"LoadGen scenario(s), run in the order given: {', '.join(SCENARIOS)}"
                   " (a submission needs the set its system_type takes in the round)")
    p.add_argument("--mode", required=True, choices=list(MODES),
                   help="accuracy (every QSL sample once, scored), performance (timed), "
                   "submission (both, plus --compliance tests and the submission tree)")
    p.add_argument("--compliance", action="append", metavar="TEST",
                   help=f"compliance tests with --mode submission: {','.join(COMPLIANCE_TESTS)}"
                   " (SDXL requires both; the default)")
    p.add_argument("--division", choices=list(DIVISIONS),
                   help="submission division (default: the profile's mlperf.division)")
    p.add_argument("--submitter", metavar="NAME",
                   help="submitter, the tree's <division>/<submitter>/ (default: the "
                   "profile's mlperf.submitter)")
    p.add_argument("--user-conf", metavar="FILE", help="LoadGen user.conf (checked line by "
                   "line; merged with the profile's `mlperf:` values)")
    p.add_argument("--audit-conf", action="append", metavar="TEST=FILE",
                   help="replaces a compliance test's shipped audit.config (MLPerf's own); "
                   "a result run so is not a valid submission")
    p.add_argument("--count", type=COUNT, help="QSL and performance sample count (default 5000)")
    p.add_argument("--time", type=TEST_SECONDS, metavar="S",
                   help="minimum test duration, seconds")
    p.add_argument("--qps", type=RATE,
                   help="Offline expected QPS / Server target QPS (default: the profile's)")
    p.add_argument("--captions", help="MLPerf captions_source.tsv (default: the shipped copy)")
    p.add_argument("--executor", choices=["local", "docker", "slurm"], default="local",
                   help="where the workers run (default local); LoadGen runs here")
    p.add_argument("--image", help="harness image tag for docker workers")
    g = p.add_argument_group("Slurm (--executor slurm): node tasks serve the one queue")
    g.add_argument("--nodes", type=COUNT_OR_ZERO, help="array tasks, one per node (default 1)")
    g.add_argument("--slurm-partition", metavar="P", help="sbatch --partition")
    g.add_argument("--slurm-time", metavar="T", help="sbatch --time per node task")
    g.add_argument("--node-executor", choices=["local", "docker"],
                   help="how each node starts its workers (default local)")
    g.add_argument("--cpus-per-node", type=COUNT_OR_ZERO, metavar="N",
                   help="CPUs per node task instead of the whole node")
    g.add_argument("--sbatch-arg", action="append", metavar="ARG", help="extra sbatch option")
    p.add_argument("--no-score", dest="score", action="store_false",
                   help="leave the accuracy log unscored (a submission tree then lacks "
                   "accuracy.txt)")
    add_out(p, "directory to create",
            Rerun(REFUSES, "each LoadGen test whose logs are complete is kept; the others run "
                  "again", ("mlperf.json",)))
    p.add_argument("--dry-run", action="store_true",
                   help="print the compile and worker commands and LoadGen's settings; run "
                   "nothing")
    document(p, "runner mlperf --profile cpu --scenario offline --mode performance "
             "--count 16 --time 2 --out runs/lg-perf",
             "runner mlperf --profile mi325x --scenario singlestream,offline,server "
             "--mode submission --out runs/lg-sub --dry-run",
             out="LoadGen's logs per scenario and test (<Scenario>/accuracy/, performance/, "
             "TEST01/, TEST04/), user.conf, work/ (the workers' run dir), "
             "submission/<division>/<submitter>/ (MLPerf's tree), results.json, summary.md, "
             "report.html")
    p.set_defaults(func=cmd_mlperf)
    return p

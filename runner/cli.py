"""The `runner` command: a thin argparse layer over the library; exit 2 on bad input."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

from runner.accuracy.cli import register as register_accuracy
from runner.batch.cluster import add_slurm_arguments
from runner.batch.status import register as register_status
from runner.bench.cli import register as register_bench
from runner.docker.cli import register as register_image
from runner.errors import RunnerError
from runner.export.cli import register as register_export
from runner.goldens.cli import register as register_goldens
from runner.report.cli import register as register_report


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """`--set a.b=v` plus the layout flags, as dotted profile overrides."""
    out: dict[str, Any] = {}
    for item in getattr(args, "set", None) or []:
        key, eq, value = item.partition("=")
        if not eq:
            raise RunnerError(f"`--set {item}` is not KEY=VALUE", where="--set")
        out[key] = yaml.safe_load(value)
    return out


def _profile(args: argparse.Namespace):
    """The profile with `--set` overrides and, where the command has them, layout flags."""
    import dataclasses

    from runner.profile import load_profile

    profile = load_profile(args.profile, _overrides(args))
    flags = {k: getattr(args, k, None) for k in LAYOUT_FLAGS}
    if any(v is not None for v in flags.values()):
        profile = dataclasses.replace(profile, layout=profile.layout.with_overrides(**flags))
    return profile


LAYOUT_FLAGS = ("partition", "devices", "cpd", "batch_size", "vae_batch_size")


def _add_layout(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("layout overrides (any profile field also via --set layout.X=V)")
    g.add_argument("--partition", help="spx, dpx, qpx or cpx (a system setting; see the plan)")
    g.add_argument("--devices", help="device IDs: 0-63, 0,2,4, 0-3,8-11")
    g.add_argument("--cpd", type=int, help="pipeline processes per device ID (AMD's CPD)")
    g.add_argument("--batch-size", type=int)
    g.add_argument("--vae-batch-size", type=int)


def cmd_plan(args: argparse.Namespace) -> int:
    from runner.batch.run import plan_for

    plan = plan_for(_profile(args))
    if args.json:
        print_json(plan.to_dict())
        return 0
    print(plan.table())
    for note in plan.notes:
        print(f"note: {note}")
    print(f"{len(plan.workers)} workers")
    return 0


def _sample_ids(args: argparse.Namespace, captions: Path | None,
                default_count: int = 32) -> list[int]:
    from runner.batch.run import read_ids_file, validate_ids

    if args.ids:
        return validate_ids(read_ids_file(Path(args.ids)), args.ids, captions)
    count = default_count if args.count is None else args.count
    return validate_ids(list(range(count)), "--count", captions)


def cmd_run(args: argparse.Namespace) -> int:
    """A thin layer over runner/lifecycle.py: a new run, or a resume of one."""
    from runner.batch.cluster import slurm_options
    from runner.lifecycle import Lifecycle, executor_for
    from runner.rundir import DiskFull

    captions = Path(args.captions) if args.captions else None
    try:
        if args.resume:
            lc = Lifecycle.open(args.resume)
        else:
            if not args.out:
                raise RunnerError("--out DIR is required for a new run", where="runner run")
            args.profile = args.profile or "cpu"
            profile = _profile(args)
            name = args.executor or "local"
            executor = executor_for(name, profile, image=args.image, captions=captions,
                                    slurm=slurm_options(args) if name == "slurm" else None)
            lc = Lifecycle.create(Path(args.out), profile,
                                  _sample_ids(args, captions, default_count=32), args.argv,
                                  executor, captions=captions, score=args.score)
        with lc:
            if args.resume:
                code = _resume(args, lc)
                if code is not None:
                    return code
            return _run_to_end(args, lc)
    except DiskFull as e:
        print(str(e), file=sys.stderr)
        return 1


def _resume(args: argparse.Namespace, lc) -> int | None:
    """Checks a resume against the run and prepares it; an exit code when there is nothing
    to run (a complete run: nothing, or a re-score when --rescore asks for one)."""
    from runner.batch.cluster import slurm_options
    from runner.lifecycle import executor_for

    m = lc.manifest
    requested = None
    if args.profile or args.set or _has_layout(args):
        args.profile = args.profile or m.profile_path
        requested = _profile(args)
    ids = (_sample_ids(args, Path(m.captions)) if args.ids or args.count is not None
           else None)
    lc.check_request(requested, ids)
    # A complete run whose samples fail their sha256 (moved aside) is resumed like any other.
    if m.complete and lc.store.verified_ids(m.sample_ids) >= set(m.sample_ids):
        if not args.rescore:
            print(f"run {lc.run.path} is already complete ({len(m.sample_ids)} samples); "
                  "nothing to do (`--rescore` scores it again)", file=sys.stderr)
            return 0
        done = lc.rescore()
        return _print_completed(lc, done)
    name = args.executor or m.executor
    executor = executor_for(name, lc.profile, image=args.image or m.image_ref,
                            captions=Path(m.captions),
                            slurm=slurm_options(args, m.slurm_options or None)
                            if name == "slurm" else None)
    lc.resume(executor)
    if not args.score:
        lc.manifest.score = False
    return None


def _run_to_end(args: argparse.Namespace, lc) -> int:
    outcome = lc.execute()
    run_dir = lc.run.path
    if not outcome.complete:
        lc.report()
        print(f"run incomplete: {outcome.done}/{outcome.requested} samples in {run_dir}; "
              f"finish it with `runner run --resume {run_dir}`", file=sys.stderr)
        return 1
    print(f"{outcome.done} samples in {outcome.seconds:.1f}s "
          f"({outcome.done / max(outcome.seconds, 1e-9):.2f} samples/s); "
          f"{len(outcome.deaths)} worker death(s)")
    return _print_completed(lc, lc.complete())


def _print_completed(lc, done) -> int:
    """The dataset, the verdict (exit code 1 when it fails) and the reports."""
    result = done.aggregate
    print(f"dataset: {result.log} ({result.samples} records, {result.mb_per_s:.0f} MB/s)")
    if done.score is not None:
        print("\n".join(done.score.verdict.lines()))
    print(f"reports: {', '.join(str(p) for p in done.reports)}")
    print(f"run dir: {lc.run.path}")
    return done.exit_code


def _has_layout(args: argparse.Namespace) -> bool:
    return any(getattr(args, k, None) is not None for k in LAYOUT_FLAGS)


def cmd_aggregate(args: argparse.Namespace) -> int:
    from runner.lifecycle import Lifecycle

    with Lifecycle.open(args.run_dir) as lc:
        result = lc.aggregate(allow_incomplete=args.allow_incomplete)
    print(f"{result.samples} samples -> {result.log} ({result.log_bytes / 1e6:.1f} MB, "
          f"{result.mb_per_s:.0f} MB/s); review images: {len(result.review)}")
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    from runner.compiled_model import compile_model

    profile = _profile(args)
    sizes = [int(b) for b in args.batch_sizes.split(",")] if args.batch_sizes else None
    models = [compile_model(profile, batch, None if sizes else profile.layout.vae_batch_size,
                            dry_run=args.dry_run)
              for batch in sizes or [profile.layout.batch_size]]
    if args.json:
        print_json([m.to_dict() for m in models])
        return 0
    for compiled in models:
        for result in compiled.compiled:
            if args.dry_run:
                print(shlex.join(result.command))
            else:
                state = "cached" if result.cached else f"compiled in {result.seconds:.1f}s"
                print(f"{Path(result.mlir).name} [bs{compiled.batch_size}]: {state} -> "
                      f"{result.vmfb}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from runner.validate import ValidateRequest, validate

    args.profile = args.profile or "cpu"
    request = ValidateRequest(
        iree=args.iree, profile=_profile(args), sample_ids=_sample_ids(args, None),
        out=Path(args.out), argv=args.argv, goldens=Path(args.goldens) if args.goldens else None,
        to=args.to, baseline=Path(args.baseline) if args.baseline else None,
        base_image=args.base_image, dry_run=args.dry_run)
    return validate(request)


def cmd_fetch(args: argparse.Namespace) -> int:
    from runner.compiled_model import fetch_artifacts
    from runner.sources import redact_url

    for ref, path in fetch_artifacts(_profile(args), dry_run=args.dry_run):
        print(f"{redact_url(ref)} -> {path}" if args.dry_run else path)
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from runner.generate import generate

    result = generate(_profile(args), list(range(args.prompts)), Path(args.out))
    print(f"{len(result.images)} images in {result.seconds:.1f}s -> {result.out}/images")
    return 0


def _add_profile(p: argparse.ArgumentParser, default: str | None = "tiny") -> None:
    p.add_argument("--profile", default=default,
                   help=f"profile name in configs/ or a YAML path (default: {default})")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override any profile field, e.g. --set target.chip=gfx950")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="runner", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    register_export(sub)

    p = sub.add_parser("compile", help="compile the profile's model through the cache")
    _add_profile(p)
    p.add_argument("--batch-sizes", help="comma list (default: the layout's batch size)")
    p.add_argument("--dry-run", action="store_true", help="print the iree-compile commands")
    p.add_argument("--json", action="store_true", help="print the compiled models as JSON")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("fetch", help="download a profile's model artifacts into the cache")
    _add_profile(p, default="sdxl")
    p.add_argument("--dry-run", action="store_true", help="print URL -> cache path only")
    p.set_defaults(func=cmd_fetch)

    p = sub.add_parser("plan", help="print the worker table of a profile's layout; runs nothing")
    _add_profile(p, default="cpu")
    _add_layout(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("run", help="per-device batch run: workers, resume, aggregated dataset")
    _add_profile(p, default=None)
    _add_layout(p)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--count", type=int, help="samples 0..N-1 (default 32; on --resume, "
                      "as recorded: another count is an error)")
    what.add_argument("--ids", help="file of sample ids (qsl_idx), whitespace-separated")
    p.add_argument("--captions", help="MLPerf captions_source.tsv (default: the shipped copy)")
    p.add_argument("--executor", choices=["local", "docker", "slurm"],
                   help="where workers run (default: local; on --resume, as recorded)")
    p.add_argument("--image", help="harness image tag for --executor docker")
    add_slurm_arguments(p)
    p.add_argument("--out", help="run directory to create")
    p.add_argument("--resume", metavar="RUN_DIR", help="complete an interrupted run "
                   "(a complete one: nothing to do)")
    p.add_argument("--rescore", action="store_true",
                   help="with --resume of a complete run: score it again, rewrite reports")
    p.add_argument("--no-score", dest="score", action="store_false",
                   help="stop after aggregation (default: score FID/CLIP when the profile "
                   "has ranges)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("validate", help="an IREE build end to end: image, compile, accuracy "
                       "run, score, then goldens v{n+1}; resumable")
    p.add_argument("--iree", required=True, help="wheels:<ver> | source:<sha> | build-dir:<path>")
    _add_profile(p, default=None)
    _add_layout(p)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--count", type=int, default=32)
    what.add_argument("--ids", help="file of sample ids")
    p.add_argument("--goldens", help="IREE CI test-suite dir to regenerate on PASS")
    p.add_argument("--to", help="golden version to write, e.g. v7.0 (default: next)")
    p.add_argument("--baseline", help="an earlier validate's --out to compare against")
    p.add_argument("--base-image", help="docker base image (default: runner-base:bookworm)")
    p.add_argument("--out", required=True)
    p.add_argument("--dry-run", action="store_true", help="print every command it would run")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("aggregate", help="write a run's MLPerf accuracy log and review images")
    p.add_argument("run_dir")
    p.add_argument("--allow-incomplete", action="store_true")
    p.set_defaults(func=cmd_aggregate)

    register_goldens(sub)
    register_accuracy(sub)
    register_bench(sub)
    register_report(sub)
    register_image(sub)
    register_status(sub)

    p = sub.add_parser("generate", help="single-process generation of the first N prompts")
    _add_profile(p)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_generate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # recorded for reproduce.sh
    try:
        return args.func(args)
    except RunnerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True))

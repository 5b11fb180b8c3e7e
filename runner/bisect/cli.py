"""`runner bisect` and `runner trend`: a thin layer over runner/bisect/."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

from runner.base.errors import EXIT_OK, BadInput
from runner.base.outdir import RESUMES, Rerun
from runner.cli.context import CommandContext
from runner.cli.grammar import (
    DEFAULT_PROFILE,
    DISK_FULL,
    Exits,
    add_base_image,
    add_dry_run,
    add_find_links,
    add_good_bad,
    add_out,
    add_pre,
    add_profile,
    add_samples,
    add_share_gpus,
    document,
    renamed,
    shared,
)
from runner.config.overrides import profile_from_args
from runner.config.reads import ProfileReads
from runner.docker.image import DEFAULT_BASE_IMAGE


def _steps_args(args: argparse.Namespace) -> dict[str, Any]:
    """The flags bisect and trend share, as the library's arguments."""
    return {"count": args.count, "samples": args.samples, "ids": args.ids,
            "find_links": args.find_links, "pre": args.pre, "repo": args.repo,
            "build_from_source": args.build, "install": args.install,
            "base_image": args.base_image, "share_gpus": args.share_gpus}


# The profile fields bisect and trend act on (runner.config.reads): the profile each build
# runs and scores, and its count (the samples each build makes); a `--set` of another is
# refused.
BISECT_READS = ProfileReads("bisect", ("name", "count", "model", "target", "layout",
                                       "accuracy"), but=("target.sku",))
TREND_READS = dataclasses.replace(BISECT_READS, command="trend")


def _show(out: Path, command: str) -> None:
    """The report as `runner bisect`/`runner trend` ends: its Markdown, and what it wrote."""
    from runner.bisect.report import report_files

    paths = report_files(out, command)
    print(paths[0].read_text(), end="")
    print(f"\nwrote {out / (command + '.json')}, {', '.join(str(p) for p in paths)}",
          file=sys.stderr)


def cmd_bisect(ctx: CommandContext) -> int:
    from runner.bisect.request import bisect

    args = ctx.args
    bisect(args.good, args.bad, profile=profile_from_args(args, BISECT_READS), out=args.out,
           test=args.test, dry_run=args.dry_run, argv=ctx.argv, **_steps_args(args))
    if not args.dry_run:
        _show(Path(os.path.abspath(args.out)), "bisect")
    return EXIT_OK


def cmd_trend(ctx: CommandContext) -> int:
    from runner.bisect.builds import parse_build, parse_range
    from runner.bisect.envs import plan_setup
    from runner.bisect.request import measure_plan, reports
    from runner.bisect.trend import TrendRequest, trend

    args = ctx.args
    if bool(args.builds) == bool(args.range):
        raise BadInput("give the builds, or --range A..B (one of them)", where="runner trend",
                       fix="e.g. runner trend wheels:3.12.0 wheels:3.13.0, or "
                       "--range wheels:3.10.0..wheels:3.13.0")
    plan, sources, inputs = measure_plan(args.test, profile_from_args(args, TREND_READS),
                                         args.out, trend=True, dry_run=args.dry_run,
                                         **_steps_args(args))
    if args.range:
        builds = parse_range(args.range, sources)
    else:
        builds = [parse_build(b, sources, "BUILD") for b in args.builds]
        if len({b.spec for b in builds}) != len(builds):
            raise BadInput("a build is listed twice", where="BUILD",
                           fix="list each build once")
    inputs["builds"] = [b.spec for b in builds]
    for build in builds:  # refuses a bad pairing (a commit in the image) before any work
        plan_setup(build, sources, plan.executor, plan.from_source)
    state = trend(TrendRequest(builds, plan, ctx.argv, inputs, args.dry_run))
    if args.dry_run:
        return EXIT_OK
    reports(plan, state, builds, 0)
    _show(plan.out, "trend")
    return EXIT_OK


def _judged_builds(p: argparse.ArgumentParser, func: Any, record: str, test_help: str,
                   count_note: str, out_what: str, kept: str, **test: Any) -> None:
    """What bisect and trend take alike once their builds are named, in this order (their
    help's): the --test that judges each build, the steps' flags (`_common`), and an out dir
    that resumes from its record (`record`: each finished step is kept, as `kept` says)."""
    shared(p, "--test", metavar="KIND", help=test_help, **test)
    _common(p, count_note)
    add_out(p, out_what, Rerun(RESUMES, kept, (record,)))
    p.set_defaults(func=func)


def _common(p: argparse.ArgumentParser, count_note: str) -> None:
    add_profile(p, DEFAULT_PROFILE)
    add_samples(p, count_note)
    add_find_links(p)
    add_pre(p)
    shared(p, "--repo", metavar="IREE_CHECKOUT",
           help="the git checkout whose commits commit:<sha> builds name (default: none; "
           "commit: builds need it)")
    shared(p, "--build", action="store_true",
           help="build each commit from source in the harness image (docker) instead of "
           "installing its PkgCI packages")
    shared(p, "--install", choices=["venv", "docker"], default="venv",
           help="how each build is installed: a venv per build (default), or a harness "
           "image per build")
    renamed(p, "--executor", "--install venv|docker", "--executor is where workers run, in "
            "run, bench and mlperf")
    add_base_image(p, DEFAULT_BASE_IMAGE)
    add_share_gpus(p)
    add_dry_run(p, "every candidate build, the preflight and the commands of the first step")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bisect", help="find the first IREE build that changed SDXL (images, accuracy, "
        "throughput, compile stats, goldens, or a script)",
        description="Bisects the builds between --good and --bad: each build gets a cached "
        "environment, is measured with the test, and judged against the good build. "
        "Resumes from --out. Tests: images | pixels:TOL | accuracy | throughput:PCT | "
        "compile | compstat | goldens:SUITE | script:CMD (CMD's exit code, as IREE's bisect "
        "script judges it: 0 good, any other bad, except 125: skip, as git bisect run has "
        "it; the build's tools first on PATH, RUNNER_BUILD/IREE_VERSION/IREE_COMMIT set).")
    add_good_bad(p)
    _judged_builds(p, cmd_bisect, "bisect.json",
                   "images | pixels:TOL | accuracy | throughput:PCT | compile | compstat "
                   "| goldens:SUITE | script:CMD",
                   "; each build makes them; accuracy: the profile's sample set",
                   "bisect dir: bisect.json/.md, report.html, reproduce.sh, builds/",
                   "every finished step: its build is judged again from bisect.json, not run",
                   required=True)
    document(p, "runner bisect --good wheels:3.10.0 --bad wheels:3.13.0 --test images "
             "--profile tiny --count 2 --out runs/bisect",
             "runner bisect --good commit:<sha> --bad commit:<sha> --repo ~/iree --test "
             "script:./repro.sh --out runs/b --dry-run",
             "runner bisect --good wheels:3.5.0rc20250601 --bad wheels:3.5.0rc20250620 --pre "
             "--find-links https://iree.dev/pip-release-links.html --test accuracy --out runs/n",
             out="the bisect dir: bisect.json, bisect.md, report.html, reproduce.sh, "
             "builds/NNN-<build>/ (each step's images and logs)",
             exits=Exits(incomplete=DISK_FULL))

    p = subparsers.add_parser(
        "trend", help="measure SDXL over every build of a list or range: FID, CLIP, "
        "samples/s, compile time, dispatches, vmfb size",
        description="The steps of `runner bisect` over every build (no bisection), one "
        "report with a chart per metric and the builds where image bytes changed marked.")
    p.add_argument("builds", nargs="*", metavar="BUILD",
                   help="builds, as runner bisect takes (wheels:VERSION, commit:SHA, "
                   "source:SHA, build-dir:DIR)")
    p.add_argument("--range", metavar="A..B",
                   help="every build from A to B, e.g. wheels:3.10.0..wheels:3.13.0 (default: "
                   "the builds listed)")
    _judged_builds(p, cmd_trend, "trend.json",
                   "what is measured and judged against the first build: images | pixels:TOL "
                   "| accuracy | throughput:PCT | compile | compstat | goldens:SUITE | "
                   "script:CMD (default: images)", "; each build makes them",
                   "trend dir: trend.json/.md, report.html, reproduce.sh, builds/",
                   "every finished step: its build's numbers are read from trend.json, not "
                   "measured again", default="images")
    document(p, "runner trend --range wheels:3.10.0..wheels:3.13.0 --profile tiny --count 2 "
             "--out runs/trend",
             "runner trend wheels:3.12.0 wheels:3.13.0 --test throughput:5 --out runs/t",
             out="the trend dir: trend.json, trend.md, report.html, reproduce.sh, builds/",
             exits=Exits(incomplete=DISK_FULL))

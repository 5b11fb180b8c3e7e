"""`runner bisect` and `runner trend`: a thin layer over runner/bisect/."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from runner.base.errors import EXIT_OK, RunnerError
from runner.base.outdir import RESUMES, Rerun
from runner.cli.context import CommandContext
from runner.cli.grammar import (
    DEFAULT_PROFILE,
    DISK_FULL,
    Exits,
    add_base_image,
    add_dry_run,
    add_find_links,
    add_out,
    add_profile,
    add_samples,
    document,
    renamed,
    shared,
)
from runner.config.overrides import profile_from_args
from runner.docker.image import DEFAULT_BASE_IMAGE

BISECT_COUNT = 4  # enough samples to see numerics move on the tiny model, in seconds


def _sample_spec(args: argparse.Namespace, profile) -> str:
    """The samples as one id spec; `accuracy` defaults to (and needs) the profile's set."""
    from runner.accuracy.samples import chosen_ids, format_ids
    from runner.accuracy.settings import accuracy_settings

    ranges = accuracy_settings(profile).samples if profile.accuracy else None
    if not args.ids and not args.samples and args.count is None \
            and args.test.startswith("accuracy") and ranges:
        ids = list(ranges)
    else:
        ids = chosen_ids(args.count, args.samples, args.ids, None, BISECT_COUNT)
    if args.test.startswith("accuracy") and ranges and set(ids) != set(ranges):
        raise RunnerError(f"accuracy is judged on the {len(ranges)} samples the profile's "
                          f"ranges were set for, not {len(ids)}", where="--count",
                          fix=f"drop --count/--samples (or use --samples {format_ids(ranges)})")
    return format_ids(ids)


def _plan(args: argparse.Namespace, test_text: str, trend: bool):
    """The shared MeasurePlan and the inputs that key the out dir's state."""
    import yaml

    from runner.base.fileio import atomic_write_text
    from runner.bench.dispatch_profile import DEFAULT_CALLS
    from runner.bisect.builds import Sources, check_find_links
    from runner.bisect.judge import parse_test
    from runner.bisect.ledger import inputs_key
    from runner.bisect.measure import MeasurePlan
    from runner.docker.in_image import standalone_profile

    test = parse_test(test_text)
    repo = Path(args.repo).resolve() if args.repo else None
    if repo is not None and not (repo / ".git").exists():
        raise RunnerError(f"{args.repo} is not a git checkout", where="--repo",
                          fix="pass a clone of iree-org/iree")
    sources = Sources(check_find_links(args.find_links), args.pre, repo)
    profile = profile_from_args(args)
    args.test = test_text
    samples = _sample_spec(args, profile)
    out = Path(os.path.abspath(args.out))
    standalone = standalone_profile(profile)
    profile_file = out / "profile.yaml"
    if not args.dry_run:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(profile_file, yaml.safe_dump(standalone, sort_keys=True))
    executor = "docker" if args.build else args.install
    plan = MeasurePlan(out, profile, profile_file, samples, test, sources, executor,
                       args.build, args.base_image, passes=2 if trend else test.passes,
                       compstat=trend or test.kind == "compstat",
                       score=trend and profile.accuracy is not None, cwd=os.getcwd(),
                       dispatch_calls=DEFAULT_CALLS if trend or test.kind == "throughput"
                       else 0)
    inputs: dict[str, Any] = {
        "test": test.text, "profile": profile.name, "profile_key": inputs_key(standalone),
        "samples": samples, "executor": executor, "build_from_source": args.build,
        "find_links": sources.find_links, "pre": sources.pre,
        "repo": str(repo) if repo else None}
    if test.kind == "script":
        inputs["cwd"] = os.getcwd()
    return plan, sources, inputs


def _finish(out: Path, state: dict[str, Any], plan, index: int | None, builds) -> None:
    from runner.bisect.measure import build_dry_run_lines
    from runner.bisect.report import write_reports

    lines = build_dry_run_lines(plan, index, builds[index]) if index is not None else []
    paths = write_reports(out, state, lines)
    print(paths[0].read_text(), end="")
    print(f"\nwrote {out / (state['command'] + '.json')}, "
          f"{', '.join(str(p) for p in paths)}", file=sys.stderr)


def cmd_bisect(ctx: CommandContext) -> int:
    from runner.bisect.builds import backwards_note, candidates, parse_build
    from runner.bisect.envs import plan_setup
    from runner.bisect.search import BisectRequest, bisect

    args = ctx.args
    plan, sources, inputs = _plan(args, args.test, trend=False)
    good = parse_build(args.good, sources, "--good")
    bad = parse_build(args.bad, sources, "--bad")
    note = backwards_note(good, bad)
    if note:
        print(f"warning: {note}", file=sys.stderr, flush=True)
    plan_setup(good, sources, plan.executor, plan.from_source)  # refuses a bad pairing now
    inputs.update(good=good.spec, bad=bad.spec)
    from runner.bisect.ledger import Ledger

    state_file = plan.out / "bisect.json"
    resumed = (Ledger(state_file, "bisect", inputs, ctx.argv).candidates
               if state_file.is_file() else None)
    builds = resumed or candidates(good, bad, sources)
    state = bisect(BisectRequest(good, bad, plan, ctx.argv, inputs, builds, args.dry_run))
    if args.dry_run:
        return EXIT_OK
    answer = state["answer"]
    culprit = next((i for i, b in enumerate(builds) if b.spec == answer.get("first_bad")),
                   None)
    _finish(plan.out, state, plan, culprit, builds)
    return EXIT_OK


def cmd_trend(ctx: CommandContext) -> int:
    from runner.bisect.builds import parse_build, parse_range
    from runner.bisect.envs import plan_setup
    from runner.bisect.trend import TrendRequest, trend

    args = ctx.args
    if bool(args.builds) == bool(args.range):
        raise RunnerError("give the builds, or --range A..B (one of them)", where="runner trend",
                          fix="e.g. runner trend wheels:3.12.0 wheels:3.13.0, or "
                          "--range wheels:3.10.0..wheels:3.13.0")
    plan, sources, inputs = _plan(args, args.test, trend=True)
    if args.range:
        builds = parse_range(args.range, sources)
    else:
        builds = [parse_build(b, sources, "BUILD") for b in args.builds]
        if len({b.spec for b in builds}) != len(builds):
            raise RunnerError("a build is listed twice", where="BUILD",
                              fix="list each build once")
    inputs["builds"] = [b.spec for b in builds]
    for build in builds:  # refuses a bad pairing (a commit in the image) before any work
        plan_setup(build, sources, plan.executor, plan.from_source)
    state = trend(TrendRequest(builds, plan, ctx.argv, inputs, args.dry_run))
    if args.dry_run:
        return EXIT_OK
    _finish(plan.out, state, plan, 0, builds)
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
    add_samples(p, BISECT_COUNT, count_note)
    add_find_links(p)
    shared(p, "--pre", action="store_true",
           help="list pre-releases too (IREE's X.Y.ZrcYYYYMMDD nightlies)")
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
    add_dry_run(p, "every candidate build and the commands of the first step")


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
    p.add_argument("--good", required=True, metavar="BUILD",
                   help="the last build known good: wheels:VERSION, commit:SHA, source:SHA or "
                   "build-dir:DIR (the older one)")
    p.add_argument("--bad", required=True, metavar="BUILD", help="a build known bad, as --good")
    _judged_builds(p, cmd_bisect, "bisect.json",
                   "images | pixels:TOL | accuracy | throughput:PCT | compile | compstat "
                   "| goldens:SUITE | script:CMD", "; accuracy: the profile's sample set",
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
                   "script:CMD (default: images)", "",
                   "trend dir: trend.json/.md, report.html, reproduce.sh, builds/",
                   "every finished step: its build's numbers are read from trend.json, not "
                   "measured again", default="images")
    document(p, "runner trend --range wheels:3.10.0..wheels:3.13.0 --profile tiny --count 2 "
             "--out runs/trend",
             "runner trend wheels:3.12.0 wheels:3.13.0 --test throughput:5 --out runs/t",
             out="the trend dir: trend.json, trend.md, report.html, reproduce.sh, builds/",
             exits=Exits(incomplete=DISK_FULL))

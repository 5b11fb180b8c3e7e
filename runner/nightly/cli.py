"""`runner nightly`: a thin layer over runner/nightly/."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from runner.base.errors import EXIT_BAD_INPUT, EXIT_OK, BadInput, RunnerError
from runner.base.outdir import RESUMES, Rerun
from runner.cli.context import CommandContext
from runner.cli.grammar import (
    DEFAULT_PROFILE,
    Exits,
    add_confirm_rounds,
    add_dry_run,
    add_find_links,
    add_iree,
    add_json,
    add_out,
    add_pre,
    add_profile,
    add_results,
    add_samples,
    document,
    rounds_at_most,
)

NIGHTLY_LOCK = ("nightly", "nightly.lock")  # under cache_dir(): one night at a time per machine


def _request(args: argparse.Namespace):
    from runner.bisect.builds import Sources, check_find_links
    from runner.config.profile import load_profile
    from runner.nightly.night import NightRequest
    from runner.nightly.notify import check_url
    from runner.nightly.pick import pick_build

    if args.notify:
        check_url(args.notify)
    profile = load_profile(args.profile)  # one the steps cannot read is refused before the night
    count = profile.count if args.count is None else args.count  # each step is told
    if count < 2 and "fid" in profile.accuracy.metrics:
        raise BadInput(f"--count {count}: the night scores its accuracy run, and FID needs "
                       "two images at least", where="--count", fix="pass --count 2 or more")
    sources = Sources(check_find_links(args.find_links), args.pre)
    build = pick_build(args.iree, sources)
    day = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    return NightRequest(Path(os.path.abspath(args.out)), build, sources, args.profile, day,
                        args.results, not args.no_bisect, count, not args.no_ab, args.rounds,
                        rounds_at_most(args))


def _dry_run(req: Any) -> int:
    from runner.bisect.envs import plan_setup, setup_lines
    from runner.nightly.pick import night_dir_name
    from runner.nightly.plan import night_steps

    night = req.root / night_dir_name(req.day, req.build)
    print(f"build: {req.build.spec}\nnight dir: {night}\nthe build's environment:")
    for line in setup_lines(plan_setup(req.build, req.sources)):
        print(f"  {line}")
    print("steps (each skipped where this machine measured the build already):")
    for step in night_steps(req.profile, req.count):
        python = "BUILD_PYTHON" if not step.host else sys.executable
        print(f"  {step.name}: {' '.join(step.argv(python, night))}")
    print("then: each step's results recorded; where the build changed tonight, the new build "
          "measured against the previous one, interleaved"
          + (":" if req.ab else " (not: --no-ab)"))
    if req.ab:
        from runner.nightly.ab import AB_DIR, ab_dry_run_lines

        for line in ab_dry_run_lines(req, night / AB_DIR):
            print(f"  {line}")
    print("then: the history judged; a regression between two nights' builds is confirmed "
          "(`runner history confirm`, for bench goldens times) and bisected"
          + ("" if req.bisect else " (not: --no-bisect)"))
    return EXIT_OK


def _notify(url: str | None, summary: dict[str, Any]) -> None:
    from runner.nightly.notify import post, shown_url

    if not url:
        return
    failed = post(url, summary)
    print(f"nightly: notify: {failed}; the exit code stands" if failed else
          f"nightly: notify: posted to {shown_url(url)}", file=sys.stderr)


def _locked_night(req: Any) -> dict[str, Any]:
    from runner.base.dirlock import DirLock
    from runner.base.paths import cache_dir
    from runner.nightly.night import run_night

    lock = DirLock(cache_dir().joinpath(*NIGHTLY_LOCK), "machine's nightly")
    lock.lock()
    try:
        return run_night(req)
    finally:
        lock.unlock()


def cmd_nightly(ctx: CommandContext) -> int:
    from runner.nightly.night import summary_of

    args = ctx.args
    req = _request(args)
    if args.dry_run:
        return _dry_run(req)
    try:
        summary = _locked_night(req)
    except RunnerError as e:
        failed = {**summary_of(req, "error", None, error=str(e), where=e.where),
                  "exit_code": EXIT_BAD_INPUT}
        _notify(args.notify, failed)
        raise
    print(json.dumps(summary, indent=2, sort_keys=True) if args.json else
          summary["headline"])
    _notify(args.notify, summary)
    return int(summary["exit_code"])


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "nightly", help="the one command a scheduler runs: tonight's IREE build measured, "
        "recorded, judged, a regression bisected",
        description="Picks the night's build (--iree, else the newest the index or "
        "--find-links page offers; --pre: IREE's nightlies), skips it where this machine "
        "measured it already, runs goldens check, bench goldens, an accuracy run and bench "
        "with it into OUT/<date>-<build>/, records each in the history, "
        "measures a new build against the previous one on its first night (bench goldens "
        "times, interleaved: --rounds, --max-rounds; --no-ab: not), judges the history, "
        "confirms a regression no night has handled yet between the two builds (bench "
        "goldens times: `runner history confirm`, both builds again, interleaved) and "
        "bisects it where it held. --count: the accuracy run's and bench's samples. Exit: "
        "0 measured and no regression (or already measured), 1 a confirmed regression or a "
        "failed check, 2 bad input or a step that failed (the same command again resumes).")
    add_iree(p, note=" (default: the newest the index offers)", kinds=("wheels",))
    add_find_links(p)
    add_pre(p)
    add_profile(p, DEFAULT_PROFILE, with_set=False)
    add_samples(p, "; the accuracy run's and bench's samples", choose=False)
    add_results(p, records=False)
    p.add_argument("--notify", metavar="URL",
                   help="POST the night's JSON summary to this webhook (Slack, Teams or any "
                   "URL); shown without its path, where the token is; a failed post is "
                   "reported and leaves the exit code as it is (default: none)")
    p.add_argument("--no-bisect", action="store_true",
                   help="name a regression but do not bisect it (default: bisect it)")
    p.add_argument("--no-ab", action="store_true",
                   help="on a new build's first night, do not measure it against the "
                   "previous build this machine measured, interleaved (default: measure "
                   "it: a bench goldens time that holds slower is a regression that night)")
    add_confirm_rounds(p)
    add_json(p, "the night's summary")
    add_dry_run(p, "the night's build, its dir and every step's command")
    add_out(p, "the nights' root: each night in <date>-<build>/ (nightly.json, logs/, one dir "
            "per step, bisect-N/)",
            Rerun(RESUMES, "every finished step: a night run again skips it",
                  free=("--iree", "--notify", "--no-bisect", "--pre", "--find-links",
                        "--count", "--no-ab", "--rounds", "--max-rounds")))
    p.set_defaults(func=cmd_nightly)
    document(p, "runner nightly --pre --find-links https://iree.dev/pip-release-links.html "
             "--out /data/nightly --notify https://hooks.slack.com/services/T0/B0/token",
             "runner nightly --iree wheels:3.13.0 --profile tiny --out runs/nightly --dry-run",
             out="the nights' root: OUT/<date>-<build>/nightly.json, logs/, goldens/, "
             "bench-goldens/, run/, bench/, bisect-N/",
             exits=Exits(verdict="a regression its bisect confirmed, or a failed check"))

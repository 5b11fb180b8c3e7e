"""`runner report RUN_DIR [--against RUN_DIR]`: (re)writes a run's four report files.

`register(subparsers)` adds it to the main `runner` parser. Exit 0 when the files were
written, whatever the verdict (CI reads the verdict from junit.xml); 2 on bad input.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from runner.base.errors import BadInput
from runner.base.outdir import RESUMES, Rerun
from runner.cli.context import CommandContext
from runner.cli.grammar import DISK_FULL, Exits, add_dry_run, add_out, add_worst, document
from runner.report.collect import WORST_DEFAULT


def cmd_report(ctx: CommandContext) -> int:
    from runner.report.write import write_reports

    args = ctx.args
    if args.against and Path(args.against).resolve() == Path(args.run_dir).resolve():
        raise BadInput("--against names the run itself", where="--against",
                       fix="pass another run dir to compare with")
    if args.dry_run:
        from runner.report.write import report_plan

        print("\n".join(report_plan(Path(args.run_dir),
                                    Path(args.against) if args.against else None,
                                    Path(args.out) if args.out else None)))
        return 0
    paths = write_reports(Path(args.run_dir), Path(args.against) if args.against else None,
                          Path(args.out) if args.out else None, args.worst)
    first = paths[0].read_text(encoding="utf-8").splitlines()[0]
    print(first.lstrip("# "))
    for path in paths:
        print(f"wrote {path}")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run dir to report on")
    p.add_argument("--against", metavar="RUN_DIR",
                   help="another run to compare images with (PSNR/SSIM; the [metrics] extra; "
                   "default: none)")
    add_worst(p, WORST_DEFAULT)
    add_out(p, "write the four files here", Rerun(RESUMES, "nothing: the reports are written "
            "again"), required=False, default="RUN_DIR")
    add_dry_run(p, "the files it would write")
    p.set_defaults(func=cmd_report)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="summary.md, results.json, junit.xml and report.html for a run",
        description="Reads a run dir (run.json, worker stats, samples, accuracy.json when "
                    "`runner score` has run) and writes summary.md (a CI job summary), "
                    "results.json, junit.xml (one testcase per check) and a self-contained "
                    "report.html. Exit 0 when written, whatever the verdict (CI reads it from "
                    "junit.xml), 2 on bad input. Under GitHub Actions summary.md is appended "
                    "to $GITHUB_STEP_SUMMARY and failures print as ::error:: annotations.")
    add_arguments(p)
    document(p, "runner report runs/main", "runner report runs/main --against runs/other",
             out="a directory for the four files (default: RUN_DIR itself)",
             exits=Exits(incomplete=DISK_FULL))

"""`runner gpu-check prepare|run`: a thin layer over runner/gpucheck/check.py."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from runner.base.outdir import REFUSES, RESUMES, Rerun
from runner.cli.context import CommandContext
from runner.cli.grammar import (
    DISK_FULL,
    Exits,
    add_batch_sizes,
    add_dry_run,
    add_out,
    add_profile,
    add_share_gpus,
    document,
)
from runner.gpucheck.plan import TINY_COUNT
from runner.inputs.cliargs import COUNT, SECONDS

DEFAULT_BUDGET_S = 480.0  # a machine lent for 10 minutes, less its start and the copies


def cmd_prepare(ctx: CommandContext) -> int:
    from runner.gpucheck.check import PrepareRequest, prepare

    args = ctx.args
    return prepare(PrepareRequest(args.profile, Path(args.out), args.batch_sizes, args.python,
                                  not args.no_wheels, args.dry_run,
                                  args.tiny_count or TINY_COUNT))


def cmd_gpu_check_run(ctx: CommandContext) -> int:
    from runner.gpucheck.check import RunRequest, run

    args = ctx.args
    attempt = ctx.attempt
    return run(RunRequest(args.carry, Path(args.out or args.resume), args.budget, args.dry_run,
                          resumed=bool(attempt is not None and attempt.resumed),
                          share_gpus=args.share_gpus))


def _step(p: argparse.ArgumentParser, func: Callable[[CommandContext], int], out_what: str,
          rule: str, keeps: str, dry_run: str, *examples: str, out: str, exits: Exits) -> None:
    """How both gpu-check steps end: an --out whose record is gpu_check.json (`rule`:
    RESUMES or REFUSES, keeping `keeps`), a --dry-run showing `dry_run`, the handler, and
    the examples, in that order (their help's)."""
    add_out(p, out_what, Rerun(rule, keeps, ("gpu_check.json",)))
    add_dry_run(p, dry_run)
    p.set_defaults(func=func)
    document(p, *examples, out=out, exits=exits)


def _run_flags(r: argparse.ArgumentParser) -> None:
    """`run`'s own: its budget, and whether its steps start beside other GPU processes."""
    r.add_argument("--carry", required=True, metavar="DIR",
                   help="the directory `runner gpu-check prepare` wrote")
    r.add_argument("--budget", type=SECONDS, default=DEFAULT_BUDGET_S, metavar="SECONDS",
                   help=f"seconds the whole check may take (default: {DEFAULT_BUDGET_S:.0f})")
    add_share_gpus(r)


def register(subparsers: argparse._SubParsersAction) -> None:
    check = subparsers.add_parser(
        "gpu-check", help="compile here, run there: what the runner measures on a GPU machine "
        "lent for minutes, without a compiler or a network",
        description="`prepare` compiles everything the check runs into a carry directory (on a "
        "machine with iree-compile); `run` runs the carry's plan on the GPU machine inside a "
        "budget: the GPU's description, throughput per VAE precision at batch size 1, a short "
        "MLPerf Offline test, the largest batch that fits, the tiny model's images against "
        "the CPU's, and the dispatch profile where the driver has a profiler.")
    sub = check.add_subparsers(dest="gpu_check_command", required=True, metavar="{prepare,run}")

    p = sub.add_parser("prepare", help="compile the check into a carry (needs iree-compile)")
    add_profile(p, with_set=False)
    add_batch_sizes(p, "1,8 for an SDXL exported on demand; the model's own for tiny")
    p.add_argument("--python", default="3.12", metavar="X.Y",
                   help="the GPU machine's Python, for the wheels (default: 3.12)")
    # None when not given: a carry prepared before the flag existed is prepared again as is
    p.add_argument("--tiny-count", type=COUNT, default=None, metavar="N",
                   help="the tiny model's samples 0..N-1 whose images the check compares, this "
                   "machine's against the GPU's: fewer prepare and run sooner, more check more "
                   f"images (default: {TINY_COUNT})")
    p.add_argument("--no-wheels", action="store_true",
                   help="carry no wheels (the GPU machine has the IREE runtime and LoadGen)")
    _step(p, cmd_prepare, "the carry: cache/ (compiled modules and exports, as "
          "$RUNNER_CACHE_DIR), tiny-cpu/, wheels/, mlperf-short.conf, gpu_check.json (the plan) "
          "and README.txt", RESUMES, "every compiled module and the CPU's tiny run: only what "
          "is missing is made", "every command",
          "runner gpu-check prepare --profile h100-seeded --out carry",
          "runner gpu-check prepare --profile h100-seeded --out carry --dry-run",
          "runner gpu-check prepare --profile cpu --batch-sizes 1,2 --no-wheels --out carry-cpu",
          out="the carry directory, copied whole to the GPU machine",
          exits=Exits(incomplete=DISK_FULL))

    r = sub.add_parser("run", help="run a carry's check (no compiler, no network)")
    _run_flags(r)
    _step(r, cmd_gpu_check_run,
          "the results: gpu_check.json, gpu_check.md, each step's output and logs/", REFUSES,
          "every step that passed, or found a batch too large or a profiler missing, and "
          "whose files are there", "every step's command",
          "runner gpu-check run --carry carry --out results",
          "runner gpu-check run --carry carry --out results --budget 480",
          "runner gpu-check run --resume results",
          out="the results directory",
          exits=Exits(verdict="a check step failed", incomplete=DISK_FULL))
    document(check, "runner gpu-check prepare --profile h100-seeded --out carry",
             "runner gpu-check run --carry carry --out results",
             exits=Exits())  # alone it prints its help

"""`runner compile`, `runner fetch` and `runner generate`: a profile's model compiled
through the cache, its artifacts downloaded, a few images made in one process.
`register(subparsers)` adds them to the `runner` parser (runner/cli/main.py);
`runner export` is runner/model/export/cli.py's."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from runner.base.errors import EXIT_OK
from runner.base.outdir import RESUMES, Rerun
from runner.cli.context import CommandContext
from runner.cli.grammar import (
    DISK_FULL,
    Exits,
    add_batch_sizes,
    add_dry_run,
    add_json,
    add_out,
    add_profile,
    add_samples,
    document,
    print_json,
    sample_ids,
)
from runner.config.overrides import profile_from_args
from runner.config.reads import ProfileReads
from runner.inputs.paths import resolved

# The profile fields each command acts on (runner.config.reads): a `--set` of another is
# refused. Compiling reads the model, the target's compile settings and the layout (its
# batch sizes; the layout is checked against the backend compiled for); fetching the model's
# artifacts, the model; generating, what a run's workers read.
COMPILE_READS = ProfileReads("compile", ("model", "target", "layout"),
                             but=("target.driver", "target.runtime_flags", "target.sku"))
FETCH_READS = ProfileReads("fetch", ("model",))
GENERATE_READS = ProfileReads("generate", ("name", "count", "model", "target", "layout"),
                              but=("target.sku",))

# A carry holds what any number of compiles gathered (two VAE precisions, more batch
# sizes): each adds its modules, whatever its profile.
CARRY_RERUN = Rerun(RESUMES, "every module and export file already there: only the missing "
                    "ones are copied", free=("--profile", "--set", "--batch-sizes"))


def cmd_compile(ctx: CommandContext) -> int:
    from runner.model.compiled_model import compile_model

    args = ctx.args
    profile = profile_from_args(args, COMPILE_READS)
    sizes = args.batch_sizes
    models = [compile_model(profile, batch, None if sizes else profile.layout.vae_batch_size,
                            dry_run=args.dry_run)
              for batch in sizes or [profile.layout.batch_size]]
    carried = None
    if args.out and not args.dry_run:
        from runner.model.carry import carry

        carried = carry(models, resolved(Path(args.out), "--out"))
    if args.json:
        print_json([m.to_dict() for m in models])
    else:
        for compiled in models:
            for result in compiled.compiled:
                print(_compiled_line(result, compiled.batch_size, args.dry_run))
    if args.out and args.dry_run:
        print(f"# then gather the compiled modules and the model's files into {args.out}")
    if carried is not None:
        print(carried.summary(), file=sys.stderr if args.json else sys.stdout)
    return 0


def _compiled_line(result, batch_size: int, dry_run: bool) -> str:
    """One module of `runner compile`: its command (dry run) or where its vmfb came from."""
    if result.elsewhere:
        state = f"compiled elsewhere by {result.compiled_by}"
        return (f"# {Path(result.mlir).name} [bs{batch_size}]: {state}: {result.vmfb}"
                if dry_run else f"{Path(result.mlir).name} [bs{batch_size}]: {state} -> "
                f"{result.vmfb}")
    if dry_run:
        return shlex.join(result.command)
    state = "cached" if result.cached else f"compiled in {result.seconds:.1f}s"
    return f"{Path(result.mlir).name} [bs{batch_size}]: {state} -> {result.vmfb}"


def cmd_fetch(ctx: CommandContext) -> int:
    from runner.config.sources import redact_url
    from runner.model.compiled_model import fetch_artifacts

    args = ctx.args
    for ref, path in fetch_artifacts(profile_from_args(args, FETCH_READS), dry_run=args.dry_run):
        print(f"{redact_url(ref)} -> {path}" if args.dry_run else path)
    return 0


def cmd_generate(ctx: CommandContext) -> int:
    from runner.model.generate import generate, generate_commands

    args = ctx.args
    profile = profile_from_args(args, GENERATE_READS)
    ids = sample_ids(args, None, profile.count)
    if args.dry_run:
        print("\n".join(generate_commands(profile, ids, Path(args.out))))
        return EXIT_OK
    result = generate(profile, ids, Path(args.out))
    print(f"{len(result.images)} images in {result.seconds:.1f}s -> {result.out}/images")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("compile", help="compile the profile's model through the cache")
    add_profile(p)
    add_batch_sizes(p, "the layout's batch size")
    add_dry_run(p, "the iree-compile commands")
    add_json(p, "the compiled models")
    add_out(p, "also gather what a machine without iree-compile needs to run these batch "
            "sizes into DIR, laid out as $RUNNER_CACHE_DIR: the compiled modules and an "
            "exported model's files, less the weights a seeded model's spec writes "
            "there; prints its size", CARRY_RERUN, required=False,
            default="none: the cache only")
    p.set_defaults(func=cmd_compile)
    document(p, "runner compile --profile tiny        # a second time: every module cached",
             "runner compile --profile mi325x --dry-run",
             "runner compile --profile h100-seeded --batch-sizes 1,8 --out carry  "
             "# then on the GPU node: RUNNER_CACHE_DIR=carry runner bench ...",
             out="with --out: DIR/vmfb/ (compiled modules, their cache records and MLIR index) "
             "and DIR/exports/ (an exported model's files for these batch sizes)",
             exits=Exits(incomplete=DISK_FULL))

    p = subparsers.add_parser("fetch", help="download a profile's model artifacts into the cache")
    add_profile(p)
    add_dry_run(p, "each URL and the cache path it would be downloaded to")
    p.set_defaults(func=cmd_fetch)
    document(p, "runner fetch --profile sdxl", "runner fetch --profile sdxl --dry-run",
             exits=Exits(incomplete=DISK_FULL))

    p = subparsers.add_parser("generate", help="single-process generation of the first N prompts")
    add_profile(p)
    add_samples(p)
    add_out(p, "directory for manifest.json and images/",
            Rerun(RESUMES, "nothing: it is one short process, its images are made again",
                  ("manifest.json",)))
    add_dry_run(p, "the compile commands")
    p.set_defaults(func=cmd_generate)
    document(p, "runner generate --profile tiny --count 4 --out runs/gen",
             "runner generate --profile tiny --count 4 --out runs/gen --dry-run",
             exits=Exits(incomplete=DISK_FULL))

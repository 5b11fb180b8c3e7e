"""`runner goldens ...`: check, generate, bump, upload, compare-steps.

`register(subparsers)` adds the `goldens` command to the main `runner` parser.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from runner.errors import RunnerError
from runner.fileio import atomic_write_text
from runner.paths import REPO_DIR

DEFAULT_SUITE = REPO_DIR / "goldens" / "tiny"


def _paths(args: argparse.Namespace) -> list[Path]:
    return [Path(p) for p in args.paths] or [DEFAULT_SUITE]


def _tests(args: argparse.Namespace):
    from runner.goldens.testfile import load_tests

    backend = {"hip": "rocm"}.get(args.backend, args.backend)
    return load_tests(_paths(args), model=args.model, submodel=args.submodel, backend=backend)


def _options(args: argparse.Namespace, **over):
    from runner.goldens.check import CheckOptions

    spec = Path(args.tuning_spec) if args.tuning_spec else None
    if spec is not None and not spec.is_file():
        raise RunnerError("tuning spec not found", where=f"--tuning-spec {spec}")
    values = dict(sku=args.sku, rocm_chip=args.rocm_chip, tuning_spec=spec,
                  tuner_dir=Path(args.tuner_dir) if args.tuner_dir else None,
                  out=Path(args.out) if getattr(args, "out", None) else None,
                  dry_run=getattr(args, "dry_run", False), offline=args.offline,
                  compile_only=getattr(args, "compile_only", False), device=args.device)
    values.update(over)
    return CheckOptions(**values)


def cmd_check(args: argparse.Namespace) -> int:
    from runner.goldens.check import check

    report = check(_tests(args), _options(args))
    if args.out and not args.dry_run:
        print(f"reports: {Path(args.out) / 'summary.md'}, {Path(args.out) / 'junit.xml'}",
              file=sys.stderr)
    return report.exit_code


def cmd_generate(args: argparse.Namespace) -> int:
    from runner.goldens.generate import generate
    from runner.goldens.versioning import parse_target

    to = parse_target(args.to)
    written = generate(_tests(args), to, Path(args.out), _options(args, out=None))
    print(f"{len(written)} new goldens in {args.out}; next: `runner goldens upload "
          f"{args.out} --container-url ...`, then `runner goldens bump ... --to {args.to}`",
          file=sys.stderr)
    return 0


def cmd_bump(args: argparse.Namespace) -> int:
    from runner.goldens.testfile import find_test_files
    from runner.goldens.versioning import bump_file_text, parse_target

    to = parse_target(args.to)
    files = find_test_files(_paths(args), args.model)
    planned = []
    for path in files:  # every file is checked before any is written
        text = path.read_text(encoding="utf-8")
        new_text, bumps = bump_file_text(text, str(path), to)
        planned.append((path, new_text, bumps))
    for path, new_text, bumps in planned:
        target = Path(args.out) / path.name if args.out else path
        if bumps or args.out:
            atomic_write_text(target, new_text)
        for b in bumps:
            print(f"{target}: {b.describe()}")
    return 0


def cmd_upload(args: argparse.Namespace) -> int:
    from runner.goldens.upload import upload

    upload(Path(args.dir), args.container_url, execute=args.execute, overwrite=args.overwrite)
    return 0


def cmd_compare_steps(args: argparse.Namespace) -> int:
    from runner.goldens.steps import compare_steps

    report = compare_steps(args.profile, args.prompt_id, args.tolerance)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.table())
    if args.out:
        out = Path(args.out)
        atomic_write_text(out / "compare_steps.json", json.dumps(report.to_dict(), indent=2)
                          + "\n")
        atomic_write_text(out / "compare_steps.md", report.table() + "\n")
    return 0 if report.first_over is None else 1


def _selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", metavar="FILES|DIR",
                   help=f"test JSON files or directories (default: {DEFAULT_SUITE})")
    p.add_argument("--model", help="with a directory: its <model>/ subdirectory (e.g. sdxl)")
    p.add_argument("--submodel", default="*", help="submodel name or glob (default: *)")
    p.add_argument("--backend", choices=["cpu", "rocm", "hip"], help="only this backend")
    p.add_argument("--sku", default="mi300", help="picks the tuner_file entry (default mi300)")
    p.add_argument("--rocm-chip", default="gfx942", help="ROCm chip to compile for")
    p.add_argument("--tuner-dir", help="where relative tuner_file names are found")
    p.add_argument("--tuning-spec", metavar="PATH",
                   help="add --iree-codegen-tuning-spec-path=PATH to every compile")
    p.add_argument("--device", help="runtime device instead of the file's (e.g. local-sync)")
    p.add_argument("--offline", action="store_true", default=None,
                   help="use only cached downloads (also RUNNER_OFFLINE=1)")


def register(subparsers) -> argparse.ArgumentParser:
    goldens = subparsers.add_parser("goldens", help="IREE CI golden tests: check, regenerate, "
                                    "bump, upload; per-step compare")
    sub = goldens.add_subparsers(dest="goldens_command", required=True)

    p = sub.add_parser("check", help="compile, run and compare like IREE CI's quality tests")
    _selection(p)
    p.add_argument("--out", help="write junit.xml, summary.md, results.json here")
    p.add_argument("--dry-run", action="store_true",
                   help="print the iree-compile and iree-run-module commands only")
    p.add_argument("--compile-only", action="store_true", help="compile, do not run")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("generate", help="run the tests and write v{n+1} outputs to --out")
    _selection(p)
    p.add_argument("--to", required=True, help="new version: v7.0, v7, or next (n+1 each)")
    p.add_argument("--out", required=True, help="directory for the new blobs + manifest.json")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("bump", help="rename output sources to the new version in the JSONs")
    p.add_argument("paths", nargs="*", metavar="FILES|DIR")
    p.add_argument("--model", help="with a directory: its <model>/ subdirectory")
    p.add_argument("--to", required=True, help="new version: v7.0, v7, or next")
    p.add_argument("--out", help="write the bumped files here instead of in place")
    p.set_defaults(func=cmd_bump)

    p = sub.add_parser("upload", help="upload generated goldens to Azure (dry run by default)")
    p.add_argument("dir", help="the --out directory of `goldens generate`")
    p.add_argument("--container-url", required=True,
                   help="https://<account>.blob.core.windows.net/<container>[/<path>]")
    p.add_argument("--execute", action="store_true", help="really upload")
    p.add_argument("--overwrite", action="store_true", help="replace existing blobs")
    p.set_defaults(func=cmd_upload)

    p = sub.add_parser("compare-steps", help="per-stage IREE vs PyTorch error, each stage "
                       "fed IREE's own inputs")
    p.add_argument("--profile", default="tiny")
    p.add_argument("--prompt-id", type=int, default=0, help="MLPerf caption row")
    p.add_argument("--tolerance", type=float, default=None,
                   help="max_abs allowed per stage (default: per-stage defaults)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--out", help="also write compare_steps.json and .md here")
    p.set_defaults(func=cmd_compare_steps)
    return goldens

"""The `runner` command: a thin argparse layer over the library; exit 2 on bad input."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

from runner.errors import RunnerError


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
    from runner.profile import load_profile

    return load_profile(args.profile, _overrides(args))


def cmd_export(args: argparse.Namespace) -> int:
    from runner.export.export_tiny import TINY_DIR, export_tiny

    for path in export_tiny(Path(args.out) if args.out else TINY_DIR):
        print(path)
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    from runner.compiled_model import compile_model

    profile = _profile(args)
    sizes = [int(b) for b in args.batch_sizes.split(",")] if args.batch_sizes else None
    for batch in sizes or [profile.layout.batch_size]:
        compiled = compile_model(profile, batch, None if sizes else profile.layout.vae_batch_size,
                                 dry_run=args.dry_run)
        for result in compiled.compiled:
            if args.dry_run:
                print(shlex.join(result.command))
            else:
                state = "cached" if result.cached else f"compiled in {result.seconds:.1f}s"
                print(f"{Path(result.mlir).name} [bs{batch}]: {state} -> {result.vmfb}")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from runner.generate import generate

    result = generate(_profile(args), list(range(args.prompts)), Path(args.out))
    print(f"{len(result.images)} images in {result.seconds:.1f}s -> {result.out}/images")
    return 0


def _add_profile(p: argparse.ArgumentParser, default: str = "tiny") -> None:
    p.add_argument("--profile", default=default, help="profile name in configs/ or a YAML path")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override any profile field, e.g. --set target.chip=gfx950")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="runner", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("export", help="export the embedded tiny SDXL (needs the [export] extra)")
    p.add_argument("model", choices=["tiny"])
    p.add_argument("--out", help="directory (default: the package's shipped assets)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("compile", help="compile the profile's model through the cache")
    _add_profile(p)
    p.add_argument("--batch-sizes", help="comma list (default: the layout's batch size)")
    p.add_argument("--dry-run", action="store_true", help="print the iree-compile commands")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("generate", help="single-process generation of the first N prompts")
    _add_profile(p)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_generate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except RunnerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True))

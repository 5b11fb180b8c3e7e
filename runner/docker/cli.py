"""`runner image build|inspect`: registered into runner/cli/main.py by `register(subparsers)`."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from runner.cli.context import CommandContext
from runner.cli.grammar import (
    DISK_FULL,
    Exits,
    add_base_image,
    add_dry_run,
    add_find_links,
    add_iree,
    document,
    renamed,
)
from runner.docker.image import DEFAULT_BASE_IMAGE, FLAVORS, build_image, image_info, parse_source


def _comma_list(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    return tuple(x.strip() for x in text.split(",") if x.strip())


def cmd_image_build(ctx: CommandContext) -> int:
    args = ctx.args
    source = parse_source(args.iree, find_links=args.find_links, git_url=args.git_url,
                          backends=_comma_list(args.backends), drivers=_comma_list(args.drivers))
    progress = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    result = build_image(source, base_image=args.base_image, tags=tuple(args.tag or ()),
                         dry_run=args.dry_run, progress=progress,
                         ccache_dir=Path(args.ccache_dir) if args.ccache_dir else None,
                         keep_context=args.keep_context, no_cache=args.no_cache)
    if args.dry_run:
        print(shlex.join(result.plan.command()))
        return 0
    state = "cached" if result.cached else f"built in {result.seconds:.1f}s"
    print(json.dumps({"tag": result.tag, "id": result.image_id, "state": state,
                      "extra_tags": list(result.plan.extra_tags)}, indent=2))
    return 0


def cmd_image_inspect(ctx: CommandContext) -> int:
    args = ctx.args
    print(json.dumps(image_info(args.ref, provenance=not args.no_provenance), indent=2,
                     sort_keys=True))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    image = subparsers.add_parser("image", help="build and inspect the runner's docker images")
    sub = image.add_subparsers(dest="image_command", required=True)

    p = sub.add_parser("build", help="build an image with IREE from wheels, source or a build "
                       "tree (content-addressed: unchanged inputs are a cache hit)")
    add_iree(p, required=True, kinds=FLAVORS,
             note=" (commit: is bisect's and trend's; build a commit with source:)")
    renamed(p, "--from", "--iree BUILD", "one build flag in every command")
    add_base_image(p, DEFAULT_BASE_IMAGE)
    p.add_argument("--tag", action="append", metavar="TAG",
                   help="extra tag besides the content tag (repeatable; default: none)")
    add_dry_run(p, "the equivalent `docker build` command (the context is staged in a "
                "temporary directory to hash it, then removed: see --keep-context)")
    add_find_links(p)
    p.add_argument("--git-url", metavar="URL",
                   help="source: repository to fetch (default: upstream IREE)")
    p.add_argument("--backends", metavar="NAMES",
                   help="source: compiler targets, e.g. llvm-cpu,rocm (default: llvm-cpu,rocm)")
    p.add_argument("--drivers", metavar="NAMES", help="source: runtime HAL drivers, e.g. "
                   "local-task,hip (default: local-sync,local-task,hip)")
    p.add_argument("--ccache-dir", metavar="DIR",
                   help="source: seed the build's ccache from this directory (default: none)")
    p.add_argument("--keep-context", action="store_true",
                   help="keep the staged build context after a successful build, or a dry "
                   "run's under the cache so its printed command runs (default: removed; a dry "
                   "run writes nothing)")
    p.add_argument("--no-cache", action="store_true",
                   help="rebuild every layer even if the content tag exists")
    p.add_argument("--quiet", action="store_true", help="no build log on stderr")
    p.set_defaults(func=cmd_image_build)
    document(p, "runner image build --iree wheels:3.13.0",
             "runner image build --iree source:<sha> --dry-run",
             "runner image build --iree build-dir:/path/to/iree-build",
             exits=Exits(incomplete=DISK_FULL))

    p = sub.add_parser("inspect", help="image ID, labels and the IREE provenance recorded "
                       "inside it (JSON)")
    p.add_argument("ref", metavar="TAG", help="image tag or ID")
    p.add_argument("--no-provenance", action="store_true",
                   help="skip reading /opt/runner/iree-provenance.json from the image")
    p.set_defaults(func=cmd_image_inspect)
    document(p, "runner image inspect iree-sdxl-runner:wheels-3.13.0-<hash>",
             exits=Exits())
    document(image, "runner image build --iree wheels:3.13.0",
             "runner image inspect iree-sdxl-runner:wheels-3.13.0-<hash>",
             exits=Exits())  # alone it prints its help

"""`runner image build|inspect`: registered into runner/cli.py by `register(subparsers)`."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from runner.clihelp import document
from runner.docker.image import DEFAULT_BASE_IMAGE, build_image, image_info, parse_source


def _comma_list(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    return tuple(x.strip() for x in text.split(",") if x.strip())


def cmd_image_build(args: argparse.Namespace) -> int:
    source = parse_source(args.source, find_links=args.find_links, git_url=args.git_url,
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


def cmd_image_inspect(args: argparse.Namespace) -> int:
    print(json.dumps(image_info(args.ref, provenance=not args.no_provenance), indent=2,
                     sort_keys=True))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    image = subparsers.add_parser("image", help="build and inspect the runner's docker images")
    sub = image.add_subparsers(dest="image_command", required=True)

    p = sub.add_parser("build", help="build an image with IREE from wheels, source or a build "
                       "tree (content-addressed: unchanged inputs are a cache hit)")
    p.add_argument("--from", dest="source", required=True,
                   metavar="wheels:VERSION|source:SHA|build-dir:PATH",
                   help="where IREE comes from, e.g. wheels:3.13.0, source:1a2b3c4, "
                   "build-dir:../iree-build")
    p.add_argument("--base-image", default=DEFAULT_BASE_IMAGE,
                   help="a ROCm dev image in the labs (default: %(default)s, made by "
                   "scripts/docker_setup.sh)")
    p.add_argument("--tag", action="append",
                   help="extra tag besides the content tag (repeatable)")
    p.add_argument("--dry-run", action="store_true",
                   help="stage the context and print the equivalent `docker build` command")
    p.add_argument("--find-links", help="wheels: --find-links URL for nightly wheels")
    p.add_argument("--git-url", help="source: repository to fetch (default upstream IREE)")
    p.add_argument("--backends", help="source: compiler targets, e.g. llvm-cpu,rocm")
    p.add_argument("--drivers", help="source: runtime HAL drivers, e.g. local-task,hip")
    p.add_argument("--ccache-dir", help="source: seed the build's ccache from this directory")
    p.add_argument("--keep-context", action="store_true",
                   help="keep the staged build context after a successful build")
    p.add_argument("--no-cache", action="store_true",
                   help="rebuild every layer even if the content tag exists")
    p.add_argument("--quiet", action="store_true", help="no build log on stderr")
    p.set_defaults(func=cmd_image_build)
    document(p, "runner image build --from wheels:3.13.0",
             "runner image build --from source:<sha> --dry-run",
             "runner image build --from build-dir:/path/to/iree-build")

    p = sub.add_parser("inspect", help="image ID, labels and the IREE provenance recorded "
                       "inside it (JSON)")
    p.add_argument("ref", metavar="TAG", help="image tag or ID")
    p.add_argument("--no-provenance", action="store_true",
                   help="skip reading /opt/runner/iree-provenance.json from the image")
    p.set_defaults(func=cmd_image_inspect)
    document(p, "runner image inspect iree-sdxl-runner:wheels-3.13.0-<hash>")
    document(image, "runner image build --from wheels:3.13.0",
             "runner image inspect iree-sdxl-runner:wheels-3.13.0-<hash>")

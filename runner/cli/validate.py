"""`runner validate`: an IREE build end to end (runner/validate.py). The workflow is one
module rather than a package, so its command is registered here, in the CLI package.
`register(subparsers)` adds it to the `runner` parser (runner/cli/main.py)."""

from __future__ import annotations

from pathlib import Path

from runner.base.outdir import RESUMES, Rerun
from runner.cli.context import CommandContext
from runner.cli.grammar import (
    DEFAULT_PROFILE,
    SAMPLES_MISSING,
    Exits,
    add_base_image,
    add_dry_run,
    add_golden_version,
    add_iree,
    add_judged,
    add_out,
    add_results,
    add_run_inputs,
    add_share_gpus,
    document,
    sample_ids,
)
from runner.config.overrides import profile_from_args
from runner.config.reads import ProfileReads
from runner.docker.image import DEFAULT_BASE_IMAGE
from runner.inputs.iree_build import IMAGE_KINDS
from runner.inputs.paths import suite_path

# The profile fields `runner validate` acts on (runner.config.reads): the run it makes and
# scores, as `runner run` reads them; a `--set` of another is refused.
VALIDATE_READS = ProfileReads("validate", ("name", "count", "model", "target", "layout",
                                           "accuracy"), but=("target.sku",))


def cmd_validate(ctx: CommandContext) -> int:
    from runner.validate import ValidateRequest, validate

    args = ctx.args
    args.profile = args.profile or DEFAULT_PROFILE
    profile = profile_from_args(args, VALIDATE_READS)
    request = ValidateRequest(
        iree=args.iree, profile=profile, sample_ids=sample_ids(args, None, profile.count),
        out=Path(args.out), argv=ctx.argv,
        goldens=suite_path(args.goldens) if args.goldens else None,
        to=args.to, baseline=Path(args.baseline) if args.baseline else None,
        base_image=args.base_image, dry_run=args.dry_run, require_full=args.require_full,
        share_gpus=args.share_gpus)
    return validate(request)


def register(subparsers) -> None:
    p = subparsers.add_parser("validate", help="an IREE build end to end: image, compile, accuracy "
                       "run, score, then goldens v{n+1}; resumable")
    add_iree(p, required=True, kinds=IMAGE_KINDS,
             note=" (commit: is bisect's and trend's; build a commit with source:)")
    add_run_inputs(p)
    add_share_gpus(p)
    add_judged(p)
    p.add_argument("--goldens", metavar="SUITE",
                   help="IREE CI test-suite dir to regenerate on PASS, or a shipped suite by "
                   "name, e.g. tiny (default: none)")
    add_golden_version(p, required=False, default="next")
    p.add_argument("--baseline", metavar="DIR",
                   help="an earlier validate's --out to compare against (default: none)")
    add_base_image(p, DEFAULT_BASE_IMAGE)
    add_results(p)
    add_out(p, "validate directory: validate.json/.md, the run dir, goldens",
            Rerun(RESUMES, "each step whose inputs are unchanged and whose outputs are there: "
                  "image, compile, the run's finished samples, score, goldens",
                  ("validate.json",)))
    add_dry_run(p, "every command it would run; exit 0 with a DRY RUN verdict")
    p.set_defaults(func=cmd_validate)
    document(p, "runner validate --iree wheels:3.13.0 --profile cpu --count 32 "
             "--goldens tiny --to v2.0 --out runs/validate",
             "runner validate --iree source:<sha> --profile mi325x --dry-run --out runs/v",
             out="the validate directory: validate.json, validate.md, run/ (with its "
             "reports), goldens/",
             exits=Exits(verdict="accuracy or goldens failed, or a subset with --require-full",
                         incomplete=SAMPLES_MISSING, scores=True))

"""`runner goldens ...`: check, generate, bump, upload, compare-steps.

`register(subparsers)` adds the `goldens` command to the main `runner` parser.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from runner.base.errors import BadInput
from runner.base.fileio import atomic_write_text
from runner.base.outdir import RESUMES, Rerun
from runner.base.paths import GOLDENS_DIR, refuse_package_write
from runner.cli.context import CommandContext
from runner.cli.grammar import (
    DISK_FULL,
    Exits,
    add_dry_run,
    add_golden_version,
    add_json,
    add_out,
    add_profile,
    add_results,
    document,
    renamed,
    shared,
)
from runner.goldens.plan import DEFAULT_CHIP, DEFAULT_SKU
from runner.inputs.cliargs import SCALE, SECONDS
from runner.inputs.paths import shipped_suites, suite_path

DEFAULT_SUITE = GOLDENS_DIR / "tiny"  # the shipped tiny suite


def _paths(args: argparse.Namespace) -> list[Path]:
    return [suite_path(p) for p in args.paths] or [DEFAULT_SUITE]


def selection(args: argparse.Namespace):
    """Flags, else the environment variables IREE CI's runners read (BACKEND, ROCM_CHIP,
    SKU); `bench goldens` selects the same way."""
    from runner.goldens.select import (
        ENV_BACKEND,
        ENV_ROCM_CHIP,
        ENV_SKU,
        Expression,
        Selection,
        backend_name,
        from_env,
    )

    backend, source = from_env(getattr(args, "backend", None), ENV_BACKEND)
    chip, _ = from_env(args.rocm_chip, ENV_ROCM_CHIP)
    sku, _ = from_env(args.sku, ENV_SKU)
    marker = getattr(args, "marker", None)
    keyword = getattr(args, "keyword", None)
    return Selection(
        model=getattr(args, "model", None), submodel=getattr(args, "submodel", "*"),
        backend=backend_name(backend, "--backend" if source == "flag" else f"{source}"),
        marker=Expression(marker, "--marker") if marker else None,
        keyword=Expression(keyword, "-k") if keyword else None,
        rocm_chip=chip, sku=sku)


def module_dirs(args: argparse.Namespace) -> tuple[Path, ...]:
    return tuple(Path(d) for d in getattr(args, "module_dir", None) or ())


def _tests(args: argparse.Namespace):
    from runner.goldens.testfile import load_tests

    return load_tests(_paths(args), selection(args), module_dirs(args))


def _options(args: argparse.Namespace, **over):
    from runner.goldens.plan import CheckOptions

    spec = suite_path(args.tuning_spec) if args.tuning_spec else None
    if spec is not None and not spec.is_file():
        raise BadInput("tuning spec not found", where=f"--tuning-spec {spec}",
                       fix="give the path of a tuning spec .mlir file")
    timeout = getattr(args, "timeout", None)
    if timeout is not None and timeout <= 0:
        raise BadInput(f"--timeout {timeout:g} must be more than 0 seconds",
                       where="--timeout", fix="e.g. --timeout 600, or leave it out")
    chosen = selection(args)
    values = dict(sku=chosen.sku or DEFAULT_SKU, rocm_chip=chosen.rocm_chip or DEFAULT_CHIP,
                  tuning_spec=spec,
                  tuner_dir=Path(args.tuner_dir) if args.tuner_dir else None,
                  out=Path(args.out) if getattr(args, "out", None) else None,
                  dry_run=getattr(args, "dry_run", False), offline=args.offline,
                  compile_only=getattr(args, "compile_only", False), device=args.device,
                  strict=getattr(args, "strict", False), timeout=timeout)
    values.update(over)
    return CheckOptions(**values)


def cmd_check(ctx: CommandContext) -> int:
    from runner.goldens.check import check
    from runner.goldens.report import markdown
    from runner.report.ci import publish

    args = ctx.args
    report = check(_tests(args), _options(args))
    if args.dry_run:
        return report.exit_code
    if args.out:
        print(f"reports: {Path(args.out) / 'summary.md'}, {Path(args.out) / 'junit.xml'}",
              file=sys.stderr)
    # Under GitHub Actions: the summary in the job summary, failures and warnings annotated.
    publish(markdown(report),
            errors=[(r.test.name, r.message or r.status) for r in report.results if not r.ok],
            warnings=[(r.test.name, w) for r in report.results for w in r.warnings])
    return report.exit_code


def cmd_goldens_generate(ctx: CommandContext) -> int:
    from runner.goldens.generate import generate_goldens
    from runner.goldens.versioning import parse_target

    args = ctx.args
    to = parse_target(args.to)
    if args.dry_run:
        from runner.goldens.generate import generate_plan

        print("\n".join(generate_plan(_tests(args), to, Path(args.out),
                                      _options(args, out=None))))
        return 0
    written = generate_goldens(_tests(args), to, Path(args.out), _options(args, out=None),
                       attempt=ctx.attempt)
    print(f"{len(written)} new goldens in {args.out}; next: `runner goldens upload "
          f"{args.out} --container-url ...`, then `runner goldens bump ... --to {args.to}`",
          file=sys.stderr)
    return 0


def cmd_bump(ctx: CommandContext) -> int:
    from runner.goldens.testfile import find_test_files
    from runner.goldens.versioning import bump_file_text, parse_target

    args = ctx.args
    to = parse_target(args.to)
    files = find_test_files(_paths(args), args.model)
    planned = []
    for path in files:  # every file is checked before any is written
        text = path.read_text(encoding="utf-8")
        new_text, bumps = bump_file_text(text, str(path), to)
        if bumps and not args.out:
            refuse_package_write(path, "runner goldens bump")  # e.g. the shipped tiny suite
        planned.append((path, new_text, bumps))
    for path, new_text, bumps in planned:
        target = Path(args.out) / path.name if args.out else path
        if (bumps or args.out) and not args.dry_run:
            atomic_write_text(target, new_text)
        for b in bumps:
            print(f"{target}: {b.describe()}")
    if args.dry_run:
        print(f"dry run: {sum(len(b) for _, _, b in planned)} rename(s) in "
              f"{len(planned)} file(s) not written", file=sys.stderr)
    return 0


def cmd_upload(ctx: CommandContext) -> int:
    from runner.goldens.upload import upload

    args = ctx.args
    upload(Path(args.dir), args.container_url, execute=not args.dry_run,
           overwrite=args.overwrite)
    return 0


def cmd_compare_steps(ctx: CommandContext) -> int:
    from runner.goldens.steps import compare_steps

    args = ctx.args
    if args.dry_run:
        from runner.goldens.steps import compare_steps_commands

        print("\n".join(compare_steps_commands(args.profile, _one_sample(args.samples))))
        return 0
    report = compare_steps(args.profile, _one_sample(args.samples), args.tolerance)
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


def _one_sample(spec: str) -> int:
    """`--samples ID` of compare-steps: one sample id."""
    from runner.accuracy.samples import parse_ids

    ids = parse_ids(spec, where="--samples")
    if len(ids) != 1:
        raise BadInput(f"`--samples {spec}` names {len(ids)} samples; compare-steps "
                       "follows one", where="--samples", fix="give one id, e.g. --samples 0")
    return ids[0]


def selection_flags(p: argparse.ArgumentParser) -> None:
    """Test selection shared with `bench goldens`: markers, keywords, module directory."""
    shared(p, "--marker", "-m", metavar="EXPR",
           help="pytest-style marker expression over each test's `markers` and `type`, e.g. "
           "\"hip and gfx942\" or \"cpu and not compstat\" (default: every test)")
    shared(p, "-k", dest="keyword", metavar="PATTERN",
           help="pytest-style keyword expression over test names (substrings, and/or/not), "
           "e.g. \"clip and not benchmark\" (default: every test)")
    shared(p, "--module-dir", action="append", metavar="DIR",
           help="where torch-layout module names (sdxl/modules/clip_cpu) are looked up first, "
           "as IREE CI's --module-directory (default: the test file's directory and its "
           "parents)")


def golden_target_flags(p: argparse.ArgumentParser, sku_default: str = f"$SKU, else {DEFAULT_SKU}",
                        chip_default: str = f"$ROCM_CHIP, else {DEFAULT_CHIP}") -> None:
    """Which machine the goldens are for (shared with `bench goldens`, whose SKU and chip
    default to its profile's), and how they run."""
    shared(p, "--sku", help="picks the golden_* entries and tuner files; leaves out tests "
           f"marked for another SKU (default: {sku_default})")
    shared(p, "--rocm-chip", metavar="CHIP",
           help="ROCm chip to compile for; leaves out tests marked for another chip "
           f"(default: {chip_default})")
    shared(p, "--device", help="runtime device instead of the test file's, e.g. local-sync "
           "(default: the file's)")
    shared(p, "--offline", action="store_true", default=None,
           help="use only cached downloads (also RUNNER_OFFLINE=1)")
    shared(p, "--strict", action="store_true",
           help="a test that compares nothing (no expected outputs, a compstat test without "
           "goldens) or has fields IREE CI's runner does not read fails instead of warning")


def _paths_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", metavar="FILES|DIR",
                   help="test JSON files or directories, or a shipped suite by name: "
                   f"{', '.join(shipped_suites())} (default: {DEFAULT_SUITE.name})")


def benchmark_paths_arg(p: argparse.ArgumentParser) -> None:
    """The benchmark test files `bench goldens` checks and `goldens propose` proposes for."""
    p.add_argument("paths", nargs="*", metavar="FILES|DIR",
                   help="benchmark JSONs or directories, or a shipped suite by name (default: "
                   "tiny-bench)")


def _model(p: argparse.ArgumentParser) -> None:
    shared(p, "--model", help="with a directory: its <model>/ subdirectory, e.g. sdxl "
           "(default: every model)")


def _selection(p: argparse.ArgumentParser) -> None:
    _paths_arg(p)
    _model(p)
    shared(p, "--submodel", default="*", help="submodel name or glob (default: *)")
    shared(p, "--backend", metavar="cpu|rocm",
           help="only this backend: cpu or rocm (hip is the same backend; default: $BACKEND, "
           "else every backend)")
    golden_target_flags(p)
    selection_flags(p)
    shared(p, "--tuner-dir", metavar="DIR", help="where relative tuner_file names are found "
           "(default: beside the test file)")
    shared(p, "--tuning-spec", metavar="PATH",
           help="add --iree-codegen-tuning-spec-path=PATH to every compile (default: none)")


# each subcommand's help examples (runner.cli.grammar.document adds exit codes)
GOLDENS_EXAMPLES = {
    "check": ("runner goldens check tiny tiny-torch --out reports/goldens",
              "runner goldens check iree-test-suites/torch_models --marker "
              "gfx942 --dry-run",
              "BACKEND=cpu runner goldens check tiny-torch -k clip --timeout 600 "
              "--strict"),
    "generate": ("runner goldens generate tiny-torch --to next --out new-goldens",
                 "runner goldens generate tiny-torch --to next --out new-goldens "
                 "--dry-run"),
    "bump": ("runner goldens bump tiny-torch --to next --out bumped",
             "runner goldens bump tiny-torch --to next --dry-run"),
    "upload": ("runner goldens upload runs/goldens-v2 --container-url "
               "https://<account>.blob.core.windows.net/sharkpublic/<path> --dry-run",
               "runner goldens upload runs/goldens-v2 --container-url "
               "https://<account>.blob.core.windows.net/sharkpublic/<path>"),
    "compare-steps": ("runner goldens compare-steps --profile tiny --samples 0",),
}
GOLDENS_EXITS = {
    "check": Exits(verdict="a golden test is over its tolerance", incomplete=DISK_FULL),
    "generate": Exits(incomplete=DISK_FULL),
    "bump": Exits(incomplete=DISK_FULL),
    "upload": Exits(),
    "compare-steps": Exits(verdict="a stage is over its tolerance", incomplete=DISK_FULL),
}


def register(subparsers) -> argparse.ArgumentParser:
    goldens = subparsers.add_parser("goldens", help="IREE CI golden tests: check, regenerate, "
                                    "bump, upload; per-step compare")
    sub = goldens.add_subparsers(dest="goldens_command", required=True)

    p = sub.add_parser("check", help="compile, run and compare like IREE CI's quality and "
                       "compstat tests")
    _selection(p)
    add_out(p, "write junit.xml, summary.md, results.json here",
            Rerun(RESUMES, "nothing: the tests run again, the reports are written at the end"),
            required=False,
            default="none: the console and, under GitHub Actions, the job summary")
    add_dry_run(p, "the iree-compile and iree-run-module commands")
    add_results(p)
    p.add_argument("--compile-only", action="store_true", help="compile, do not run")
    p.add_argument("--timeout", type=SECONDS, metavar="S",
                   help="seconds per test; a test past it is an error and its iree-compile "
                   "and run processes are killed (default: no limit)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("generate", help="run the tests and write v{n+1} outputs to --out")
    _selection(p)
    add_golden_version(p)
    add_out(p, "directory for the new blobs + manifest.json",
            Rerun(RESUMES, "each test whose new outputs were written is not run again",
                  ("manifest.json",)))
    add_dry_run(p, "each test's commands and the blobs it would write")
    p.set_defaults(func=cmd_goldens_generate)

    p = sub.add_parser("bump", help="rename expected outputs to the new version in the JSONs "
                       "(every other byte kept)")
    _paths_arg(p)
    _model(p)
    add_golden_version(p)
    # Only the bumped test files go there, to be copied into a suite: no attempt record
    # beside them (a rerun writes them again, nothing else is there to keep).
    shared(p, "--out", metavar="DIR", help="write the bumped files here, nothing else (default: "
           "in place)")
    add_dry_run(p, "each rename; write nothing")
    p.set_defaults(func=cmd_bump)

    p = sub.add_parser("upload", help="upload generated goldens to Azure")
    p.add_argument("dir", metavar="DIR", help="the --out directory of `goldens generate`")
    p.add_argument("--container-url", required=True, metavar="URL",
                   help="https://<account>.blob.core.windows.net/<container>[/<path>]")
    p.add_argument("--overwrite", action="store_true", help="replace existing blobs")
    add_dry_run(p, "each blob it would upload and where")
    renamed(p, "--execute", "no flag", "upload uploads; --dry-run prints the plan", nargs=0)
    p.set_defaults(func=cmd_upload)

    p = sub.add_parser("compare-steps", help="per-stage IREE vs PyTorch error, each stage "
                       "fed IREE's own inputs")
    add_profile(p, default="tiny", with_set=False)
    shared(p, "--samples", metavar="ID", default="0",
           help="the sample (MLPerf caption row) to follow (default: 0)")
    renamed(p, "--prompt-id", "--samples ID")
    p.add_argument("--tolerance", type=SCALE, default=None,
                   help="max_abs allowed per stage (default: per-stage defaults)")
    add_json(p, "the comparison instead of the table")
    add_out(p, "also write compare_steps.json and .md here",
            Rerun(RESUMES, "nothing: the stages are compared again"), required=False)
    add_dry_run(p, "the compile commands")
    p.set_defaults(func=cmd_compare_steps)
    for name, parser in sub.choices.items():
        document(parser, *GOLDENS_EXAMPLES[name], exits=GOLDENS_EXITS[name])
    # `runner goldens` alone prints its help: each command's help has that command's exits
    document(goldens, *(examples[0] for examples in GOLDENS_EXAMPLES.values()), exits=Exits())
    return goldens

"""The `runner` command: a thin argparse layer over the library.

Exit codes are one table for every command (runner.base.errors.EXIT_CODES), printed in each
command's help; every subcommand's help carries examples (runner.clihelp.document), and the
root help groups the commands by workflow (runner.clihelp.COMMAND_GROUPS).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import json
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.accuracy.cli import register as register_accuracy
from runner.base.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INCOMPLETE,
    EXIT_OK,
    RunnerError,
    is_disk_full,
)
from runner.base.outdir import REFUSES, RESUMES, Rerun
from runner.base.signals import interruptible, work_done
from runner.batch.status import register as register_status
from runner.bench.cli import register as register_bench
from runner.bisect.cli import register as register_bisect
from runner.clihelp import (
    DEFAULT_PROFILE,
    CommandGroupsFormatter,
    add_base_image,
    add_batch_sizes,
    add_captions,
    add_dry_run,
    add_executor,
    add_golden_version,
    add_image,
    add_iree,
    add_json,
    add_layout,
    add_metrics,
    add_no_score,
    add_out,
    add_profile,
    add_require_full,
    add_results,
    add_samples,
    add_slurm,
    describe,
    document,
    layout_overrides,
    main_description,
    main_epilog,
    profile_from_args,
    subparsers_of,
    walk,
)
from runner.docker.cli import register as register_image
from runner.docker.image import DEFAULT_BASE_IMAGE
from runner.goldens.cli import register as register_goldens
from runner.gpucheck.cli import register as register_gpu_check
from runner.history.cli import register as register_history
from runner.inputs.iree_build import IMAGE_KINDS
from runner.inputs.paths import resolved
from runner.loadgen.cli import register as register_mlperf
from runner.model.export.cli import register as register_export
from runner.report.cli import register as register_report

if TYPE_CHECKING:
    from runner.base.procs import ProcessGuard

TOOLS_FLAG = "--iree-tools"
# A carry holds what any number of compiles gathered (two VAE precisions, more batch
# sizes): each adds its modules, whatever its profile.
CARRY_RERUN = Rerun(RESUMES, "every module and export file already there: only the missing "
                    "ones are copied", free=("--profile", "--set", "--batch-sizes"))
RUN_RERUN = Rerun(REFUSES, "every finished sample: only the missing ones are generated; "
                  "a complete run does nothing unless --rescore", ("run.json",))


def cmd_plan(args: argparse.Namespace) -> int:
    from runner.batch.run import plan_for

    plan = plan_for(profile_from_args(args))
    if args.json:
        print_json(plan.to_dict())
        return 0
    print(plan.table())
    for note in plan.notes:
        print(f"note: {note}")
    print(f"{len(plan.workers)} workers")
    return 0


def _sample_ids(args: argparse.Namespace, captions: Path | None,
                default_count: int | None = None) -> list[int]:
    """The samples of --count N, --samples SPEC or --ids FILE (runner.clihelp.add_samples)."""
    from runner.accuracy.samples import chosen_ids

    return chosen_ids(args.count, args.samples, args.ids, captions,
                      default_count or args.default_count)


def cmd_run(args: argparse.Namespace) -> int:
    """A thin layer over runner/lifecycle.py: a new run, or a resume of one."""
    from runner.batch.cluster import slurm_options
    from runner.lifecycle import Lifecycle, dry_run_lines, executor_for
    from runner.rundir.directory import RunDir

    # A full disk (DiskFull) is an IncompleteRun: main() prints it and exits 3, and what
    # was written is kept for --resume.
    captions = Path(args.captions) if args.captions else None
    # --resume of a run with its run.json goes on from it; one killed before its manifest
    # (while compiling) was given its recorded command line again (runner/cliout.py).
    own = bool(args.resume) and RunDir(args.resume).exists()
    if own and args.dry_run:
        raise RunnerError("--dry-run prints a new run's commands", where="--dry-run",
                          fix=f"drop --dry-run (`runner status {args.resume}` shows where the "
                          "run stands)")
    if own:
        lc = Lifecycle.open(args.resume)
    else:
        args.profile = args.profile or DEFAULT_PROFILE
        profile = profile_from_args(args)
        ids = _sample_ids(args, captions, profile.count)
        executor = executor_for(args.executor or "local", profile, image=args.image,
                                captions=captions, slurm=slurm_options(args))
        if args.dry_run:
            print("\n".join(dry_run_lines(Path(args.out), profile, ids, executor)))
            return EXIT_OK
        lc = Lifecycle.create(Path(args.out), profile, ids, args.argv, executor,
                              captions=captions, score=args.score)
    with lc:
        if own:
            code = _resume(args, lc)
            if code is not None:
                return code
        return _run_to_end(args, lc)


def _resume(args: argparse.Namespace, lc) -> int | None:
    """Checks a resume against the run and prepares it; an exit code when there is nothing
    to run (a complete run: nothing, or a re-score when --rescore asks for one)."""
    from runner.batch.cluster import slurm_options
    from runner.lifecycle import executor_for

    m = lc.manifest
    requested = None
    if args.profile or args.set or args.metrics or layout_overrides(args):
        args.profile = args.profile or m.profile_path
        requested = profile_from_args(args)
    ids = (_sample_ids(args, Path(m.captions))
           if args.ids or args.samples or args.count is not None else None)
    lc.check_request(requested, ids)
    # A complete run whose samples fail their sha256 (moved aside) is resumed like any other.
    if m.complete and lc.store.verified_ids(m.sample_ids) >= set(m.sample_ids):
        if not args.rescore:
            print(f"run {lc.run.path} is already complete ({len(m.sample_ids)} samples); "
                  "nothing to do (`--rescore` scores it again)", file=sys.stderr)
            return 0
        done = lc.rescore(require_full=args.require_full)
        return _print_completed(lc, done)
    name = args.executor or m.executor
    executor = executor_for(name, lc.profile, image=args.image or m.image_ref,
                            captions=Path(m.captions),
                            slurm=slurm_options(args, m.slurm_options or None))
    lc.resume(executor)
    if not args.score:
        lc.manifest.score = False
    return None


def _run_to_end(args: argparse.Namespace, lc) -> int:
    from runner.rundir.store import failures_error

    outcome = lc.execute()
    run_dir = lc.run.path
    if outcome.failed:  # no resume of the same model makes them: the fix is elsewhere
        lc.report()
        raise failures_error(outcome.failed, outcome.requested, str(run_dir),
                             "no dataset is written and the run is not scored")
    if not outcome.complete:
        lc.report()
        print(f"run incomplete: {outcome.done}/{outcome.requested} samples in {run_dir}; "
              f"finish it with `runner run --resume {run_dir}`", file=sys.stderr)
        return EXIT_INCOMPLETE
    print(f"{outcome.done} samples in {outcome.seconds:.1f}s "
          f"({outcome.done / max(outcome.seconds, 1e-9):.2f} samples/s); "
          f"{len(outcome.deaths)} worker death(s)")
    return _print_completed(lc, lc.complete(require_full=args.require_full))


def _print_completed(lc, done) -> int:
    """The dataset, the verdict (exit code 1 when it fails) and the reports."""
    result = done.aggregate
    print(f"dataset: {result.log} ({result.samples} records, {result.mb_per_s:.0f} MB/s)")
    if done.score is not None:
        print("\n".join(done.score.verdict.lines()))
    print(f"reports: {', '.join(str(p) for p in done.reports)}")
    print(f"run dir: {lc.run.path}")
    return done.exit_code


def cmd_aggregate(args: argparse.Namespace) -> int:
    from runner.lifecycle import Lifecycle

    if args.dry_run:
        from runner.batch.aggregate import aggregate_plan

        print("\n".join(aggregate_plan(Path(args.run_dir), args.allow_incomplete)))
        return EXIT_OK

    with Lifecycle.open(args.run_dir) as lc:
        result = lc.aggregate(allow_incomplete=args.allow_incomplete)
    print(f"{result.samples} samples -> {result.log} ({result.log_bytes / 1e6:.1f} MB, "
          f"{result.mb_per_s:.0f} MB/s); review images: {len(result.review)}")
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    from runner.model.compiled_model import compile_model

    profile = profile_from_args(args)
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


def cmd_validate(args: argparse.Namespace) -> int:
    from runner.validate import ValidateRequest, validate

    args.profile = args.profile or DEFAULT_PROFILE
    profile = profile_from_args(args)
    request = ValidateRequest(
        iree=args.iree, profile=profile, sample_ids=_sample_ids(args, None, profile.count),
        out=Path(args.out), argv=args.argv, goldens=Path(args.goldens) if args.goldens else None,
        to=args.to, baseline=Path(args.baseline) if args.baseline else None,
        base_image=args.base_image, dry_run=args.dry_run, require_full=args.require_full)
    return validate(request)


def cmd_fetch(args: argparse.Namespace) -> int:
    from runner.config.sources import redact_url
    from runner.model.compiled_model import fetch_artifacts

    for ref, path in fetch_artifacts(profile_from_args(args), dry_run=args.dry_run):
        print(f"{redact_url(ref)} -> {path}" if args.dry_run else path)
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from runner.model.generate import generate, generate_commands

    profile, ids = profile_from_args(args), _sample_ids(args, None)
    if args.dry_run:
        print("\n".join(generate_commands(profile, ids, Path(args.out))))
        return EXIT_OK
    result = generate(profile, ids, Path(args.out))
    print(f"{len(result.images)} images in {result.seconds:.1f}s -> {result.out}/images")
    return 0


def cmd_completion(args: argparse.Namespace) -> int:
    import shtab

    print(shtab.complete(build_parser(), shell=args.shell))
    return EXIT_OK


def version_text() -> str:
    """The runner's version, then which IREE it would use and where that comes from: a
    source build shadowed by an installed wheel shows up here first. Each IREE tool's line
    says which place it was found in and why (runner.base.iree_tools); the last lines say
    whether that IREE is inside the range of releases the runner is tested against."""
    from importlib.metadata import PackageNotFoundError, version

    from runner.base.iree_range import range_lines
    from runner.base.iree_tools import REPORTED, compiler_info, find_tool
    from runner.base.provenance import iree_provenance

    try:
        mine = version("iree-sdxl-runner")
    except PackageNotFoundError:
        mine = "(not installed)"
    lines = [f"runner {mine} ({Path(__file__).resolve().parent})"]
    provenance = iree_provenance()
    versions: dict[str, str | None] = {}
    for name in ("iree.compiler", "iree.runtime"):
        info = provenance[name]
        versions[name] = info["version"] if info["available"] else None
        lines.append(f"{name} {info['version']} @ {info['commit']} ({info['file']})"
                     if info["available"] else f"{name}: not importable ({info['error']})")
    for tool in REPORTED:
        try:
            found = find_tool(tool)
            if tool == "iree-compile":
                c = compiler_info()
                versions[tool] = c.version
                lines.append(f"{tool} {c.version} @ {c.commit}: {found.line()}")
            else:
                lines.append(f"{tool}: {found.line()}")
        except RunnerError as e:
            lines.append(f"{tool}: {str(e).splitlines()[0]}")
    return "\n".join([*lines, *range_lines(versions)])


class _Version(argparse.Action):
    """--version, computed only when asked (it imports IREE and runs iree-compile)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs):
        super().__init__(option_strings, dest=dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the runner's, the IREE compiler's and the runtime's "
                         "versions, where each is imported from and whether they are inside "
                         "the IREE releases the runner is tested against, then exit")

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


class RunnerParser(argparse.ArgumentParser):
    """argparse whose usage errors read as the runner's other errors: the one line that
    matters, where, and the fix (`see runner X --help`, or a closer one: the command or
    choice meant) instead of the whole usage; redacted as every other message is (an option
    value can be a URL carrying a token). Subcommand parsers are made of the same class
    (argparse's add_parser makes its parent's class), so each rule reaches every command:

    - no abbreviations: `--dev 0` is not `--devices 0` (`run --device 1` would silently
      mean `--devices 1`), so a flag a later release adds cannot change what an old command
      line means;
    - no empty values: `--out ''` would write into the current directory, `--samples ''`
      choose nothing; an empty value is refused naming its flag."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._typed = list(sys.argv[1:] if args is None else args)  # for error()'s fix
        return super().parse_known_args(args, namespace)

    def error(self, message: str):  # type: ignore[override]
        from runner.config.sources import redact_secrets

        if FIX not in message:
            # `--scen offline` leaves --scenario missing: the fix names the flag meant.
            meant = [f"{flag} for {typed}" for typed in getattr(self, "_typed", [])
                     if typed.startswith("--") and (flag := self._meant(typed)) is not None]
            message += FIX + (f"did you mean {', '.join(meant)}? " if meant else "") + \
                f"see `{self.prog} --help`"
        self.exit(EXIT_BAD_INPUT, f"error: {self.prog}: {redact_secrets(message)}\n")

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        if arg_string == "" and not isinstance(action, argparse._SubParsersAction):
            raise argparse.ArgumentError(action, f"an empty value{FIX}give a value: "
                                         f"{_spelled(action)} (see `{self.prog} --help`)")
        return super()._get_value(action, arg_string)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is None or value in action.choices:
            return
        names = [str(c) for c in action.choices]
        close = difflib.get_close_matches(str(value), names, n=1, cutoff=0.6)
        if isinstance(action, argparse._SubParsersAction):
            guess = f"did you mean `{self.prog} {close[0]}`? " if close else ""
            raise argparse.ArgumentError(None, f"unknown command {value!r}{FIX}{guess}"
                                         f"`{self.prog} --help` lists the commands")
        guess = f"did you mean {close[0]}? " if close else ""
        raise argparse.ArgumentError(action, f"invalid choice: {value!r}{FIX}{guess}(one of "
                                     f"{', '.join(names)})")

    def _meant(self, typed: str) -> str | None:
        """The option of this command a flag it does not take stands for: the one flag it
        abbreviates, else the closest spelling; None for a flag it takes, or none close."""
        flag = typed.partition("=")[0]
        known = [f for a in self._actions if a.help != argparse.SUPPRESS
                 for f in a.option_strings]
        if flag in known or not flag.startswith("--"):
            return None
        close = [f for f in known if f.startswith(flag)]
        if len(close) != 1:  # an abbreviation of one flag, else a misspelling of one
            close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
        return close[0] if close else None

    def unrecognized(self, extra: list[str]) -> None:
        """Refuses what no option of this command takes, naming the option meant when one
        is close (`--batch-size` where `--batch-sizes` is meant)."""
        flag = next((e for e in extra if e.startswith("-")), "")
        meant = self._meant(flag)
        fix = f"{FIX}did you mean {meant}? (see `{self.prog} --help`)" if meant else ""
        self.error(f"unrecognized arguments: {' '.join(extra)}{fix}")


FIX = "\n  fix: "  # how a usage error's fix line starts (RunnerError's layout)


def _spelled(action: argparse.Action) -> str:
    """How an option is given, for an error: `--out DIR`, `--executor local|docker|slurm`,
    a positional's `RUN_DIR`."""
    if action.metavar is None and action.choices is not None:
        value = "|".join(str(c) for c in action.choices)
    else:
        value = " ".join(action.metavar) if isinstance(action.metavar, tuple) else str(
            action.metavar or action.dest.upper())
    return f"{max(action.option_strings, key=len)} {value}" if action.option_strings else value


def _show_help(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """`runner` or `runner goldens` alone: the command list, as `--help` prints it."""
    parser.print_help()
    return EXIT_OK


def build_parser() -> RunnerParser:
    parser = RunnerParser(prog="runner", description=main_description(),
                          epilog=main_epilog(), formatter_class=CommandGroupsFormatter)
    parser.add_argument("--version", action=_Version)
    parser.add_argument(TOOLS_FLAG, metavar="DIR[:DIR...]",
                        help="take IREE's tools (iree-compile, iree-run-module, ...) from "
                        "these directories first (default: $IREE_TOOL_PATH, then PATH, then "
                        "the installed iree-base-compiler/-runtime packages); `runner "
                        "--version` shows which were found where")
    sub = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")

    register_export(sub)

    p = sub.add_parser("compile", help="compile the profile's model through the cache")
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
             "and DIR/exports/ (an exported model's files for these batch sizes)")

    p = sub.add_parser("fetch", help="download a profile's model artifacts into the cache")
    add_profile(p)
    add_dry_run(p, "each URL and the cache path it would be downloaded to")
    p.set_defaults(func=cmd_fetch)
    document(p, "runner fetch --profile sdxl", "runner fetch --profile sdxl --dry-run")

    p = sub.add_parser("plan", help="print the worker table of a profile's layout; runs nothing")
    add_profile(p)
    add_layout(p)
    add_json(p, "the plan")
    p.set_defaults(func=cmd_plan)
    document(p, "runner plan --profile mi325x", "runner plan --profile mi325x --partition spx",
             "runner plan --profile mi325x --cpd 2 --json")

    _register_run(sub)
    _register_validate(sub)

    p = sub.add_parser("aggregate", help="write a run's MLPerf accuracy log and review images")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run dir")
    p.add_argument("--allow-incomplete", action="store_true",
                   help="write the log from the samples there are")
    add_dry_run(p, "the samples it would aggregate and the files it would write")
    p.set_defaults(func=cmd_aggregate)
    document(p, "runner aggregate runs/main")

    goldens = register_goldens(sub)
    register_accuracy(sub)
    register_bench(sub)
    register_bisect(sub)
    register_report(sub)
    register_image(sub)
    register_status(sub)
    register_mlperf(sub)
    register_gpu_check(sub)
    register_history(sub, goldens)

    p = sub.add_parser("generate", help="single-process generation of the first N prompts")
    add_profile(p)
    add_samples(p, 4)
    add_out(p, "directory for manifest.json and images/",
            Rerun(RESUMES, "nothing: it is one short process, its images are made again",
                  ("manifest.json",)))
    add_dry_run(p, "the compile commands")
    p.set_defaults(func=cmd_generate)
    document(p, "runner generate --profile tiny --count 4 --out runs/gen",
             "runner generate --profile tiny --count 4 --out runs/gen --dry-run")

    p = sub.add_parser("completion", help="print a shell completion script (shtab)")
    p.add_argument("shell", choices=["bash", "zsh", "tcsh"], help="the shell to complete for")
    p.set_defaults(func=cmd_completion)
    document(p, "source <(runner completion bash)",
             "runner completion zsh > ~/.zfunc/_runner   # with fpath+=~/.zfunc")
    describe(parser)
    for group in [parser, *(c for _, c in walk(parser))]:
        for action in subparsers_of(group):
            # A command of commands given alone (`runner`, `runner goldens`) shows its
            # help, as `--help` does, rather than an error naming an internal dest.
            action.required = False
            if group.get_default("func") is None:
                group.set_defaults(func=functools.partial(_show_help, group))
    for _, command in walk(parser):  # which command a parse ended in (the deepest one)
        command.set_defaults(prog=command.prog)
        assert isinstance(command, RunnerParser)  # add_parser makes its parent's class
        _PARSERS[command.prog] = command
    return parser


def _register_run(sub) -> None:
    """`runner run`: the per-device batch run, the command most users start with; its
    flags are the layout's, the samples', the executor's and the out dir's."""
    p = sub.add_parser("run", help="per-device batch run: workers, resume, aggregated dataset")
    add_profile(p, default=None, none_means=f"{DEFAULT_PROFILE}; on --resume, as recorded")
    add_layout(p)
    add_samples(p, note="; on --resume, as recorded: other samples are an error",
                from_profile=True)
    add_require_full(p)
    add_metrics(p)
    add_captions(p)
    add_executor(p, None, "; on --resume, as recorded")
    add_image(p)
    add_slurm(p)
    add_out(p, "the run directory to create", RUN_RERUN, own_resume=True)
    p.add_argument("--rescore", action="store_true",
                   help="with --resume of a complete run: score it again, rewrite reports")
    add_no_score(p, "; the run stops after aggregation")
    add_results(p)
    add_dry_run(p, "the compile commands, the worker plan and each worker's (or the sbatch) "
                "command")
    p.set_defaults(func=cmd_run)
    document(p, "runner run --profile cpu --count 32 --out runs/main",
             "runner run --profile cpu --count 4 --out runs/smoke   # a subset: not judged, "
             "exit 0",
             "runner run --profile cpu --count 4 --out runs/smoke --dry-run",
             "runner run --resume runs/main",
             "runner run --profile mi325x --executor slurm --nodes 4 --slurm-partition mi325x "
             "--out /shared/runs/acc",
             out="the run directory: run.json, samples/, the MLPerf log, scores, reports")


def _register_validate(sub) -> None:
    """`runner validate`: an IREE build judged end to end, from its image to new goldens."""
    p = sub.add_parser("validate", help="an IREE build end to end: image, compile, accuracy "
                       "run, score, then goldens v{n+1}; resumable")
    add_iree(p, required=True, kinds=IMAGE_KINDS,
             note=" (commit: is bisect's and trend's; build a commit with source:)")
    add_profile(p)
    add_layout(p)
    add_samples(p, from_profile=True)
    add_require_full(p)
    add_metrics(p)
    p.add_argument("--goldens", metavar="SUITE",
                   help="IREE CI test-suite dir to regenerate on PASS (default: none)")
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
             "--goldens goldens/tiny --to v2.0 --out runs/validate",
             "runner validate --iree source:<sha> --profile mi325x --dry-run --out runs/v",
             out="the validate directory: validate.json, validate.md, run/ (with its "
             "reports), goldens/")


_PARSERS: dict[str, RunnerParser] = {}  # prog -> its parser, for usage errors


def _use_tool_dirs(argv: list[str] | None) -> None:
    """`--iree-tools` takes effect before the rest is parsed, so `--version` (printed while
    parsing) and every command resolve the same tools."""
    from runner.base.iree_tools import use_tool_dirs

    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument(TOOLS_FLAG)
    known, _ = pre.parse_known_args(sys.argv[1:] if argv is None else argv)
    if known.iree_tools:  # (an empty one is refused with the rest of the command line)
        use_tool_dirs(known.iree_tools)


def main(argv: list[str] | None = None) -> int:
    """The CLI. SIGINT, SIGTERM and SIGHUP end a command alike (runner.base.signals): the
    processes it started are stopped and waited for (runner.base.procs), its attempt is
    recorded as interrupted, and it exits with 128 + the signal's number."""
    from types import SimpleNamespace

    from runner.base.procs import ProcessGuard, become_subreaper
    from runner.base.signals import exit_code, raised_as_interrupted, signal_name
    from runner.cliout import how_to_go_on

    real = argv is None  # this process is the command (not a test calling it in-process)
    guard: ProcessGuard | None = None
    seen = SimpleNamespace(args=None)
    with raised_as_interrupted(restore=not real):
        try:
            guard = ProcessGuard()  # (it reads /proc a while: a signal may come meanwhile)
            if real:
                become_subreaper()
            code = _main(argv, guard, seen, real)
            if real:  # (a signal before this line still ends it as interrupted, said so)
                work_done()
            return code
        except KeyboardInterrupt as e:
            _stop_started(guard)
            try:
                print(f"\ninterrupted ({signal_name(e)}): {how_to_go_on(seen.args)}",
                      file=sys.stderr, flush=True)
            except OSError:  # its reader is gone too (`| tee`, which Ctrl-C also ends)
                _to_devnull(sys.stdout, sys.stderr)
            return exit_code(e)
        except BrokenPipeError:
            # The reader left (`runner plan | head`): stop quietly, and keep Python from
            # complaining at exit while it flushes a stdout nobody reads.
            _stop_started(guard)
            _to_devnull(sys.stdout)
            return EXIT_OK


def _to_devnull(*streams: Any) -> None:
    """Streams whose reader is gone write to /dev/null from here on: what they still hold
    is dropped at exit instead of failing there with a traceback."""
    for stream in streams:
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


def _main(argv: list[str] | None, guard, seen, real: bool = False) -> int:
    """Parses and runs the command; `seen.args` is what ran, for main()'s message. Once
    the command's work is done, a real command (`real`: this process is it) ignores
    signals while it records the outcome and exits (runner.base.signals.work_done)."""
    from runner import cliout

    try:
        _use_tool_dirs(argv)
    except RunnerError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    parser = build_parser()
    typed = list(sys.argv[1:] if argv is None else argv)
    cliout.lenient_if_resuming(parser, typed)
    args, extra = parser.parse_known_args(typed)
    if extra:  # said by the command they were given to, as its own errors are
        command = _PARSERS.get(getattr(args, "prog", ""), parser)
        command.unrecognized(extra)
    seen.args = args
    args.argv = cliout.without_results(typed)  # recorded for reproduce.sh
    try:
        try:
            args = seen.args = cliout.start(parser, args)
            attempt = args.attempt
            if attempt is not None and attempt.nothing_to_do and not args.out_spec.own_resume:
                print(f"{attempt.path}: this `runner {attempt.command}` finished; nothing to "
                      "resume (pass another --out for a new one)", file=sys.stderr)
                attempt.release()
                return EXIT_OK
            code = args.func(args)
            if real:  # the work is done: it is recorded as such, whatever arrives now
                work_done()
        except BaseException as e:  # (not kept past here: a traceback holds the frames)
            _stop_started(guard)
            cliout.finish(args, None, e)
            raise
        _stop_started(guard)
        cliout.finish(args, code, None)
        if code in (EXIT_OK, EXIT_FAILED):
            with interruptible() if real else contextlib.nullcontext():
                _record(args)
    except RunnerError as e:
        _error(str(e), args.command)
        return e.exit_code
    except OSError as e:
        # The last net under every command: a read-only or full disk, a vanished file.
        # Library code names its files itself; this keeps a traceback from the user.
        if isinstance(e, BrokenPipeError):
            raise
        where = f" ({e.filename})" if e.filename else ""
        fix = ("free space, then run the command again (a run: `runner run --resume DIR`)"
               if is_disk_full(e) else "check the path, that it exists and that you may "
               "read and write there")
        _error(f"{e.strerror or e}{where}\n  fix: {fix}", args.command)
        return EXIT_INCOMPLETE if is_disk_full(e) else EXIT_BAD_INPUT
    sys.stdout.flush()
    return code


def _record(args: argparse.Namespace) -> None:
    """A finished command's results into the results store (runner/history/record.py):
    the one place every recording command (`run`, `bench`, ...) reaches it; a dry run, and
    a --resume that found nothing left to do, record nothing."""
    from runner.history.record import record

    if getattr(args, "dry_run", False) or not hasattr(args, "results"):
        return
    attempt = args.attempt
    if attempt is not None and attempt.nothing_to_do:
        return
    command = attempt.command if attempt is not None else str(args.prog).removeprefix(
        "runner ")
    record(command, attempt.path if attempt is not None else None, args.results)


def _stop_started(guard: ProcessGuard | None) -> None:
    """Every process this command started is gone before it exits (a worker still tearing
    its GPU context down after its driver's exit status is seen would be a leak). No guard
    yet: the command was stopped before it could start any."""
    if guard is not None:
        guard.stop(say=lambda line: print(f"runner: {line}", file=sys.stderr, flush=True))


def _error(message: str, command: str) -> None:
    """The one place a command's error reaches the user (and CI annotations): redacted, so
    no token in a URL, path or tool output a message quotes is ever printed."""
    from runner.config.sources import redact_secrets
    from runner.report.ci import annotate

    message = redact_secrets(message)
    print(f"error: {message}", file=sys.stderr)
    annotate("error", message, title=f"runner {command}")


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True))

"""The `runner` command: a thin argparse layer over the library. Each package's cli.py
registers its commands (`register(subparsers)`); this module builds the parser from them
and runs the command a command line names.

Exit codes: runner.base.errors.EXIT_CODES, all of them; each command declares those it can
return where it registers (runner.cli.grammar.Exits), and its help lists those. Every
subcommand's help carries examples (runner.cli.grammar.document), and the root help groups
the commands by workflow (runner.cli.grammar.COMMAND_GROUPS).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import os
import sys
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
from runner.base.paths import PACKAGE_DIR, caches_read_only
from runner.base.signals import interruptible, work_done
from runner.batch.cli import register as register_batch
from runner.bench.cli import register as register_bench
from runner.bisect.cli import register as register_bisect
from runner.cli.context import CommandContext
from runner.cli.grammar import (
    CommandGroupsFormatter,
    Exits,
    describe,
    document,
    main_description,
    main_epilog,
    subparsers_of,
    walk,
)
from runner.cli.validate import register as register_validate
from runner.docker.cli import register as register_image
from runner.goldens.cli import register as register_goldens
from runner.gpucheck.cli import register as register_gpu_check
from runner.history.cli import register as register_history
from runner.loadgen.cli import register as register_mlperf
from runner.model.cli import register as register_model
from runner.model.export.cli import register as register_export
from runner.nightly.cli import register as register_nightly
from runner.report.cli import register as register_report

if TYPE_CHECKING:
    from runner.base.procs import ProcessGuard

TOOLS_FLAG = "--iree-tools"


def cmd_completion(ctx: CommandContext) -> int:
    import shtab

    args = ctx.args
    print(shtab.complete(build_parser(), shell=args.shell))
    return EXIT_OK


def register_completion(subparsers) -> None:
    """`runner completion`: the CLI's own command (it completes the whole parser)."""
    p = subparsers.add_parser("completion", help="print a shell completion script (shtab)")
    p.add_argument("shell", choices=["bash", "zsh", "tcsh"], help="the shell to complete for")
    p.set_defaults(func=cmd_completion)
    document(p, "source <(runner completion bash)",
             "runner completion zsh > ~/.zfunc/_runner   # with fpath+=~/.zfunc",
             exits=Exits())


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
    lines = [f"runner {mine} ({PACKAGE_DIR})"]
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


def _show_help(parser: argparse.ArgumentParser, ctx: CommandContext) -> int:
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
    register_model(sub)
    register_batch(sub)
    register_validate(sub)
    goldens = register_goldens(sub)
    register_accuracy(sub)
    register_bench(sub)
    register_bisect(sub)
    register_report(sub)
    register_image(sub)
    register_mlperf(sub)
    register_gpu_check(sub)
    register_history(sub, goldens)
    register_nightly(sub)
    register_completion(sub)
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
    from runner.base.procs import ProcessGuard, become_subreaper
    from runner.base.signals import exit_code, raised_as_interrupted, signal_name
    from runner.cli.output import how_to_go_on, start_command

    real = argv is None  # this process is the command (not a test calling it in-process)
    guard: ProcessGuard | None = None
    ctx: CommandContext | None = None  # the command, once parsed: an interruption's way on
    with raised_as_interrupted(restore=not real):
        try:
            guard = ProcessGuard()  # (it reads /proc a while: a signal may come meanwhile)
            if real:
                become_subreaper()
            parsed = _parse(argv)
            if isinstance(parsed, int):
                return parsed
            parser, ctx = parsed
            try:
                ctx = start_command(parser, ctx)
            except (RunnerError, OSError) as e:
                return _reported(e, ctx.args.command)
            code = _run(ctx, guard, real)
            if real:  # (a signal before this line still ends it as interrupted, said so)
                work_done()
            return code
        except KeyboardInterrupt as e:
            _stop_started(guard)
            try:
                print(f"\ninterrupted ({signal_name(e)}): {how_to_go_on(ctx)}",
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


def _parse(argv: list[str] | None) -> tuple[RunnerParser, CommandContext] | int:
    """The parser and the command `argv` names (None: this process's command line), or the
    exit code of an --iree-tools that cannot be used; a usage error exits (argparse)."""
    from runner.cli.output import lenient_if_resuming, without_results

    try:
        _use_tool_dirs(argv)
    except RunnerError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    parser = build_parser()
    typed = list(sys.argv[1:] if argv is None else argv)
    lenient_if_resuming(parser, typed)
    args, extra = parser.parse_known_args(typed)
    ctx = CommandContext.parsed(args, without_results(typed))  # recorded for reproduce.sh
    if extra:  # said by the command they were given to, as its own errors are
        _PARSERS.get(ctx.prog, parser).unrecognized(extra)
    return parser, ctx


def _run(ctx: CommandContext, guard: ProcessGuard, real: bool) -> int:
    """Runs the command, records how its attempt ended and, when it finished, its results.
    Once the command's work is done, a real command (`real`: this process is it) ignores
    signals while it records the outcome and exits (runner.base.signals.work_done)."""
    from runner.cli.output import finish

    try:
        try:
            attempt = ctx.attempt
            if attempt is not None and attempt.nothing_to_do and ctx.out_spec is not None \
                    and not ctx.out_spec.own_resume:
                print(f"{attempt.path}: this `runner {attempt.command}` finished; nothing to "
                      "resume (pass another --out for a new one)", file=sys.stderr)
                attempt.release()
                return EXIT_OK
            with caches_read_only() if ctx.dry_run else contextlib.nullcontext():
                code = ctx.handler(ctx)
            if real:  # the work is done: it is recorded as such, whatever arrives now
                work_done()
        except BaseException as e:  # (not kept past here: a traceback holds the frames)
            _stop_started(guard)
            finish(ctx, None, e)
            raise
        _stop_started(guard)
        finish(ctx, code, None)
        if code in (EXIT_OK, EXIT_FAILED):
            with interruptible() if real else contextlib.nullcontext():
                _record(ctx)
    except (RunnerError, OSError) as e:
        return _reported(e, ctx.args.command)
    sys.stdout.flush()
    return code


def _reported(e: RunnerError | OSError, command: str) -> int:
    """A command's error, said to the user: its exit code."""
    if isinstance(e, RunnerError):
        _error(str(e), command)
        return e.exit_code
    # The last net under every command: a read-only or full disk, a vanished file.
    # Library code names its files itself; this keeps a traceback from the user.
    if isinstance(e, BrokenPipeError):
        raise e
    where = f" ({e.filename})" if e.filename else ""
    fix = ("free space, then run the command again (a run: `runner run --resume DIR`)"
           if is_disk_full(e) else "check the path, that it exists and that you may "
           "read and write there")
    _error(f"{e.strerror or e}{where}\n  fix: {fix}", command)
    return EXIT_INCOMPLETE if is_disk_full(e) else EXIT_BAD_INPUT


def _record(ctx: CommandContext) -> None:
    """A finished command's results into the results store (runner/history/record.py):
    the one place every recording command (`run`, `bench`, ...) reaches it; a dry run, and
    a --resume that found nothing left to do, record nothing."""
    from runner.history.record import record

    if ctx.dry_run or not ctx.records:
        return
    attempt = ctx.attempt
    if attempt is not None and attempt.nothing_to_do:
        return
    command = attempt.command if attempt is not None else ctx.command
    record(command, attempt.path if attempt is not None else None, ctx.results)


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


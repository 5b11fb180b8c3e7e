"""The CLI's side of every command's `--out` and `--resume`: one place for all commands.

Before a command that writes an out dir runs, `start()` turns `--resume DIR` into the
recorded command line (flags given beside it must agree with it), checks the out dir
against the command's rule and records the attempt (runner/base/outdir.py); `finish()`
records how the attempt ended, `how_to_go_on()` how to finish an interrupted one. A
command that keeps parts of an interrupted attempt reads `ctx.attempt` (an `OutDir`):
`resumed`, `done(key)`, `mark(key, value)`.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from runner.base import outdir
from runner.base.errors import BadInput, RunnerError
from runner.base.signals import Interrupted
from runner.base.steps import StepStatus
from runner.cli.context import CommandContext
from runner.cli.grammar import NOT_INPUTS, OutSpec, walk


def command_of(root: argparse.ArgumentParser, spec: OutSpec
               ) -> tuple[str, argparse.ArgumentParser]:
    """The command's name as typed (`bench goldens`) and its parser, by its --out rule."""
    for path, sub in walk(root):
        if sub.get_default("out_spec") is spec:
            return " ".join(path), sub
    raise AssertionError("an out_spec default without its parser")


def _actions(root: argparse.ArgumentParser, parser: argparse.ArgumentParser
             ) -> list[argparse.Action]:
    """The inputs of the command, read off its parser: its options and positionals (and
    the root's, e.g. --iree-tools), less what only chooses a subcommand or shows help, and
    the grammar's options that say where the work goes and how it is shown (NOT_INPUTS).
    What a parse adds besides its actions (`func`, `out_spec`, a subcommand's dest) is
    never an action of the command, so never an input."""
    return [a for a in [*root._actions, *parser._actions]
            if a.dest != argparse.SUPPRESS and getattr(a, "grammar", None) not in NOT_INPUTS
            and not isinstance(a, argparse._SubParsersAction | argparse._HelpAction)]


def _flag(action: argparse.Action) -> str:
    """How a user spells an input: `--count`, `--no-score`, a positional's metavar."""
    if action.option_strings:
        return max(action.option_strings, key=len)
    return str(action.metavar or action.dest).upper()


def inputs_of(root: argparse.ArgumentParser, parser: argparse.ArgumentParser,
              args: argparse.Namespace, only_given: bool = False) -> dict[str, Any]:
    """The command's inputs by flag, defaults included (so a difference names both values);
    a switch as true or false. `only_given`: those that differ from their defaults. Where
    results go and how they are shown are not inputs."""
    out = {}
    for action in _actions(root, parser):
        value = getattr(args, action.dest, action.default)
        if only_given and (value == action.default or (action.nargs != 0 and value in (None, []))):
            continue
        out[_flag(action)] = (value != action.default) if action.nargs == 0 else value
    return out


def _resumed(root: argparse.ArgumentParser, ctx: CommandContext, spec: OutSpec, name: str,
             parser: argparse.ArgumentParser) -> tuple[CommandContext, bool]:
    """`--resume DIR`: the attempt's own command line, parsed again where it ran; a flag
    given beside --resume that says otherwise is refused, naming it. Also whether the
    command goes on from its own record instead (a run's run.json)."""
    args = ctx.args
    where = Path(os.path.abspath(Path(args.resume).expanduser()))
    record = outdir.read_record(where)
    if spec.own_resume and any((where / m).is_file() for m in spec.rerun.markers):
        return ctx, True
    if record is None:
        raise BadInput(f"no attempt of `runner {name}` to resume here (no "
                       f"{outdir.RECORD})", where=str(where),
                       fix=f"start one with `runner {name} ... --out {where}`")
    if record["command"] != name:
        raise BadInput(f"the directory holds an attempt of `runner {record['command']}`, "
                       f"not of `runner {name}`", where=str(where / outdir.RECORD),
                       fix=f"`runner {record['command']} --resume {where}`")
    argv, cwd = [str(a) for a in record.get("argv", [])], str(record.get("cwd", ""))
    if cwd and os.path.realpath(cwd) != os.path.realpath(os.getcwd()):
        if not Path(cwd).is_dir():
            raise BadInput(f"the attempt ran in {cwd}, which is gone: its relative paths "
                           "cannot be found again", where=str(where / outdir.RECORD),
                           fix="pass another --out and start over")
        print(f"note: resuming in {cwd}, where the attempt ran", file=sys.stderr)
        os.chdir(cwd)
    recorded = root.parse_args(argv)
    then = inputs_of(root, parser, recorded)
    differ = [f"{flag}: {then.get(flag)!r} in the attempt, {value!r} now"
              for flag, value in inputs_of(root, parser, args, only_given=True).items()
              if then.get(flag) != value]
    if differ:
        raise BadInput("--resume goes on with the attempt's own inputs; these differ:\n    "
                       + "\n    ".join(differ), where=str(where / outdir.RECORD),
                       fix="drop those flags (or pass another --out for a new attempt)")
    # How this invocation shows things and where its results are recorded, not inputs: as
    # given now (--out and --resume are the attempt's own directory, below).
    for action in parser._actions:
        if getattr(action, "grammar", None) in NOT_INPUTS - {"--out", "--resume"}:
            setattr(recorded, action.dest, getattr(args, action.dest))
    recorded.resume = str(where)
    return ctx.with_args(recorded, argv), False


def without_results(argv: list[str]) -> list[str]:
    """The command line as recorded (attempt.json, run.json, reproduce.sh): without
    `--results URL`, which says where results are recorded, not what the work is, and whose
    URL may carry a password."""
    return outdir.without_option(argv, "--results")


def lenient_if_resuming(root: argparse.ArgumentParser, argv: list[str]) -> None:
    """With `--resume DIR` no option is required: the attempt's record holds them all."""
    if not any(a == "--resume" or a.startswith("--resume=") for a in argv):
        return
    for parser in [root, *(sub for _, sub in walk(root))]:
        for action in parser._actions:
            if not isinstance(action, argparse._SubParsersAction):
                action.required = False


def start_command(root: argparse.ArgumentParser, ctx: CommandContext) -> CommandContext:
    """Claims the command's out dir (a no-op for a command without one, or when its --out
    is optional and not given). Returns the command to run (`--resume DIR`: with the
    recorded flags and command line), its `attempt` the claim, or None."""
    spec = ctx.out_spec
    if spec is None:
        return ctx
    name, parser = command_of(root, spec)
    args = ctx.args
    if args.resume and args.out and Path(args.out).resolve() != Path(args.resume).resolve():
        raise BadInput("--out and --resume name two directories", where="--resume",
                       fix="--resume DIR alone goes on in DIR")
    own = False
    if args.resume:
        ctx, own = _resumed(root, ctx, spec, name, parser)
        args = ctx.args
    path = args.resume or args.out
    if path is None:
        if spec.required:
            raise BadInput("where should the results go?", where=f"runner {name}",
                           fix="pass --out DIR (a new attempt) or --resume DIR (finish an "
                           "interrupted one)")
        return ctx
    # A command going on from its own record checks the request against it itself.
    inputs = {k: v for k, v in inputs_of(root, parser, args).items()
              if k not in spec.rerun.free}
    attempt = outdir.claim(Path(path), name, None if own else inputs, list(ctx.argv),
                           spec.rerun, resume=bool(args.resume), dry_run=ctx.dry_run)
    return replace(ctx, attempt=attempt)


def _note_environment(attempt: outdir.OutDir) -> None:
    """The driver, firmware and kernel a result the history keeps was measured with, asked
    at its attempt's end (runner.history.environment); a dry run measured nothing, and an
    interrupted or failed attempt is not kept (nor kept waiting on a GPU tool)."""
    from runner.history.environment import capture_environment
    from runner.history.extract import RECORDED

    if attempt.command in RECORDED and not attempt.dry_run:
        runner = (attempt.record.get("attempts") or [{}])[-1].get("runner")
        attempt.note(environment=capture_environment(runner).to_dict())


def finish(ctx: CommandContext, code: int | None, error: BaseException | None) -> None:
    """Records how the attempt ended (`code`, or the error that ended it)."""
    attempt = ctx.attempt
    if attempt is None:
        return
    if error is None:  # ended with its verdict: what the history records
        _note_environment(attempt)
    if isinstance(error, Interrupted | KeyboardInterrupt):
        name = error.name if isinstance(error, Interrupted) else "SIGINT"
        attempt.end(StepStatus.INTERRUPTED, signal=name)
    elif isinstance(error, RunnerError):
        attempt.end_with(error.exit_code, str(error))
    elif error is not None:
        attempt.end(StepStatus.FAILED, error=f"{type(error).__name__}: {error}")
    else:
        attempt.end_with(code if code is not None else 0)


def how_to_go_on(ctx: CommandContext | None) -> str:
    """The interrupted command's way on, for the message the CLI prints (None: it was
    interrupted before it was parsed)."""
    attempt = ctx.attempt if ctx is not None else None
    spec = ctx.out_spec if ctx is not None else None
    if attempt is None or spec is None or attempt.dry_run:
        return "finished work is kept"
    resume = f"`runner {attempt.command} --resume {attempt.path}`"
    if spec.rerun.rule == outdir.RESUMES:
        return (f"finished work is kept; the same command again (or {resume}) finishes "
                f"it ({spec.rerun.keeps})")
    return f"finished work is kept; {resume} finishes it ({spec.rerun.keeps})"

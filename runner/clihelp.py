"""What every `runner` subcommand's help must carry, and the option spellings they share.

Each subcommand module (runner/cli.py, runner/*/cli.py, and any later `register()`) calls
`document(parser, examples...)`, which puts the examples and the one exit-code table in the
help epilog; `help_problems(parser)` is the rule the tests hold every subcommand to, so a
new subcommand without examples, exit codes or option help fails the suite rather than a
user. Kept apart from runner/cli.py so sub-CLIs can import it without a cycle.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from typing import Any

from runner.errors import EXIT_CODES

DEFAULT_PROFILE = "cpu"  # every command that makes something from a profile starts here
EXAMPLES, EXITS = "examples:", "exit codes:"


def exit_code_table(indent: str = "  ") -> str:
    return "\n".join(f"{indent}{code}  {text}" for code, text in EXIT_CODES)


def document(parser: argparse.ArgumentParser, *examples: str, out: str | None = None
             ) -> argparse.ArgumentParser:
    """Examples, what --out means here (when the command has one) and the exit codes,
    appended to the parser's help; the description and epilog keep their line breaks."""
    parts = [EXAMPLES, *(f"  {e}" for e in examples)]
    if out:
        parts += ["", f"--out: {out}"]
    parts += ["", EXITS, exit_code_table()]
    parser.epilog = "\n".join(parts)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def subparsers_of(parser: argparse.ArgumentParser) -> Iterator[argparse._SubParsersAction]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield action


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
         ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(command path, parser) for every subcommand at any depth, the root excluded."""
    for action in subparsers_of(parser):
        for name, sub in action.choices.items():
            yield (*path, name), sub
            yield from walk(sub, (*path, name))


def help_problems(parser: argparse.ArgumentParser) -> list[str]:
    """Every way a subcommand's help falls short of the rule; [] when all comply."""
    problems = []
    for path, sub in walk(parser):
        name = "runner " + " ".join(path)
        epilog = sub.epilog or ""
        if EXAMPLES not in epilog or f"  runner {path[0]}" not in epilog:
            problems.append(f"{name}: no example in its help (runner.clihelp.document)")
        if EXITS not in epilog:
            problems.append(f"{name}: no exit codes in its help (runner.clihelp.document)")
        for action in sub._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if action.help is None and action.option_strings:
                problems.append(f"{name}: {action.option_strings[0]} has no help text")
            if action.help and "default: None" in action.help:
                problems.append(f"{name}: {action.option_strings[0]} says 'default: None'")
    return problems


class Renamed(argparse.Action):
    """An old spelling: refused with the new one named, instead of 'unrecognized'."""

    def __init__(self, option_strings: Sequence[str], dest: str, new: str = "",
                 note: str = "", **kwargs: Any):
        kwargs.setdefault("nargs", "?")
        super().__init__(option_strings, dest=argparse.SUPPRESS, help=argparse.SUPPRESS,
                         **kwargs)
        self.new, self.note = new, note

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        parser.error(f"{option_string} is no longer accepted: use {self.new}"
                     + (f" ({self.note})" if self.note else ""))


def renamed(parser: argparse.ArgumentParser, old: str, new: str, note: str = "",
            nargs: str | int | None = "?") -> None:
    parser.add_argument(old, action=Renamed, new=new, note=note, nargs=nargs)


def profile_overrides(items: Sequence[str] | None) -> dict[str, Any]:
    """`--set a.b=v` items as dotted profile overrides (values parsed as YAML)."""
    import yaml

    from runner.errors import RunnerError

    out: dict[str, Any] = {}
    for item in items or []:
        key, eq, value = item.partition("=")
        if not eq:
            raise RunnerError(f"`--set {item}` is not KEY=VALUE", where="--set",
                              fix="e.g. --set target.chip=gfx950")
        out[key] = yaml.safe_load(value)
    return out


def add_profile(p: argparse.ArgumentParser, default: str | None = DEFAULT_PROFILE,
                none_means: str = "the one the run recorded") -> None:
    """--profile/--set. `default=None` is for commands that read a run (they use the profile
    it recorded) or that must tell "not given" apart; `none_means` says what happens then."""
    p.add_argument("--profile", default=default,
                   help="profile name in configs/ or a YAML path "
                   f"(default: {default or none_means})")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override any profile field, e.g. --set target.chip=gfx950")


def add_samples(p: argparse.ArgumentParser, default_count: int = 32, note: str = "") -> None:
    """The one way samples are chosen: --count N, --samples SPEC or --ids FILE. --count's
    default is left None so a resume can tell "not given" apart; `args.default_count` holds
    the number to use then."""
    what = p.add_mutually_exclusive_group()
    what.add_argument("--count", type=int, default=None,
                      help=f"samples 0..N-1 (default: {default_count}{note})")
    what.add_argument("--samples", metavar="SPEC",
                      help="sample ids (MLPerf qsl_idx) as ranges, e.g. 0-31 or 0,5,10-19")
    what.add_argument("--ids", metavar="FILE", help="file of sample ids, whitespace-separated")
    p.set_defaults(default_count=default_count)
    renamed(p, "--prompts", "--count N")
    renamed(p, "--prompt-id", "--samples ID")


def add_metrics(p: argparse.ArgumentParser) -> None:
    """`--metrics`: score FID, CLIP or both (the profile's `accuracy.metrics`, default both)."""
    p.add_argument("--metrics", metavar="fid|clip|fid,clip",
                   help="which MLPerf metrics to score and judge (default: the profile's "
                   "accuracy.metrics, both unless it says otherwise); only their weights are "
                   "needed, and the verdict and reports name the one left out")


def metrics_override(args: argparse.Namespace) -> dict[str, Any]:
    """`--metrics` as the profile override it stands for (`accuracy.metrics`)."""
    from runner.profile import parse_metrics

    value = getattr(args, "metrics", None)
    return {"accuracy.metrics": list(parse_metrics(value, "--metrics"))} if value else {}


def add_require_full(p: argparse.ArgumentParser) -> None:
    p.add_argument("--require-full", action="store_true",
                   help="fail (exit 1) when fewer samples are scored than the profile's "
                   "ranges were set for; by default such a subset is scored and labelled "
                   "'not judged', exit 0")
    renamed(p, "--allow-subset", "no flag", "a subset is scored and labelled by default; "
            "--require-full refuses one", nargs=0)

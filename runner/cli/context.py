"""What every command's handler is handed: one typed `CommandContext`.

argparse parses the flags into a Namespace; what the CLI knows beyond them (the command
line as it is recorded, the command's name, its --out rule, the claim on its out dir) is
kept here, typed, instead of set on the Namespace beside the flags, where a handler could
not tell a flag from the CLI's bookkeeping and a typo read as a missing flag.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runner.base.outdir import OutDir
    from runner.cli.grammar import OutSpec

# What the parser sets beside the flags, on the parser of the command that ran: its handler
# (`func`), its name as typed (`prog`, set by runner.cli.main.build_parser) and its --out
# rule (`out_spec`, set by runner.cli.grammar.add_out). Taken off the Namespace into the
# context, so `args` holds the flags alone.
PARSER_DEFAULTS = ("func", "prog", "out_spec")


@dataclass(frozen=True)
class CommandContext:
    """One command as the CLI runs it. Frozen: the CLI makes a new one where the command
    changes (`--resume DIR` swaps in the attempt's own flags and command line; claiming the
    out dir adds `attempt`); `args`, argparse's, a handler may still fill in (a default
    profile)."""

    args: argparse.Namespace  # the command's flags (on --resume, the attempt's own)
    argv: list[str]  # the command line as recorded (reproduce.sh): no --results URL
    prog: str  # the command's name as typed: `runner goldens check`
    handler: Callable[[CommandContext], int]
    out_spec: OutSpec | None = None  # its --out/--resume rule; None: it writes no out dir
    attempt: OutDir | None = None  # the claim on its out dir, once claimed; None without

    @classmethod
    def parsed(cls, args: argparse.Namespace, argv: list[str]) -> CommandContext:
        """The context of a fresh parse; `argv` is the command line to record."""
        func, prog, out_spec = take_parser_defaults(args)
        return cls(args, list(argv), prog, func, out_spec)

    def with_args(self, args: argparse.Namespace, argv: list[str]) -> CommandContext:
        """The same command with another parse of it (`--resume DIR`: the attempt's)."""
        take_parser_defaults(args)
        return replace(self, args=args, argv=list(argv))

    @property
    def command(self) -> str:
        """The command's name without `runner `: `goldens check`."""
        return self.prog.removeprefix("runner ")

    @property
    def dry_run(self) -> bool:
        return bool(getattr(self.args, "dry_run", False))

    @property
    def records(self) -> bool:
        """Whether the command takes --results (runner.cli.grammar.add_results)."""
        return hasattr(self.args, "results")

    @property
    def results(self) -> str | None:
        """--results URL: the results store (None: the default store)."""
        return getattr(self.args, "results", None)


def take_parser_defaults(args: argparse.Namespace
                         ) -> tuple[Callable[[CommandContext], int], str, OutSpec | None]:
    """PARSER_DEFAULTS taken off a parse: (handler, prog, out_spec)."""
    found = vars(args)
    return found.pop("func"), found.pop("prog", "runner"), found.pop("out_spec", None)

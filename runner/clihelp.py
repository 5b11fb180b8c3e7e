"""What every `runner` subcommand's help must carry, and the option spellings they share.

Each subcommand module (runner/cli.py, runner/*/cli.py, and any later `register()`) calls
`document(parser, examples...)`, which puts the examples and the one exit-code table in the
help epilog; `help_problems(parser)` is the rule the tests hold every subcommand to, so a
new subcommand without examples, exit codes or option help fails the suite rather than a
user. Kept apart from runner/cli.py so sub-CLIs can import it without a cycle.
"""

from __future__ import annotations

import argparse
import textwrap
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from runner.base.errors import EXIT_CODES
from runner.base.outdir import Rerun
from runner.inputs.cliargs import COUNT

DEFAULT_PROFILE = "cpu"  # every command that makes something from a profile starts here
EXAMPLES, EXITS = "examples:", "exit codes:"

# `runner --help`, for someone who has not read the code: what the tool does, the three
# workflows people come for (each as real commands), then every command under the workflow it
# serves, as `git --help` groups git's.
ABOUT = """\
runner compiles Stable Diffusion XL with IREE, runs it in MLPerf-style batches across a
machine's devices (device IDs, SPX/CPX partitions, processes per device, batch size), scores
the images as MLPerf does (FID, CLIP), runs and regenerates IREE CI's golden tests,
benchmarks, and records every run so it can be reproduced. With no GPU it runs the embedded
tiny-sdxl model on CPU (profiles `tiny` and `cpu`); real SDXL is the same code with a lab
profile (mi300x, mi325x, mi355x)."""

VALIDATE, LAB, MLPERF, MODELS, TOOLS = (
    "validate an IREE build before a golden update",
    "a lab accuracy or benchmark run",
    "an MLPerf submission",
    "models and compiled modules",
    "calibration and tools",
)

# The workflows `runner --help` opens with: 2-4 commands each, as a user types them.
WORKFLOWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (VALIDATE, (
        "runner validate --iree wheels:3.13.0 --profile cpu --count 32 --goldens goldens/tiny "
        "--to v2.0 --out runs/validate",
        "runner validate --iree source:<sha> --profile mi325x --dry-run --out runs/v",
        "runner goldens upload runs/validate/goldens --container-url "
        "https://<account>.blob.core.windows.net/sharkpublic/...",
    )),
    (LAB, (
        "runner plan --profile mi325x",
        "runner run --profile mi325x --out runs/acc",
        "runner bench --profile mi325x --batch-size 1,2,4 --cpd 1,2 --out runs/bench",
    )),
    (MLPERF, (
        "runner mlperf --profile mi325x --scenario singlestream,offline,server "
        "--mode submission --out runs/lg-sub --dry-run",
        "runner mlperf --profile mi325x --scenario singlestream,offline,server "
        "--mode submission --out runs/lg-sub",
    )),
)

# Which heading each subcommand is listed under in `runner --help`, in this order. A new
# subcommand is one line here; tests/test_cli.py fails while a registered one has none.
COMMAND_GROUPS: dict[str, str] = {
    "validate": VALIDATE,
    "bisect": VALIDATE,
    "goldens": VALIDATE,
    "image": VALIDATE,
    "plan": LAB,
    "run": LAB,
    "status": LAB,
    "aggregate": LAB,
    "score": LAB,
    "trend": LAB,
    "compare": LAB,
    "report": LAB,
    "bench": LAB,
    "mlperf": MLPERF,
    "export": MODELS,
    "fetch": MODELS,
    "compile": MODELS,
    "generate": MODELS,
    "calibrate": TOOLS,
    "oracle": TOOLS,
    "completion": TOOLS,
}
OTHER = "other commands"  # a command missing from COMMAND_GROUPS still shows, here


def workflows_text() -> str:
    lines = ["workflows:"]
    for title, commands in WORKFLOWS:
        lines += [f"  {title}:", *(f"    {c}" for c in commands)]
    return "\n".join(lines)


def main_description() -> str:
    return f"{ABOUT}\n\n{workflows_text()}"


def main_epilog() -> str:
    return f"""\
options shared by every command that takes them:
  --profile NAME|YAML  profile (default: {DEFAULT_PROFILE} for commands that make something;
                       commands that read a run default to the profile it recorded)
  --set KEY=VALUE      override any profile field
  --count N | --samples SPEC | --ids FILE
                       which samples (MLPerf qsl_idx): 0..N-1, ranges like 0-31, or a file
  --out DIR            where results go (each command's help says what it writes there)
  --dry-run            print the exact commands, run nothing
  --json               machine-readable output on stdout
  --require-full       fail when fewer samples are scored than the ranges were set for
  --iree-tools DIR     (before the command) IREE tools from DIR first; see `runner --version`

`runner COMMAND --help` shows a command's options, examples and what its --out holds.

{EXITS}
{exit_code_table()}
"""


def command_summaries(subparsers: argparse._SubParsersAction) -> dict[str, str]:
    """Each subcommand's one-line help, in registration order."""
    return {a.dest: a.help or "" for a in subparsers._choices_actions}


def grouped_commands(subparsers: argparse._SubParsersAction
                     ) -> list[tuple[str, list[tuple[str, str]]]]:
    """(heading, [(command, its help)]) in COMMAND_GROUPS' order; registered commands only."""
    summaries = command_summaries(subparsers)
    groups: dict[str, list[tuple[str, str]]] = {
        h: [] for h in [*dict.fromkeys(COMMAND_GROUPS.values()), OTHER]}
    for name, heading in COMMAND_GROUPS.items():
        if name in summaries:
            groups[heading].append((name, summaries[name]))
    for name, text in summaries.items():
        if name not in COMMAND_GROUPS:
            groups[OTHER].append((name, text))
    return [(h, cmds) for h, cmds in groups.items() if cmds]


class CommandGroupsFormatter(argparse.RawDescriptionHelpFormatter):
    """The root help's command list under workflow headings (COMMAND_GROUPS) instead of
    argparse's flat `{a,b,c}` list; everything else as RawDescriptionHelpFormatter."""

    def _format_action(self, action: argparse.Action) -> str:
        if not isinstance(action, argparse._SubParsersAction):
            return super()._format_action(action)
        groups = grouped_commands(action)
        name_width = max(len(n) for _, cmds in groups for n, _ in cmds) + 2
        width = max(self._width - 4 - name_width, 30)
        lines = []
        for heading, commands in groups:
            lines.append(f"  {heading}")
            for name, text in commands:
                wrapped = textwrap.wrap(text, width, break_on_hyphens=False) or [""]
                lines.append(f"    {name:<{name_width}}{wrapped[0]}")
                lines += [" " * (4 + name_width) + more for more in wrapped[1:]]
        return "\n".join(lines) + "\n"


def exit_code_table(indent: str = "  ") -> str:
    return "\n".join(f"{indent}{code}  {text}" for code, text in EXIT_CODES)


@dataclass(frozen=True)
class Documented:
    """What document() added to a subcommand's help, kept apart for the CLI reference."""

    examples: tuple[str, ...]
    out: str | None


_DOCUMENTED: weakref.WeakKeyDictionary[argparse.ArgumentParser, Documented] = (
    weakref.WeakKeyDictionary())


def documented(parser: argparse.ArgumentParser) -> Documented:
    return _DOCUMENTED.get(parser, Documented((), None))


def document(parser: argparse.ArgumentParser, *examples: str, out: str | None = None
             ) -> argparse.ArgumentParser:
    """Examples, what --out means here (when the command has one) and the exit codes,
    appended to the parser's help; the description and epilog keep their line breaks."""
    _DOCUMENTED[parser] = Documented(tuple(examples), out)
    parts = [EXAMPLES, *(f"  {e}" for e in examples)]
    if out:
        parts += ["", f"--out: {out}"]
    spec = parser.get_default("out_spec")
    if isinstance(spec, OutSpec):
        parts += textwrap.wrap(f"rerun: {spec.rerun.text()}", 88, break_on_hyphens=False)
    parts += ["", EXITS, exit_code_table()]
    parser.epilog = "\n".join(parts)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


@dataclass(frozen=True)
class OutSpec:
    """A command's --out and --resume (runner/base/outdir.py has the rule; runner/cliout.py
    applies it before the command runs)."""

    rerun: Rerun
    required: bool = True  # the command needs --out DIR (or --resume DIR)
    own_resume: bool = False  # the command goes on from its own record (a run's run.json)


def add_out(parser: argparse.ArgumentParser, help: str, rerun: Rerun, *,
            required: bool = True, positional: bool = False, own_resume: bool = False,
            metavar: str = "DIR") -> None:
    """`--out DIR` (or a positional OUT) and `--resume DIR`, one meaning in every command:
    "DIR holds an interrupted attempt of this command: finish it"."""
    if positional:
        parser.add_argument("out", metavar="OUT", nargs="?", help=help)
    else:
        parser.add_argument("--out", metavar=metavar, help=help)
    parser.add_argument("--resume", metavar="DIR",
                        help="DIR holds an interrupted attempt of this command: finish it, "
                        f"with the inputs it recorded ({rerun.keeps})")
    parser.set_defaults(out_spec=OutSpec(rerun, required, own_resume))


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
    """`--set a.b=v` items as dotted profile overrides (values parsed as YAML, bounded as a
    profile's are: runner.inputs.yamlfile)."""
    from runner.base.errors import RunnerError
    from runner.inputs.yamlfile import parse_yaml

    out: dict[str, Any] = {}
    for item in items or []:
        key, eq, value = item.partition("=")
        if not eq:
            raise RunnerError(f"`--set {item}` is not KEY=VALUE", where="--set",
                              fix="e.g. --set target.chip=gfx950")
        out[key] = parse_yaml(value, f"--set {key}", what="value")
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
    what.add_argument("--count", type=COUNT, default=None,
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
    from runner.config.profile import parse_metrics

    value = getattr(args, "metrics", None)
    return {"accuracy.metrics": list(parse_metrics(value, "--metrics"))} if value else {}


def add_require_full(p: argparse.ArgumentParser) -> None:
    p.add_argument("--require-full", action="store_true",
                   help="fail (exit 1) when fewer samples are scored than the profile's "
                   "ranges were set for; by default such a subset is scored and labelled "
                   "'not judged', exit 0")
    renamed(p, "--allow-subset", "no flag", "a subset is scored and labelled by default; "
            "--require-full refuses one", nargs=0)

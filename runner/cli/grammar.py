"""What every `runner` subcommand's help must carry, and the option grammar they share.

Each command's `register(subparsers)` (each package's cli.py, runner/cli/validate.py) calls
`document(parser, examples...)`, which puts the examples and the one exit-code table in the
help epilog; `help_problems(parser)` is the rule the tests hold every subcommand to, so a
new subcommand without examples, exit codes, option help or a stated default fails the
suite rather than a user. An option more than one command takes is defined once here
(GRAMMAR, `shared()` and the add_* groups), and `grammar_problems(parser)` is its rule.
Kept apart from runner/cli/main.py, which imports every package's cli.py, so those can
import it without a cycle; the package's __init__ imports nothing, for the same reason.
"""

from __future__ import annotations

import argparse
import json
import re
import textwrap
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.base.errors import (
    EXIT_BAD_INPUT,
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    BadInput,
)
from runner.base.outdir import Rerun
from runner.batch.executor_for import EXECUTORS
from runner.history.paired import DEFAULT_MAX_ROUNDS, DEFAULT_ROUNDS
from runner.inputs.cliargs import COUNT, COUNT_OR_ZERO

DEFAULT_PROFILE = "cpu"  # every command that makes something from a profile starts here
EXAMPLES_HEADING, EXITS = "examples:", "exit codes:"

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

VALIDATE, LAB, MLPERF_COMMANDS, MODELS, TOOL_COMMANDS = (
    "validate an IREE build before a golden update",
    "a lab accuracy or benchmark run",
    "an MLPerf submission",
    "models and compiled modules",
    "calibration and tools",
)

# The workflows `runner --help` opens with: 2-4 commands each, as a user types them.
WORKFLOWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (VALIDATE, (
        "runner validate --iree wheels:3.13.0 --profile cpu --count 32 --goldens tiny "
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
    (MLPERF_COMMANDS, (
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
    "gpu-check": LAB,
    "history": LAB,
    "nightly": LAB,
    "mlperf": MLPERF_COMMANDS,
    "export": MODELS,
    "fetch": MODELS,
    "compile": MODELS,
    "generate": MODELS,
    "calibrate": TOOL_COMMANDS,
    "oracle": TOOL_COMMANDS,
    "completion": TOOL_COMMANDS,
}
OTHER_COMMANDS = "other commands"  # a command missing from COMMAND_GROUPS still shows, here


def workflows_text() -> str:
    lines = ["workflows:"]
    for title, commands in WORKFLOWS:
        lines += [f"  {title}:", *(f"    {c}" for c in commands)]
    return "\n".join(lines)


def main_description() -> str:
    return f"{ABOUT}\n\n{workflows_text()}"


def main_epilog() -> str:
    return f"""\
options shared by the commands that take them (one spelling, one meaning everywhere):
  --profile NAME|YAML  profile (default: {DEFAULT_PROFILE} for commands that make something;
                       commands that read a run default to the profile it recorded)
  --set KEY=VALUE      override a profile field the command reads (another is refused)
  --devices, --cpd, --batch-size, --vae-batch-size, --partition
                       the layout (CPD: pipeline processes per device ID)
  --count N | --samples SPEC | --ids FILE
                       which samples (MLPerf qsl_idx): 0..N-1, ranges like 0-31, or a file
                       (default everywhere: the profile's `count`, 5000 or 32)
  --iree BUILD         an IREE build: wheels:VERSION, source:SHA, build-dir:DIR (bisect
                       and trend also take commit:SHA, PkgCI's packages of a commit)
  --executor local|docker|slurm
                       where workers run; Slurm's options are --nodes, --slurm-partition,
                       --slurm-time, --account, --node-executor, --cpus-per-node, ...
  --out DIR            where results go (each command's help says what it writes there)
  --dry-run            check the inputs, print the exact commands, run and write nothing
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
        h: [] for h in [*dict.fromkeys(COMMAND_GROUPS.values()), OTHER_COMMANDS]}
    for name, heading in COMMAND_GROUPS.items():
        if name in summaries:
            groups[heading].append((name, summaries[name]))
    for name, text in summaries.items():
        if name not in COMMAND_GROUPS:
            groups[OTHER_COMMANDS].append((name, text))
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


def exit_code_table(indent: str = "  ", rows: Sequence[tuple[int, str]] = EXIT_CODES) -> str:
    return "\n".join(f"{indent}{code}  {text}" for code, text in rows)


SAMPLES_MISSING = "run incomplete: samples are missing; the run dir can be resumed"
DISK_FULL = "the disk filled up: free space, then run it again"
ACCURACY_FAILED = "accuracy is out of its ranges, or a subset with --require-full"


@dataclass(frozen=True)
class Exits:
    """The exit codes one command can return, declared where it is registered, so its help
    lists those and no other: a CI step reading `runner history --help` should not look for
    a "samples are missing" that command never says. Every command can be given bad input
    (2) and be interrupted (130); the rest is the command's own."""

    verdict: str | None = None  # what exit 1 means here; None: the command judges nothing
    incomplete: str | None = None  # what exit 3 means here (SAMPLES_MISSING, DISK_FULL)
    scores: bool = False  # 0 also means a subset or an unscored run (not judged)

    def rows(self) -> tuple[tuple[int, str], ...]:
        said = dict(EXIT_CODES)
        ok = (said[EXIT_OK] if self.scores else "done (also a dry run)" if self.verdict is None
              else "passed (also a dry run)")
        rows = [(EXIT_OK, ok),
                *([(EXIT_FAILED, self.verdict)] if self.verdict else []),
                (EXIT_BAD_INPUT, said[EXIT_BAD_INPUT]),
                *([(EXIT_INCOMPLETE, self.incomplete)] if self.incomplete else []),
                (EXIT_INTERRUPTED, said[EXIT_INTERRUPTED])]
        return tuple(rows)

    def codes(self) -> tuple[int, ...]:
        return tuple(code for code, _ in self.rows())


@dataclass(frozen=True)
class Documented:
    """What document() added to a subcommand's help, kept apart for the CLI reference."""

    examples: tuple[str, ...]
    out: str | None
    exits: Exits = Exits()


_DOCUMENTED: weakref.WeakKeyDictionary[argparse.ArgumentParser, Documented] = (
    weakref.WeakKeyDictionary())


def documented(parser: argparse.ArgumentParser) -> Documented:
    return _DOCUMENTED.get(parser, Documented((), None))


def document(parser: argparse.ArgumentParser, *examples: str, exits: Exits,
             out: str | None = None) -> argparse.ArgumentParser:
    """Examples, what --out means here (when the command has one) and the exit codes it can
    return (`exits`), appended to the parser's help; the description and epilog keep their
    line breaks."""
    _DOCUMENTED[parser] = Documented(tuple(examples), out, exits)
    parts = [EXAMPLES_HEADING, *(f"  {e}" for e in examples)]
    if out:
        parts += ["", f"--out: {out}"]
    spec = parser.get_default("out_spec")
    if isinstance(spec, OutSpec):
        parts += textwrap.wrap(f"rerun: {spec.rerun.text()}", 88, break_on_hyphens=False)
    parts += ["", EXITS, exit_code_table(rows=exits.rows())]
    parser.epilog = "\n".join(parts)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


@dataclass(frozen=True)
class OutSpec:
    """A command's --out and --resume (runner/base/outdir.py has the rule; runner/cli/output.py
    applies it before the command runs)."""

    rerun: Rerun
    required: bool = True  # the command needs --out DIR (or --resume DIR)
    own_resume: bool = False  # the command goes on from its own record (a run's run.json)


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


def describe(parser: argparse.ArgumentParser) -> None:
    """Every subcommand's `--help` opens with what it does: its own description, else the
    line the command list shows for it, as a sentence."""
    for action in subparsers_of(parser):
        for choice in action._choices_actions:
            sub = action.choices[choice.dest]
            if not sub.description and choice.help:
                text = choice.help.strip()
                sub.description = text[:1].upper() + text[1:] + ("" if text.endswith(".")
                                                                 else ".")
            describe(sub)


def listed_exits(epilog: str) -> tuple[int, ...]:
    """The exit codes a help's exit-code block lists, in its order."""
    block = epilog.partition(EXITS)[2]
    return tuple(int(m) for m in re.findall(r"^  (\d+)  ", block, re.M))


def help_problems(parser: argparse.ArgumentParser) -> list[str]:
    """Every way a subcommand's help falls short of the rule; [] when all comply."""
    problems = []
    for path, sub in walk(parser):
        name = "runner " + " ".join(path)
        epilog = sub.epilog or ""
        if EXAMPLES_HEADING not in epilog or f"  runner {path[0]}" not in epilog:
            problems.append(f"{name}: no example in its help (runner.cli.grammar.document)")
        if EXITS not in epilog:
            problems.append(f"{name}: no exit codes in its help (runner.cli.grammar.document)")
        elif listed_exits(epilog) != documented(sub).exits.codes():
            problems.append(f"{name}: its help lists exit codes {listed_exits(epilog)}, it "
                            f"declares {documented(sub).exits.codes()} (document's exits=)")
        if not sub.description:
            problems.append(f"{name}: no description: its help does not say what it does")
        for action in sub._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if action.help is None and action.option_strings:
                problems.append(f"{name}: {action.option_strings[0]} has no help text")
            if action.help and "default: None" in action.help:
                problems.append(f"{name}: {action.option_strings[0]} says 'default: None'")
            if _needs_default(action) and "default" not in (action.help or ""):
                problems.append(f"{name}: {action.option_strings[0]} does not say its default")
            if action.help and re.search(r"\bCPD\b", action.help) \
                    and "processes per device" not in action.help:
                problems.append(f"{name}: {action.option_strings[0]} says CPD without "
                                "'pipeline processes per device ID'")
    return problems


def options_of(parser: argparse.ArgumentParser
               ) -> Iterator[tuple[str, argparse.Action]]:
    """(`runner X Y`, action) for every live option of every subcommand (old spellings,
    which only refuse, left out)."""
    for path, sub in walk(parser):
        for action in sub._actions:
            if action.option_strings and action.help != argparse.SUPPRESS \
                    and not isinstance(action, argparse._HelpAction):
                yield "runner " + " ".join(path), action


def _signature(action: argparse.Action) -> tuple:
    kind = getattr(action.type, "__name__", action.type)
    return (action.dest, type(action).__name__, kind, tuple(action.choices or ()),
            action.nargs)


def grammar_problems(parser: argparse.ArgumentParser) -> list[str]:
    """Every way the CLI's options break "one name, one meaning"; [] when none does:
    an option two commands take that is not GRAMMAR's one definition (`shared`), one
    definition in two shapes (dest, type, choices, nargs) beyond its declared variants, one
    dest under two flags, a GRAMMAR entry no command takes, and an option of ONE_DEFAULT
    whose help or value says another default."""
    problems: list[str] = []
    uses: dict[str, list[tuple[str, argparse.Action]]] = {}
    dests: dict[str, set[str]] = {}
    for command, action in options_of(parser):
        for flag in action.option_strings:
            uses.setdefault(flag, []).append((command, action))
        dests.setdefault(action.dest, set()).add(_flag_of(action))
    for flag, taken in sorted(uses.items()):
        commands = sorted({c for c, _ in taken})
        loose = [c for c, a in taken if getattr(a, "grammar", None) not in a.option_strings]
        if len(commands) > 1 and loose:
            problems.append(f"{flag} is taken by {', '.join(commands)} but not defined once "
                            f"(not through runner.cli.grammar.shared) in {', '.join(loose)}")
        shapes: dict[tuple, set[str]] = {}
        for command, action in taken:
            key = (getattr(action, "variant", None), _signature(action))
            shapes.setdefault(key, set()).add(command)
        variants = [v for v, _ in shapes]
        if len(variants) != len(set(variants)):
            problems.append(f"{flag} has {len(shapes)} shapes: " + "; ".join(
                f"{sig} in {', '.join(sorted(c))}" for sig, c in shapes.items()))
    for dest, flags in sorted(dests.items()):
        if len(flags) > 1:
            problems.append(f"{' and '.join(sorted(flags))} both set `{dest}`: one meaning, "
                            "one flag")
    unused = sorted(set(GRAMMAR) - set(uses))
    if unused:
        problems.append(f"GRAMMAR entries no command takes: {', '.join(unused)}")
    return problems + default_problems(uses)


def default_problems(uses: dict[str, list[tuple[str, argparse.Action]]]) -> list[str]:
    """Each use of a ONE_DEFAULT option (`uses`: flag -> (command, action)) whose help does
    not say that default, or whose parsed value is not None (the command fills it in from
    the profile, so a resume can still tell "not given" apart)."""
    problems = []
    for flag, default in ONE_DEFAULT.items():
        for command, action in uses.get(flag, []):
            said = re.search(r"default: (.*)", " ".join((action.help or "").split()))
            if not said or not said.group(1).startswith(default):
                shown = said.group(1).rstrip(")") if said else "nothing"
                problems.append(f"{flag} in {command} says its default is {shown!r}; "
                                f"everywhere it is {default} (runner.cli.grammar.ONE_DEFAULT)")
            elif action.default is not None:
                problems.append(f"{flag} in {command} defaults to {action.default!r}, not "
                                f"None: {default} is filled in by the command")
    return problems


def _flag_of(action: argparse.Action) -> str:
    """An action's main spelling: its long flag."""
    return max(action.option_strings, key=len)


def grammar_table(parser: argparse.ArgumentParser) -> list[tuple[str, str, list[str]]]:
    """(flag, meaning, commands) for every GRAMMAR option, in GRAMMAR's order."""
    taken: dict[str, set[str]] = {}
    for command, action in options_of(parser):
        flag = getattr(action, "grammar", None)
        if flag is not None:
            taken.setdefault(flag, set()).add(command.removeprefix("runner "))
    return [(flag, meaning, sorted(taken.get(flag, ()))) for flag, meaning in GRAMMAR.items()]


def _needs_default(action: argparse.Action) -> bool:
    """An option that takes a value and may be left out: its help says what happens then."""
    return (bool(action.option_strings) and not action.required and action.nargs != 0
            and action.help not in (None, argparse.SUPPRESS))


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


# --- the grammar: every option two or more commands take, defined once -------------------
#
# An option that more than one command takes is added with `shared()` (through the add_*
# helpers below), which tags it with its entry here: one spelling, one meaning, the same
# type and choices wherever it appears. tests/test_cli_grammar.py walks the real parser and
# fails on an option taken by two commands without its entry, on two flags with one dest,
# and on one flag with two types; `runner.cli.doc` prints this table on the CLI reference.

PROFILE_HELP = "profile name ($RUNNER_PROFILE_PATH, then the shipped ones) or a YAML path"

GRAMMAR: dict[str, str] = {
    # what is run
    "--profile": "the profile: a name ($RUNNER_PROFILE_PATH, then the shipped ones) or a YAML path",
    "--set": "override a profile field the command reads, KEY=VALUE (repeatable; another "
             "is refused)",
    "--partition": "the GPUs' compute partition mode (spx, dpx, qpx, cpx): a system setting "
                   "the plan checks device IDs against",
    "--devices": "device IDs the workers run on: 0-63, 0,2,4, 0-3,8-11",
    "--cpd": "pipeline processes per device ID (AMD's CPD)",
    "--batch-size": "prompts per pipeline call in a worker (the layout's batch)",
    "--vae-batch-size": "images per VAE decode call",
    "--count": "samples 0..N-1 (MLPerf qsl_idx)",
    "--samples": "sample ids as ranges, e.g. 0-31 or 0,5,10-19",
    "--ids": "a file of sample ids, whitespace-separated",
    "--metrics": "which MLPerf metrics to score and judge: fid, clip or both",
    "--require-full": "a scored subset fails (exit 1) instead of 'not judged'",
    "--captions": "MLPerf's captions_source.tsv",
    "--no-score": "leave the images unscored",
    "--share-gpus": "start even where other processes hold the GPUs' memory",
    # which IREE
    "--iree": "an IREE build: wheels:VERSION, source:SHA or build-dir:DIR (commit:SHA in "
              "bisect and trend)",
    "--image": "a prebuilt harness image tag (from `runner image build`)",
    "--base-image": "the docker base image harness images are built on",
    "--find-links": "where wheels: builds find IREE's wheels: a find-links page or directory",
    "--batch-sizes": "batch sizes to compile or export for, a comma list",
    # where it runs
    "--executor": "where workers run: local processes, docker containers, or Slurm jobs",
    "--nodes": "Slurm: node tasks (one array task per node)",
    "--slurm-partition": "Slurm: sbatch --partition",
    "--slurm-time": "Slurm: sbatch --time, the time limit of each node task",
    "--account": "Slurm: sbatch --account",
    "--node-executor": "Slurm: how each node starts its workers (local or docker)",
    "--cpus-per-node": "Slurm: CPUs per node task instead of the whole node",
    "--sbatch-arg": "Slurm: an extra sbatch option (repeatable)",
    "--max-resubmits": "Slurm: replacement submissions for failed node tasks",
    # what it writes, and how
    "--out": "the directory the command writes (its help says what goes there)",
    "--resume": "DIR holds an interrupted attempt of this command: finish it",
    "--dry-run": "print the exact commands it would run, after checking its inputs; run "
                 "nothing, write nothing",
    "--json": "print the result as JSON on stdout",
    "--stage": "a pipeline stage (clip, unet_step, unet, vae), or what a history number "
               "measures",
    "--machine": "only results of this host (a name or glob)",
    "--since": "only results that finished on or after this date (2026-11-01, or 7d, 12h "
               "ago)",
    "--results": "the results store every finished result is recorded in: SQLite (default) "
                 "or a lab's PostgreSQL",
    "--metric": "a history number's name: fid, clip, samples_per_s, stage_ms, time_ms, ...",
    "--command": "the command whose recorded results are meant: run, bench, 'bench goldens', "
                 "mlperf, validate, 'goldens check'",
    "--min-change": "the smallest relative change that counts",
    "--rounds": "interleaved rounds of each build before an A/B's first judgement",
    "--max-rounds": "the most interleaved rounds of each build an A/B takes while undecided",
    "--profile-match": "recorded results of a profile this glob matches (a filter: --profile "
                       "loads a profile)",
    # goldens and benchmarks
    "--to": "the golden version to write: v7.0, v7, or next (n+1)",
    "--model": "with a suite directory: its <model>/ subdirectory",
    "--submodel": "only tests of this submodel (a name or glob)",
    "--backend": "only tests of this backend: cpu or rocm (hip is the same backend)",
    "--sku": "which golden_* entry applies, and tests marked for other SKUs left out",
    "--rocm-chip": "the ROCm chip to compile for; tests marked for other chips left out",
    "--marker": "pytest-style marker expression over each test's markers and type",
    "-k": "pytest-style keyword expression over test names",
    "--module-dir": "where torch-layout module names are looked up first",
    "--tuner-dir": "where relative tuner_file names are found",
    "--tuning-spec": "a tuning spec added to every compile",
    "--device": "the IREE runtime device instead of the test file's (e.g. local-sync)",
    "--offline": "use only cached downloads",
    "--strict": "a test or field IREE CI's runner would not use fails instead of warning",
    "--repetitions": "iree-benchmark-module --benchmark_repetitions",
    "--min-time": "iree-benchmark-module --benchmark_min_time per repetition",
    "--warmup": "iree-benchmark-module --benchmark_min_warmup_time, seconds",
    # scoring
    "--fid-weights": "the FID Inception weights file",
    "--clip-weights": "the CLIP ViT-B/32 weights file",
    "--images-per-pass": "images per Inception/CLIP forward pass",
    "--torch-device": "the torch device scoring runs on: cpu or cuda",
    "--worst": "how many of the most different samples to list",
    # bisect and trend
    "--test": "what is measured and judged per build",
    "--good": "the last build known good (the older one), in the one build grammar",
    "--bad": "the first build known bad, in the one build grammar",
    "--install": "how each build is installed: a venv per build, or a harness image",
    "--build": "build each commit from source in the harness image",
    "--pre": "list pre-releases (IREE's nightlies) too",
    "--repo": "the IREE git checkout commit:SHA builds name commits of",
}

# The options that say where a command's work goes and how it is shown, not what the work
# is: an attempt's inputs (runner/cli/output.py) leave them out, so `--resume DIR --json`
# goes on with the attempt it resumes.
NOT_INPUTS = frozenset({"--out", "--resume", "--dry-run", "--json", "--results"})

# The shapes a shared option may come in besides its plain one: a layout flag of `runner
# bench` takes a comma list and sweeps every value (`--cpd 1,2`); bench's `--iree` repeats
# and takes comma lists, the builds it compares.
SWEEP, MANY = "sweep", "many"


def shared(container: Any, flag: str, *aliases: str, variant: str | None = None,
           **kwargs: Any) -> argparse.Action:
    """`container.add_argument(flag, ...)` for an option of GRAMMAR, tagged with its entry
    (and `variant`, e.g. SWEEP) so the grammar test can tell it is the one definition."""
    if flag not in GRAMMAR:
        raise KeyError(f"{flag} is not in runner.cli.grammar.GRAMMAR: say what it means there")
    action = container.add_argument(flag, *aliases, **kwargs)
    action.grammar = flag  # type: ignore[attr-defined]
    action.variant = variant  # type: ignore[attr-defined]
    return action


def add_profile(p: argparse.ArgumentParser, default: str | None = DEFAULT_PROFILE,
                none_means: str = "the one the run recorded", with_set: bool = True) -> None:
    """--profile/--set. `default=None` is for commands that read a run (they use the profile
    it recorded) or that must tell "not given" apart; `none_means` says what happens then."""
    shared(p, "--profile", default=default, metavar="NAME|YAML",
           help=f"{PROFILE_HELP} (default: {default or none_means})")
    if with_set:
        shared(p, "--set", action="append", metavar="KEY=VALUE",
               help="override a profile field the command reads, e.g. --set "
               "target.chip=gfx950 (repeatable; a field it does not read is refused, naming "
               "those it reads; default: none)")


def add_layout(p: argparse.ArgumentParser, sweep: bool = False) -> None:
    """The layout flags; each overrides the profile's `layout.X`, and an error in its value
    names the flag. `sweep` (runner bench): --devices repeats and the numbers take comma
    lists, every combination measured."""
    from runner.inputs.cliargs import count_list

    if sweep:
        g = p.add_argument_group("layouts (comma lists sweep every combination; default: the "
                                 "profile's layout)")
    else:
        g = p.add_argument_group("layout (default: the profile's; any field also via --set "
                                 "layout.X=V)")
    variant = SWEEP if sweep else None
    shared(g, "--partition", metavar="MODE",
           help="the GPUs' compute partition mode, spx, dpx, qpx or cpx (a system setting the "
           "plan checks device IDs against; default: the profile's layout.partition)")
    if sweep:
        shared(g, "--devices", variant=variant, action="append", metavar="IDS",
               help="device IDs as in `runner run` (0-1, 0,2); repeat the flag for variants: "
               "--devices 0 --devices 0-1 (default: the profile's layout.devices)")
    else:
        shared(g, "--devices", metavar="IDS",
               help="device IDs: 0-63, 0,2,4, 0-3,8-11 (default: the profile's layout.devices)")
    many = " (comma list, e.g. 1,2)" if sweep else ""
    number: Any = count_list if sweep else COUNT
    shared(g, "--cpd", variant=variant, type=number, metavar="N",
           help=f"pipeline processes per device ID (AMD's CPD){many} (default: the profile's "
           "layout.cpd)")
    shared(g, "--batch-size", variant=variant, type=number, metavar="N",
           help=f"prompts per pipeline call in a worker{many} (default: the profile's "
           "layout.batch_size)")
    shared(g, "--vae-batch-size", variant=variant, type=number, metavar="N",
           help=f"images per VAE decode call{many} (default: the batch size, or the profile's "
           "layout.vae_batch_size when smaller)")


# What --count defaults to wherever a command takes it: the profile's `count`, the samples a
# plain `runner run` makes (runner.config.profile; tests/test_profile.py checks the list
# against the shipped profiles). One default for one flag: `runner bench`, `bisect`, `trend`,
# `mlperf`, `generate` and `oracle` make as many as `runner run` unless told otherwise.
PROFILE_COUNT = ("the profile's `count`: MLPerf's 5000 on mi300x, mi325x, mi355x, h100 and "
                 "h100-seeded, 32 on the others")


# What an option defaults to in every command that takes it, as its help says: one meaning is
# one default too, so a command whose own default would differ takes a flag of another name.
# `grammar_problems` holds every use to it (tests/test_cli_grammar.py).
ONE_DEFAULT: dict[str, str] = {
    "--count": PROFILE_COUNT,
    "--partition": "the profile's layout.partition",
    "--devices": "the profile's layout.devices",
    "--cpd": "the profile's layout.cpd",
    "--batch-size": "the profile's layout.batch_size",
    "--vae-batch-size": "the batch size, or the profile's layout.vae_batch_size",
    "--metrics": "the profile's accuracy.metrics",
    "--captions": "the copy shipped with the runner",
}


def add_samples(p: argparse.ArgumentParser, note: str = "", choose: bool = True) -> None:
    """The one way samples are chosen: --count N, --samples SPEC or --ids FILE (`choose=False`:
    --count alone, where LoadGen picks from the first N). --count defaults to the profile's
    `count` (PROFILE_COUNT) in every command; its value is left None so a resume can tell
    "not given" apart, and the command passes the profile's `count` to `sample_ids`."""
    what = p.add_mutually_exclusive_group()
    shared(what, "--count", type=COUNT, default=None, metavar="N",
           help=f"samples 0..N-1 (MLPerf qsl_idx; default: {PROFILE_COUNT}{note})")
    if choose:
        shared(what, "--samples", metavar="SPEC",
               help="sample ids (MLPerf qsl_idx) as ranges, e.g. 0-31 or 0,5,10-19 (default: "
               "--count's)")
        shared(what, "--ids", metavar="FILE",
               help="file of sample ids, whitespace-separated (default: --count's)")
    renamed(p, "--prompts", "--count N")
    renamed(p, "--prompt-id", "--samples ID")


def sample_ids(args: argparse.Namespace, captions: Path | None, profile_count: int
               ) -> list[int]:
    """The samples add_samples' flags chose: --count N, --samples SPEC or --ids FILE, else
    0..`profile_count`-1 (the profile's `count`)."""
    from runner.accuracy.samples import chosen_ids

    return chosen_ids(args.count, args.samples, args.ids, captions, profile_count)


def add_metrics(p: argparse.ArgumentParser) -> None:
    """`--metrics`: score FID, CLIP or both (the profile's `accuracy.metrics`, default both)."""
    shared(p, "--metrics", metavar="fid|clip|fid,clip",
           help="which MLPerf metrics to score and judge (default: the profile's "
           "accuracy.metrics, both unless it says otherwise); only their weights are needed, "
           "and the verdict and reports name the one left out")


def add_require_full(p: argparse.ArgumentParser) -> None:
    shared(p, "--require-full", action="store_true",
           help="fail (exit 1) when fewer samples are scored than the profile's ranges were "
           "set for; by default such a subset is scored and labelled 'not judged', exit 0")
    renamed(p, "--allow-subset", "no flag", "a subset is scored and labelled by default; "
            "--require-full refuses one", nargs=0)


def add_captions(p: argparse.ArgumentParser) -> None:
    shared(p, "--captions", metavar="TSV",
           help="MLPerf's captions_source.tsv (default: the copy shipped with the runner)")


def add_no_score(p: argparse.ArgumentParser, note: str = "") -> None:
    shared(p, "--no-score", dest="score", action="store_false",
           help=f"leave the images unscored (default: score FID/CLIP when the profile has "
           f"ranges){note}")




def add_share_gpus(p: argparse.ArgumentParser) -> None:
    """`--share-gpus`: the preflight's refusal of busy GPUs (runner/preflight/gpus.py)
    overridden, and said so in its line."""
    shared(p, "--share-gpus", action="store_true",
           help="start even where other processes hold the GPUs' memory (default: the "
           "preflight refuses, naming them; sharing is slower and may run out of memory)")


def add_executor(p: Any, default: str | None = "local", note: str = "") -> None:
    """`--executor`: where workers run, the same three everywhere."""
    shared(p, "--executor", choices=list(EXECUTORS), default=default,
           help="where workers run: local processes, docker containers of --image, or Slurm "
           f"node tasks (default: {default or 'local'}{note})")


def add_image(p: Any, note: str = "") -> None:
    shared(p, "--image", metavar="TAG",
           help="a harness image tag (from `runner image build`) the workers run in, with "
           f"--executor docker or --node-executor docker{note} (default: none)")


def add_iree(p: Any, many: bool = False, required: bool = False, note: str = "",
             kinds: tuple[str, ...] | None = None) -> None:
    """`--iree BUILD`: the build grammar of runner.inputs.iree_build (`many`: repeatable and
    comma lists, builds to compare); the help lists the `kinds` of build the command takes
    (default: every kind)."""
    from runner.inputs.iree_build import KINDS, grammar

    kwargs: dict[str, Any] = {"action": "append"} if many else {"required": required}
    shared(p, "--iree", variant=MANY if many else None, metavar="BUILD", **kwargs,
           help=f"an IREE build: {grammar(kinds or KINDS)}, e.g. wheels:3.13.0"
           + (" (comma lists and repeats compare several)" if many else "") + note)


def add_base_image(p: Any, default: str) -> None:
    """`--base-image`; `default` is runner.docker.image.DEFAULT_BASE_IMAGE (a layer above)."""
    shared(p, "--base-image", metavar="IMAGE", default=default,
           help="the docker base image harness images are built on, e.g. a ROCm dev image in "
           "the labs (default: %(default)s, made by scripts/docker_setup.sh)")


def add_find_links(p: Any) -> None:
    shared(p, "--find-links", metavar="URL|DIR",
           help="where wheels: builds find IREE's wheels: a find-links page (nightlies: "
           "https://iree.dev/pip-release-links.html with a nightly version) or, where "
           "builds install into a venv, a directory of wheels (default: the package index)")


def add_pre(p: Any) -> None:
    """`--pre`: nightlies among the wheels: builds listed (bisect, trend, history confirm,
    nightly), beside --find-links, which says where they are."""
    shared(p, "--pre", action="store_true",
           help="list pre-releases too (IREE's X.Y.ZrcYYYYMMDD nightlies)")


def add_good_bad(p: Any) -> None:
    """--good and --bad: the two builds a regression lies between (bisect, history confirm)."""
    shared(p, "--good", required=True, metavar="BUILD",
           help="the last build known good: wheels:VERSION, commit:SHA, source:SHA or "
           "build-dir:DIR (the older one)")
    shared(p, "--bad", required=True, metavar="BUILD", help="a build known bad, as --good")


def add_confirm_rounds(p: Any) -> None:
    """--rounds and --max-rounds: how long an interleaved A/B of two builds measures
    (`history confirm`, and `nightly` on a new build's first night); runner.history.paired
    judges it."""
    shared(p, "--rounds", type=COUNT, default=DEFAULT_ROUNDS, metavar="N",
           help="rounds of each build, interleaved, before the first judgement (default: "
           f"{DEFAULT_ROUNDS})")
    shared(p, "--max-rounds", type=COUNT, default=DEFAULT_MAX_ROUNDS, metavar="N",
           help="the most rounds of each build: while the bad/good estimate is past "
           "the change that counts (history confirm's --min-change; 2%% in a night) and its "
           "interval still takes in no change, 4 more rounds are "
           "measured and judged again, up to N; each judgement at the level that keeps all "
           "of them together at 99%%, so a difference needs at least 8 rounds to hold "
           f"(default: {DEFAULT_MAX_ROUNDS}; at least --rounds)")


def rounds_at_most(args: argparse.Namespace) -> int:
    """--max-rounds, refused below --rounds (the rounds before the first judgement)."""
    if args.max_rounds < args.rounds:
        raise BadInput(f"--max-rounds {args.max_rounds} is fewer than --rounds {args.rounds}",
                       where="--max-rounds", fix=f"pass --max-rounds {args.rounds} or more")
    return int(args.max_rounds)


def add_dry_run(p: Any, what: str = "the exact commands it would run") -> None:
    shared(p, "--dry-run", action="store_true",
           help=f"check the inputs, then print {what}; run nothing, write nothing")


def add_out(p: Any, what: str, rerun: Rerun, *, required: bool = True,
            default: str | None = None, own_resume: bool = False) -> None:
    """`--out DIR` (what the command writes there; `default` says where it writes without)
    and `--resume DIR`, one meaning in every command: "DIR holds an interrupted attempt of
    this command: finish it". argparse requires neither, since `--resume DIR` stands for
    `--out`: runner/cli/output.py applies `required` and the rerun rule before the command
    runs (runner/base/outdir.py)."""
    if required:
        default = "none: --out or --resume is needed"
    shared(p, "--out", metavar="DIR",
           help=f"{what} (default: {default or 'none: nothing written'})")
    shared(p, "--resume", metavar="DIR", help="DIR holds an interrupted attempt of this "
           f"command: finish it, with the inputs it recorded ({rerun.keeps}) (default: none)")
    p.set_defaults(out_spec=OutSpec(rerun, required, own_resume))


def add_json(p: Any, what: str = "the result") -> None:
    shared(p, "--json", action="store_true", help=f"print {what} as JSON on stdout")


def print_json(obj: Any) -> None:
    """What --json prints: one layout for every command."""
    print(json.dumps(obj, indent=2, sort_keys=True))


def add_results(p: Any, records: bool = True) -> None:
    """`--results URL`: the results store (runner/history/url.py). `records`: the command
    records its results there when it finishes; else it reads or writes the store itself."""
    what = ("record this command's results in the store at URL when it finishes (a store "
            "that cannot be reached fails nothing: `runner history import DIR` adds them "
            "later)" if records else "the results store at URL")
    shared(p, "--results", metavar="URL",
           help=f"{what}: sqlite:////abs/file.sqlite, a file path, or "
           "postgresql://USER:PASSWORD@HOST:PORT/DB, its password never shown (default: "
           "$RUNNER_RESULTS_URL, else $RUNNER_CACHE_DIR/history/results.sqlite)")


def add_worst(p: Any, default: int) -> None:
    shared(p, "--worst", type=COUNT_OR_ZERO, default=default, metavar="N",
           help=f"how many of the most different samples to list (default: {default})")


def add_batch_sizes(p: Any, default: str, value: list[int] | None = None) -> None:
    from runner.inputs.cliargs import count_list

    shared(p, "--batch-sizes", type=count_list, metavar="N,N", default=value,
           help=f"batch sizes, a comma list (default: {default})")


def add_golden_version(p: Any, required: bool = True, default: str | None = None) -> None:
    shared(p, "--to", required=required, default=default, metavar="VERSION",
           help="the golden version to write: v7.0, v7, or next (n+1 of each file's)"
           + (f" (default: {default})" if default else ""))


def add_slurm(p: argparse.ArgumentParser, resumable: bool = True) -> None:
    """The Slurm options (with --executor slurm), as runner.batch.cluster.SLURM_FLAGS
    names them. `--partition` is the GPUs' partition mode, so Slurm's partition is
    --slurm-partition; `--slurm-time` is Slurm's time limit (mlperf's `--min-duration` is
    LoadGen's)."""
    g = p.add_argument_group("Slurm (with --executor slurm" + (
        "; on --resume, default: as recorded)" if resumable else ")"))
    shared(g, "--nodes", type=COUNT_OR_ZERO, metavar="N",
           help="array tasks, one per node (default: 1)")
    shared(g, "--slurm-partition", metavar="P", help="sbatch --partition (default: the "
           "cluster's)")
    shared(g, "--slurm-time", metavar="T", help="sbatch --time per node task, e.g. 2:00:00 "
           "(default: the partition's limit)")
    shared(g, "--account", metavar="A", help="sbatch --account (default: your default "
           "account)")
    shared(g, "--node-executor", choices=["local", "docker"],
           help="how each node starts its workers (default: local; docker needs --image)")
    shared(g, "--cpus-per-node", type=COUNT_OR_ZERO, metavar="N",
           help="ask for N CPUs per node task instead of the whole node (default: the whole "
           "node, --exclusive); for cpu-profile runs and node sharing")
    shared(g, "--sbatch-arg", action="append", metavar="ARG",
           help="extra sbatch option, repeatable, e.g. --sbatch-arg=--gres=gpu:8 (default: "
           "none)")
    shared(g, "--max-resubmits", type=COUNT_OR_ZERO, metavar="K",
           help="replacement submissions for failed node tasks (default: 3)")
    renamed(p, "--time", "--slurm-time T", "Slurm's time limit; mlperf's minimum test "
            "duration is --min-duration")


def add_run_inputs(p: argparse.ArgumentParser, default: str | None = DEFAULT_PROFILE,
                   none_means: str = "the one the run recorded", sweep: bool = False,
                   samples_note: str = "") -> None:
    """What a run is made of, in the order every command that makes one lists it (`runner
    run`, `bench`, `validate`): the profile and its --set, the layout's flags (`sweep`:
    bench's comma lists), the samples."""
    add_profile(p, default, none_means)
    add_layout(p, sweep)
    add_samples(p, samples_note)


def add_judged(p: argparse.ArgumentParser) -> None:
    """How a scored run is judged (`runner run`, `validate`): a subset's verdict, and which
    metrics."""
    add_require_full(p)
    add_metrics(p)


def add_workers(p: argparse.ArgumentParser, default: str | None, note: str,
                resumable: bool = True) -> None:
    """Where a run's workers run (`runner run`, `mlperf`): the executor, the harness image
    of docker workers, and the Slurm group."""
    add_executor(p, default, note)
    add_image(p)
    add_slurm(p, resumable)

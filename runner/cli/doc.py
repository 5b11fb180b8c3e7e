"""The CLI reference page (docs/cli.md) as Markdown, generated from the argparse parser.

The docs build (scripts/mkdocs_hooks.py) puts this where docs/cli.md says, so every
subcommand, option, help text, example and exit code on the site is the parser's own and
cannot drift from `runner COMMAND --help`; the docs' command test reads the same examples.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from runner.base.errors import EXIT_CODES
from runner.base.paths import PACKAGE_DIR
from runner.cli.grammar import (
    ABOUT,
    WORKFLOWS,
    OutSpec,
    documented,
    grammar_table,
    grouped_commands,
    subparsers_of,
    walk,
)

USAGE_WIDTH = 100  # fixed, so the page does not depend on the terminal that built it
_CODE_SPAN = re.compile(r"(`[^`]*`)")
_SPECIAL = re.compile(r"([\\*_\[\]|#])")


def inline(text: str) -> str:
    """Help text as Markdown that shows it as written: `code spans` stay code, and the rest
    cannot turn into emphasis, links, HTML tags (`<sha>`) or table cells. The installed
    package's own path (a default such as the shipped golden suites) is `<runner>`, so the
    page is the same wherever it is built and whichever way the runner is installed."""
    text = text.replace(str(PACKAGE_DIR), "<runner>")
    parts = []
    for i, part in enumerate(_CODE_SPAN.split(" ".join(text.split()))):
        if i % 2:  # a code span: Python-Markdown's tables leave a `|` in one alone
            parts.append(part)
        else:
            part = part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            parts.append(_SPECIAL.sub(r"\\\1", part))
    return "".join(parts)


def anchor(path: tuple[str, ...]) -> str:
    """The heading id MkDocs gives `## runner a b` (its toc extension's slug)."""
    return "-".join(("runner", *path))


def fenced(lang: str, lines: list[str] | tuple[str, ...]) -> list[str]:
    return [f"```{lang}", *lines, "```", ""]


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)


def _usage(parser: argparse.ArgumentParser) -> str:
    f = _formatter(parser)
    f.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return f.format_help().strip()


def _options(parser: argparse.ArgumentParser) -> Iterator[str]:
    """One table per argument group: the invocation as --help shows it, then its help."""
    f = _formatter(parser)
    for group in parser._action_groups:
        rows = [a for a in group._group_actions
                if a.help != argparse.SUPPRESS and not isinstance(
                    a, (argparse._HelpAction, argparse._SubParsersAction))]
        if not rows:
            continue
        yield f"**{inline(group.title or 'arguments')}**"
        yield ""
        yield "| argument | meaning |"
        yield "| --- | --- |"
        for action in rows:
            invocation = f._format_action_invocation(action)
            yield f"| `{invocation}` | {inline(f._expand_help(action)) if action.help else ''} |"
        yield ""


def _body(path: tuple[str, ...], parser: argparse.ArgumentParser) -> list[str]:
    """Usage, subcommands, options, examples and --out of one parser."""
    lines = fenced("text", [_usage(parser)])
    for action in subparsers_of(parser) if path else ():  # the root's: "Commands" above
        lines += ["| subcommand | what it does |", "| --- | --- |"]
        lines += [f"| [`runner {' '.join((*path, a.dest))}`](#{anchor((*path, a.dest))}) | "
                  f"{inline(a.help or '')} |" for a in action._choices_actions]
        lines.append("")
    lines += list(_options(parser))
    doc = documented(parser)
    if doc.examples:
        lines += ["**Examples**", "", *fenced("bash", doc.examples)]
    if doc.out:
        lines += [f"**`--out`**: {inline(doc.out)}", ""]
    spec = parser.get_default("out_spec")
    if isinstance(spec, OutSpec):
        lines += [f"**Rerun**: {inline(spec.rerun.text())} "
                  "([Failure modes](failure-modes.md#rerunning-into-an-out))", ""]
    return lines


def _command(path: tuple[str, ...], parser: argparse.ArgumentParser, summary: str
             ) -> list[str]:
    lines = [f"{'#' * (len(path) + 1)} runner {' '.join(path)}", ""]
    if summary:
        lines += [inline(summary[0].upper() + summary[1:]) + ".", ""]
    if parser.description:
        lines += [inline(parser.description), ""]
    codes = ", ".join(f"{code} ({inline(text)})" for code, text in
                      documented(parser).exits.rows())
    return [*lines, *_body(path, parser), f"**Exit codes** ([all](#exit-codes)): {codes}", ""]


def summaries(parser: argparse.ArgumentParser) -> dict[tuple[str, ...], str]:
    """Each subcommand's one-line help (as its parent lists it), by command path."""
    out: dict[tuple[str, ...], str] = {}
    for path, sub in [((), parser), *walk(parser)]:
        for action in subparsers_of(sub):
            for choice in action._choices_actions:
                key = (*path, choice.dest)
                out[key] = choice.help or ""
    return out


def reference(parser: argparse.ArgumentParser) -> str:
    """The whole generated part of docs/cli.md."""
    lines = ["## What runner does", "", inline(ABOUT), "", "## Workflows", ""]
    for title, commands in WORKFLOWS:
        lines += [f"**{inline(title[0].upper() + title[1:])}**", "", *fenced("bash", commands)]
    lines += ["## Commands", ""]
    for heading, group in grouped_commands(next(subparsers_of(parser))):
        lines += [f"**{inline(heading[0].upper() + heading[1:])}**", "",
                  "| command | what it does |", "| --- | --- |"]
        lines += [f"| [`runner {name}`](#{anchor((name,))}) | {inline(text)} |"
                  for name, text in group]
        lines.append("")
    lines += ["## Exit codes", "", "| code | meaning |", "| --- | --- |"]
    lines += [f"| {code} | {inline(text)} |" for code, text in EXIT_CODES]
    lines += ["", "## Shared options", "",
              "An option two commands take is one option: the same spelling, meaning, type "
              "and choices in each (each command's help adds what it does there).", "",
              "| option | meaning | commands |", "| --- | --- | --- |"]
    lines += [f"| `{flag}` | {inline(meaning)} | "
              + ", ".join(f"[{c}](#{anchor(tuple(c.split()))})" for c in commands) + " |"
              for flag, meaning, commands in grammar_table(parser)]
    lines += ["", "## runner", "", *_body((), parser)]
    helps = summaries(parser)
    for path, sub in walk(parser):
        lines += _command(path, sub, helps[path])
    return "\n".join(lines)


def examples(parser: argparse.ArgumentParser) -> list[str]:
    """Every command the reference shows: the workflows', then each subcommand's examples."""
    shown = [c for _, commands in WORKFLOWS for c in commands]
    for _, sub in walk(parser):
        shown += documented(sub).examples
    return shown

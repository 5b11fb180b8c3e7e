"""Checks the README and the docs pages are written for users, with numbers from one place.

Rules (each problem is printed as `page:line: what`, exit 1 when there is any):

- wording: a page says what the tool does and how, never how it was made. DEVLOG lists the
  phrases of a development log ("this session", "aim was", "not reachable from here", "we
  tried", "before this change", ...), each with why it is one. The generated CLI reference
  (the parser's help) is read too.
- measured values: `4.54<!-- measured main_job.run_samples_per_s .2f -->` must show what
  docs/measurements.json holds for that key, rendered with that format (scripts/measured.py);
  an unknown key is a problem too. `--update` rewrites every such literal from the file.
- rates: a throughput written as a bare literal (`4.42 samples/s`, `48 MB/s`, ...) in prose
  is a problem: it names a measured value, so it comes from the file, carrying its key. This
  is what keeps one quantity from showing two values on two pages.
- copies: a literal in prose, with the same unit, that is the rendered form of a measured
  value some page marks (three or more digits, a decimal point, not a round number),
  written without the mark, is a copy that would not follow the file: it carries the key
  too.
- commands: a `runner ...` in inline code names a command that exists (`runner bench sweep`
  is a problem when `bench` has no `sweep`).
- the provenance table between `<!-- measurements -->` and `<!-- /measurements -->` (on
  docs/benchmarks.md) is the one `--update` writes from the file.
- provenance: a mark names a measured record, one with a date, a machine and a commit (a
  published record, with its `source`, is shown as published); a mark on a script's input
  (`RECORD.inputs.X`: a value the script was given, not one it measured) is a problem.
- tables: a Markdown table of measured numbers (a row with two or more unmarked values worth
  guarding, as for copies) pasted into a page is a problem. It comes from a record instead:
  `<!-- measured-table RECORD.PATH -->` ... `<!-- /measured-table -->`, which `--update`
  writes from the record's `{"header": [...], "rows": [[...], ...]}` with a line naming the
  record's date, machine, commit and command.

    python3 scripts/docs_check.py            # the README and docs/*.md; exit 1 on a problem
    python3 scripts/docs_check.py --update   # rewrite measured literals and the table first
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from measured import describe, load, lookup, render

REPO = Path(__file__).resolve().parent.parent

# (pattern, why it is a development log's wording). Case-insensitive, whole words.
DEVLOG: list[tuple[str, str]] = [
    (r"\bthis session\b|\b(earlier|previous|concurrent|other) sessions?\b|\bsessions? during\b",
     "who measured or ran what: the reader's session is not the writer's"),
    (r"\baim(ed)? was\b|\baim\s*[:(<>=≤≥]|\(aim\b|\baims? \d",
     "a goal the work set itself; state the measured value and what it is compared with"),
    (r"\b(not|never|wasn't|isn't) reachable\b|\bhaving been reachable\b|\breachable from\b",
     "what the writer's machine could reach"),
    (r"\bfrom here\b|\b(measured|tried|run|ran|tested) here\b",
     "`here` is the writer's machine; name the machine the record gives"),
    (r"\b(was|were) (not )?available to\b|\bno \w+( \w+)? (was|were) (available|reachable)\b",
     "what the writer had; say what the reader needs instead"),
    (r"\bcould not be (run|measured|tested|checked)\b|\b(could|did) not (run|measure|test)\b",
     "who could not run what"),
    (r"\bwe (tried|ran|measured|could|did|found|had|saw)\b|\bI (tried|ran|measured)\b",
     "the writer's own steps"),
    (r"\b(before|after|since) this change\b|\bthis (change|commit|PR)\b|\bas before\b",
     "a change log's wording: the page describes the tool as it is"),
    (r"\bdevelopment (machine|VM|box)\b",
     "the writer's machine; a measurement names its machine from its record"),
    (r"\bnot (yet )?measured yet\b|\bnot yet (measured|checked|tested)\b"
     r"|\bhas not been (checked|measured|tested|run)\b",
     "the state of the work; say what the reader can do (the command that measures it)"),
    (r"\b(an )?earlier (reading|measurement|session)\b|\bat the time of writing\b",
     "the history of a number; keep the current one with its record"),
    (r"\b(TODO|FIXME|XXX)\b|\bthe lead\b|\bhelpers?'? (drafts?|branch)\b",
     "a note between people working on the repo"),
]
DEVLOG_RE = [(re.compile(p, re.I), why) for p, why in DEVLOG]

NUMBER = r"\d[\d,]*(?:\.\d+)?"
MARK = re.compile(rf"(?P<literal>{NUMBER}(?:-{NUMBER})?%?)?<!-- measured (?P<key>[\w.-]+)"
                  r"(?: (?P<fmt>[^ >]+))? -->")
RATE_UNITS = r"samples/s|images/s|samples per second|images per second|[kMG]B/s"
RATE = re.compile(rf"(?<![\w.]){NUMBER}(?:-{NUMBER})?(?P<mark><!-- measured [^>]*-->)?"
                  rf"(?:\*\*)?(?:\s|&nbsp;)*(?:\*\*)?(?:{RATE_UNITS})\b")
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
TABLE_START, TABLE_END = "<!-- measurements -->", "<!-- /measurements -->"
MEASURED_TABLE = re.compile(r"<!-- measured-table (?P<key>[\w.-]+) -->\n(?P<body>.*?)"
                            r"<!-- /measured-table -->", re.S)
PROVENANCE = ("date", "machine", "commit")


@dataclass(frozen=True)
class Problem:
    page: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.what}"


def pages(root: Path = REPO) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def blank_fences(text: str) -> str:
    """The page with its fenced code blocks blanked (line numbers kept): the prose."""
    return FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def wording(name: str, text: str) -> Iterator[Problem]:
    for pattern, why in DEVLOG_RE:
        for m in pattern.finditer(text):
            yield Problem(name, line_of(text, m.start()),
                          f"development-log wording {m.group(0)!r}: {why}")


def measured(name: str, text: str, data: dict[str, Any]) -> Iterator[Problem]:
    for m in MARK.finditer(text):
        where = line_of(text, m.start())
        try:
            want = render(lookup(data, m["key"]), m["fmt"] or "")
        except (KeyError, TypeError) as e:
            yield Problem(name, where, f"measured {m['key']}: {e}")
            continue
        if m["literal"] != want:
            yield Problem(name, where, f"shows {m['literal'] or 'nothing'} where "
                                       f"docs/measurements.json has {want} for {m['key']} "
                                       "(scripts/docs_check.py --update rewrites it)")


def provenance(name: str, text: str, data: dict[str, Any]) -> Iterator[Problem]:
    """Each mark names a measured record (date, machine, commit) or a published one, and
    a value the record measured, not an input it was given."""
    keys = [(m["key"], m.start()) for m in MARK.finditer(text)]
    keys += [(m["key"], m.start()) for m in MEASURED_TABLE.finditer(text)]
    for key, start in keys:
        record = data["records"].get(key.partition(".")[0])
        if record is None:
            continue  # `measured` says so
        where = line_of(text, start)
        lacking = [f for f in PROVENANCE if not record.get(f)]
        if lacking and not record.get("source"):
            yield Problem(name, where, f"{key}: its record has no {', '.join(lacking)}: a "
                          "number on a page comes from a script's --record run")
        if key.split(".")[1:2] == ["inputs"]:
            yield Problem(name, where, f"{key} is an input the script was given, not a "
                          "measurement: say it is the script's input, without the mark")


def table_text(data: dict[str, Any], key: str) -> str:
    """A record's table as Markdown, and a line saying where it comes from."""
    value = lookup(data, key)
    if not isinstance(value, dict) or not isinstance(value.get("rows"), list):
        raise TypeError(f"{key} is not a table (header and rows)")
    record = data["records"][key.partition(".")[0]]
    rows = [value["header"], ["---"] * len(value["header"]), *value["rows"]]
    lines = ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    when = describe(record) if "machine" in record else record.get("source", "")
    lines += ["", f"Record `{key.partition('.')[0]}`: {when}, commit {record.get('commit', '?')}"
              f", `{record['command']}`."]
    return "\n".join(lines) + "\n"


def measured_tables(name: str, text: str, data: dict[str, Any]) -> Iterator[Problem]:
    for m in MEASURED_TABLE.finditer(text):
        try:
            want = table_text(data, m["key"])
        except (KeyError, TypeError) as e:
            yield Problem(name, line_of(text, m.start()), f"measured table {m['key']}: {e}")
            continue
        if m["body"] != want:
            yield Problem(name, line_of(text, m.start()), f"the table is not record "
                          f"{m['key']}'s (scripts/docs_check.py --update writes it)")


def pasted_tables(name: str, text: str) -> Iterator[Problem]:
    """A table row with two or more unmarked measured-looking values, outside a measured
    table (a command's output in a code block too): numbers pasted without their record."""
    blank = MEASURED_TABLE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    reported = False  # one problem per table, at its first such row
    for number, line in enumerate(blank.splitlines(), 1):
        if not line.lstrip().startswith("|"):
            reported = False
            continue
        bare = INLINE_CODE.sub(lambda m: " " * len(m.group(0)),  # a quoted message's
                               MARK.sub(lambda m: " " * len(m.group(0)), line))
        values = [m.group(0) for m in re.finditer(rf"(?<![\w.-]){NUMBER}(?![\w.]\d)", bare)
                  if worth_guarding(m.group(0))]
        if len(values) >= 2 and not reported:
            reported = True
            yield Problem(name, number, f"a pasted table of measured numbers "
                          f"({', '.join(values[:3])}): record it with its script's --record "
                          "and show it as <!-- measured-table RECORD.PATH -->")


def rates(name: str, prose: str) -> Iterator[Problem]:
    for m in RATE.finditer(prose):
        if not m["mark"]:
            yield Problem(name, line_of(prose, m.start()),
                          f"the rate {m.group(0)!r} is a bare literal: record it in "
                          "docs/measurements.json and write it with its "
                          "<!-- measured KEY --> mark, or it drifts from the other pages")


UNIT_AFTER = re.compile(r"(?:\*\*)?[ \t]*(?:\n[ \t]*)?(?P<unit>[^\s*`]+)")


def unit_at(text: str, end: int) -> str:
    """The word a number is written with (`ms`, `samples/s`, `x`), from just after it."""
    m = UNIT_AFTER.match(text, end)
    return m["unit"].rstrip(",.;:)") if m else ""


def worth_guarding(literal: str) -> bool:
    """A value specific enough that a bare equal one beside the same unit is a copy: a
    decimal point, three or more digits, not a round number (4.54, 1.048; not 2, 0.5, 1.00)."""
    digits = sum(c.isdigit() for c in literal)
    try:
        whole = float(literal.split("-")[0].rstrip("%").replace(",", "")).is_integer()
    except ValueError:
        whole = False
    return "." in literal and digits >= 3 and not whole


def marked_renders(texts: Iterable[str]) -> dict[tuple[str, str], str]:
    """(rendered value, unit) -> key, for every mark on any page worth guarding."""
    found = {}
    for text in texts:
        for m in MARK.finditer(text):
            literal = m["literal"] or ""
            if worth_guarding(literal):
                found[literal, unit_at(text, m.end())] = m["key"]
    return found


def copies(name: str, prose: str, renders: dict[tuple[str, str], str]) -> Iterator[Problem]:
    """A bare literal equal to a marked value and written with the same unit."""
    bare = MARK.sub(lambda m: " " * len(m.group(0)), prose)
    for m in re.finditer(rf"(?<![\w.-]){NUMBER}(?:-{NUMBER})?%?(?![\w.]\d)", bare):
        key = renders.get((m.group(0), unit_at(bare, m.end())))
        if key:
            yield Problem(name, line_of(bare, m.start()),
                          f"{m.group(0)} is the measured {key}: write it "
                          f"{m.group(0)}<!-- measured {key} --> so it follows "
                          "docs/measurements.json")


def command_paths() -> tuple[set[tuple[str, ...]], dict[tuple[str, ...], bool]]:
    """Every `runner` command path, and for each whether it takes a positional argument."""
    sys.path.insert(0, str(REPO))
    from runner.cli.grammar import subparsers_of, walk
    from runner.cli.main import build_parser

    paths, positional = set(), {}
    for path, sub in walk(build_parser()):
        paths.add(path)
        positional[path] = any(not a.option_strings for a in sub._actions
                               if a not in list(subparsers_of(sub)))
    return paths, positional


def commands(name: str, prose: str, known: tuple[set, dict]) -> Iterator[Problem]:
    paths, positional = known
    for m in INLINE_CODE.finditer(prose):
        words = m.group(1).split()
        if len(words) < 2 or words[0] != "runner" or words[1].startswith("-"):
            continue
        path: tuple[str, ...] = ()
        for word in words[1:]:
            if (*path, word) in paths:
                path = (*path, word)
                continue
            # A lowercase word where a subcommand goes (no positional argument could take
            # it) is a command that does not exist; placeholders (COMMAND, DIR) and
            # arguments end the path.
            if re.fullmatch(r"[a-z][a-z0-9-]*", word) and not positional.get(path, False):
                yield Problem(name, line_of(prose, m.start()),
                              f"`{m.group(1)}` names no command: `runner "
                              f"{' '.join((*path, word))}` does not exist")
            break


def provenance_table(data: dict[str, Any]) -> str:
    rows = ["| record | measured by | date, machine, load | commit | note |",
            "| --- | --- | --- | --- | --- |"]
    for name, rec in sorted(data["records"].items()):
        when = describe(rec) if "machine" in rec else rec.get("source", "")
        rows.append(f"| `{name}` | `{rec['command']}` | {when} | {rec.get('commit', '')} | "
                    f"{rec.get('note', '')} |")
    return "\n".join(rows)


def table(name: str, text: str, data: dict[str, Any]) -> Iterator[Problem]:
    start, end = text.find(TABLE_START), text.find(TABLE_END)
    if start < 0:
        return
    current = text[start + len(TABLE_START):end].strip()
    if end < 0 or current != provenance_table(data):
        yield Problem(name, line_of(text, start), "the measurements table is not "
                      "docs/measurements.json's (scripts/docs_check.py --update writes it)")


def update(text: str, data: dict[str, Any]) -> str:
    def fix(m: re.Match) -> str:
        try:
            literal = render(lookup(data, m["key"]), m["fmt"] or "")
        except (KeyError, TypeError):
            return m.group(0)
        return literal + m.group(0)[len(m["literal"] or ""):]

    def fix_table(m: re.Match) -> str:
        try:
            body = table_text(data, m["key"])
        except (KeyError, TypeError):
            return m.group(0)
        return f"<!-- measured-table {m['key']} -->\n{body}<!-- /measured-table -->"

    text = MARK.sub(fix, text)
    text = MEASURED_TABLE.sub(fix_table, text)
    start, end = text.find(TABLE_START), text.find(TABLE_END)
    if 0 <= start < end:
        text = (text[:start + len(TABLE_START)] + "\n" + provenance_table(data) + "\n"
                + text[end:])
    return text


def check(texts: dict[str, str], data: dict[str, Any], cli_reference: str = ""
          ) -> list[Problem]:
    """Every problem of these pages (name -> Markdown), and of the CLI reference's wording."""
    renders = marked_renders(texts.values())
    known = command_paths()
    problems: list[Problem] = []
    for name, text in texts.items():
        prose = blank_fences(text)
        problems += wording(name, text)
        problems += measured(name, text, data)
        problems += provenance(name, text, data)
        problems += measured_tables(name, text, data)
        problems += pasted_tables(name, text)  # a table in a code block is pasted too
        problems += rates(name, prose)
        problems += copies(name, prose, renders)
        problems += commands(name, prose, known)
        problems += table(name, text, data)
    if cli_reference:
        problems += wording("runner --help (docs/cli.md)", cli_reference)
    return problems


def repo_texts(root: Path = REPO) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text(encoding="utf-8") for p in pages(root)}


def cli_text() -> str:
    sys.path.insert(0, str(REPO))
    from runner.cli.doc import reference
    from runner.cli.main import build_parser

    return reference(build_parser())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true",
                        help="rewrite measured literals and the measurements table first")
    args = parser.parse_args(argv)
    data = load()
    if args.update:
        for page in pages():
            text = page.read_text(encoding="utf-8")
            new = update(text, data)
            if new != text:
                page.write_text(new, encoding="utf-8")
                print(f"updated {page.relative_to(REPO)}")
    problems = check(repo_texts(), data, cli_text())
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

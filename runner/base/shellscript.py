"""Bash scripts rendered from argv lists, so no user string is ever bash syntax.

Run dirs, image tags and paths come from users, and the scripts made from them
(`reproduce.sh`, Slurm batch scripts) are executed later, often by someone else. So a
script is built only from argv lists and fixed text: every word is quoted here, a word with
a newline or other control character uses bash's `$'...'` so one command stays one line
(and so stays inside a comment when commented out), and comments are sanitized text that
cannot end their line. Paths are not baked in where they can be found at run time: a script
locates its own directory, so it works from any cwd and after its directory is moved.
"""

from __future__ import annotations

import shlex
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# Unicode categories that must not appear raw in a line: controls (newline, CR, ESC...),
# format characters (bidi overrides that make a line read differently than it runs), line
# and paragraph separators, and surrogates (undecodable bytes of a path).
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _unsafe(ch: str) -> bool:
    return unicodedata.category(ch) in _UNSAFE_CATEGORIES


def _escape(ch: str) -> str:
    """`\\n` or the UTF-8 bytes as `\\xHH`: bash's `$'...'` reads both, in any locale."""
    if ch in _NAMED:
        return _NAMED[ch]
    try:  # a lone surrogate from os.fsdecode stands for the undecodable byte it escapes
        data = ch.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        data = ch.encode("utf-8", "surrogatepass")
    return "".join(f"\\x{b:02x}" for b in data)


def quote(word: str) -> str:
    """One shell word that bash reads back as exactly `word`, on one line."""
    if not any(_unsafe(ch) for ch in word):
        return shlex.quote(word)
    body = "".join(_escape(ch) if _unsafe(ch)
                   else "\\\\" if ch == "\\" else "\\'" if ch == "'" else ch
                   for ch in word)
    return f"$'{body}'"


@dataclass(frozen=True)
class Var:
    """A shell variable used as one word: renders as `"$name"`, never split or globbed."""

    name: str

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or not self.name.isascii():
            raise ValueError(f"not a shell variable name: {self.name!r}")


Word = str | Var


def word(part: Word | Sequence[Word]) -> str:
    """A word, or several concatenated into one (`[Var("here"), "-reproduced"]`)."""
    parts = [part] if isinstance(part, str | Var) else part
    return "".join(f'"${p.name}"' if isinstance(p, Var) else quote(p) for p in parts)


def join(argv: Iterable[Word]) -> str:
    """A command line: each word quoted on its own (shlex.join, one line, with variables)."""
    return " ".join(word(w) for w in argv)


def sanitize(text: str) -> str:
    """`text` as one printable line: control and format characters become visible escapes."""
    return "".join(_escape(ch) if _unsafe(ch) else ch for ch in text)


@dataclass
class Script:
    """A bash script, line by line; `text()` renders it."""

    shebang: str = "#!/usr/bin/env bash"
    lines: list[str] = field(default_factory=list)

    def comment(self, text: str) -> Script:
        """One `#` line; `text` is sanitized, so nothing in it can leave the comment."""
        self.lines.append(f"# {sanitize(text)}".rstrip())
        return self

    def blank(self) -> Script:
        self.lines.append("")
        return self

    def strict(self) -> Script:
        """Stop at the first failing command; CDPATH unset so `cd` goes where it is told."""
        self.lines += ["set -euo pipefail", "unset CDPATH"]
        return self

    def run(self, argv: Sequence[Word], *, exec_: bool = False,
            warn_on_failure: str | None = None) -> Script:
        """A command; `exec_` replaces the shell with it; `warn_on_failure` prints that
        message on stderr instead of stopping the script when the command fails."""
        line = ("exec " if exec_ else "") + join(argv)
        if warn_on_failure is not None:
            line += f" || echo {quote(warn_on_failure)} >&2"
        self.lines.append(line)
        return self

    def capture(self, var: Var, argv: Sequence[Word]) -> Script:
        """`var` set to the command's output (without trailing newlines)."""
        self.lines.append(f"{var.name}=$({join(argv)})")
        return self

    def script_dir(self, var: Var) -> Script:
        """`var` set, at run time, to the absolute directory holding this script.

        Found from BASH_SOURCE rather than baked in, so the script works from any cwd and
        after its directory moved. The `x` sentinel keeps a trailing newline of the name,
        which `$(...)` would otherwise strip; then the sentinel and pwd's newline go.
        """
        self.lines += [
            'self_path="${BASH_SOURCE[0]}"',
            f'case "$self_path" in */*) {var.name}="${{self_path%/*}}/" ;; '
            f'*) {var.name}=./ ;; esac',
            f'{var.name}="$(cd -- "${var.name}" && pwd -P && echo x)"',
            f'{var.name}="${{{var.name}%x}}"',
            f'{var.name}="${{{var.name}%?}}"',
        ]
        return self

    def arg_or(self, var: Var, position: int, default: Sequence[Word]) -> Script:
        """`var` set to positional argument `position`, or to `default` when not given."""
        self.lines.append(f'{var.name}="${{{position}:-}}"')
        self.lines.append(f'if [ -z "${var.name}" ]; then {var.name}={word(default)}; fi')
        return self

    def absolute(self, var: Var) -> Script:
        """`var` made absolute against the cwd the script was started in, so a later `cd`
        leaves what it names where the caller meant."""
        self.lines.append(f'case "${var.name}" in /*) ;; *) {var.name}="$PWD/${var.name}" ;; esac')
        return self

    def cd_if_exists(self, path: str) -> Script:
        """`cd` into `path` when it still exists (a recorded working directory; on another
        machine it may not, and the script goes on from where it was started)."""
        self.lines.append(f"if [ -d {quote(path)} ]; then cd -- {quote(path)}; fi")
        return self

    def text(self) -> str:
        return "\n".join([self.shebang, *self.lines]) + "\n"

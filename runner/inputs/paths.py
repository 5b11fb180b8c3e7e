"""Paths read from files stay inside the directory they are relative to.

A test-suite JSON, a profile or a model config names other files (MLIR, weights, module
definitions, tuning specs) relative to itself. Followed blindly, `../../../home/me/.ssh/x`
or a symlink out of the directory reaches any file on the machine, and the tool that then
reads it (iree-compile, a YAML parser) prints its contents in an error. So such a reference
must resolve, symlinks followed, inside its base directory; otherwise it is refused naming
the field, and the file is never opened.

Test-suite files (third-party content, fetched from IREE's repositories): every local
reference, relative, absolute, `file://` or `builtin:`, must resolve inside the directory it
is relative to, or inside the runner's own shipped assets (`runner/assets/`: public files; the
shipped tiny suites compile the shipped tiny model from there, as `builtin:tiny/...`). A
profile or model config is the user's own configuration: there an explicit absolute (or `~`)
path is the user's statement of where a file is (the shipped SDXL config keeps its tokenizer
under `~/.cache`), as a path on the command line is; relative ones must stay inside the
config's directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from runner.base.errors import BadInput, RunnerError
from runner.base.paths import ASSETS_DIR, BUILTIN, GOLDENS_DIR, builtin_path


def resolved(path: Path, where: str) -> Path:
    """`path` with symlinks resolved; a symlink loop or an unreadable link is a RunnerError
    (Path.resolve raises RuntimeError or OSError for them)."""
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError) as e:
        raise BadInput(f"cannot resolve the path: {e}", where=where,
                       fix="check for a symlink that points at itself or a loop") from e


def is_inside(path: Path, base: Path) -> bool:
    """Whether `path`, symlinks resolved, is `base` or below it (resolved too)."""
    try:
        return resolved(path, str(path)).is_relative_to(resolved(base, str(base)))
    except RunnerError:
        return False


def inside(ref: str, base: Path, where: str, *, absolute_ok: bool) -> Path:
    """The path `ref` names relative to `base`, refused unless it resolves inside `base`
    (an absolute or `~` path only when `absolute_ok`: a user's own config). Returns the
    path as written joined to `base` (not resolved: printed commands stay readable)."""
    expanded = Path(os.path.expanduser(ref)) if ref.startswith("~") else Path(ref)
    if expanded.is_absolute():
        if absolute_ok:
            return expanded
        raise BadInput(f"an absolute path ({_shown(ref)}) where a path relative to "
                       f"{base} is meant", where=where,
                       fix="name the file relative to the file that refers to it, or by "
                       "URL; files outside it are refused")
    path = Path(os.path.abspath(base / expanded))
    if not is_inside(path, base):
        raise BadInput(f"the path {_shown(ref)} leads outside {base}", where=where,
                       fix="name a file inside that directory (no `..` out of it, no "
                       "symlink out of it)")
    return path


def _shown(ref: str) -> str:
    return repr(ref if len(ref) <= 120 else ref[:80] + "..." + ref[-30:])


def _in_runner_assets(path: Path) -> bool:
    """Whether `path` resolves into a runner's shipped assets: this runner's `runner/assets/`,
    or another copy of it (a `runner/assets/` holding `tiny/model.json`: a repository
    checkout's, mounted into a harness container whose own runner is installed elsewhere).
    Only files that resolve inside such a directory qualify: the runner's public assets."""
    try:
        target = resolved(path, str(path))
    except RunnerError:
        return False
    if target.is_relative_to(resolved(ASSETS_DIR, str(ASSETS_DIR))):
        return True
    return any(p.name == "assets" and p.parent.name == "runner"
               and (p / "tiny" / "model.json").is_file() for p in target.parents)


def suite_ref(ref: str, base: Path, where: str) -> None:
    """Refuses a test-suite reference (a path or `file://` URL; http(s) pass) that does not
    resolve inside `base` or the runner's shipped assets; the file is never opened."""
    parts = urlparse(ref)
    if parts.scheme in ("http", "https"):
        return
    if ref.startswith(BUILTIN):
        path = builtin_path(ref)
    else:
        path = Path(unquote(parts.path)) if parts.scheme == "file" else Path(ref).expanduser()
    path = Path(os.path.abspath(base / path))
    if not (is_inside(path, base) or _in_runner_assets(path)):
        raise BadInput(f"the reference {_shown(ref)} leads outside {base}", where=where,
                       fix="test files may name files inside their own directory (or by "
                       "URL); a file elsewhere is refused, never read")


def shipped_suites() -> list[str]:
    """The names of the golden suites the runner ships (runner/assets/goldens)."""
    return sorted(p.name for p in GOLDENS_DIR.iterdir() if p.is_dir())


def suite_path(text: str) -> Path:
    """A golden suite, or a file in one, as the user named it: a path that is there is
    itself; otherwise a shipped suite's name (`tiny-bench`, `tiny-bench/spec.mlir`) is the
    package's own copy, so a command the docs show runs from a pip install and from any
    directory, not only from a checkout's `goldens/`. Anything else is returned as given,
    for its reader to refuse naming the path."""
    path = Path(os.path.expanduser(text))
    if path.exists() or path.is_absolute() or not path.parts:
        return path
    shipped = GOLDENS_DIR / path
    if path.parts[0] in shipped_suites() and shipped.exists() and is_inside(shipped,
                                                                            GOLDENS_DIR):
        return shipped
    return path


def no_such_path(path: Path, where: str | None = None, what: str = "file or directory"
                 ) -> BadInput:
    """The error for a path the user named that is not there, with the likeliest fix: the
    name beside it that is closest (a typo), else what its directory holds, else that the
    directory is missing too."""
    import difflib

    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    try:
        names = sorted(p.name for p in parent.iterdir()) if parent.is_dir() else None
    except OSError:
        names = None
    if names is None:
        fix = f"check the path: its directory {parent} does not exist either"
    else:
        close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.6)
        if close:
            fix = f"did you mean {parent / close[0]}?"
        elif names:
            shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
            fix = f"check the name; {parent} holds: {shown}"
        else:
            fix = f"check the path; {parent} is empty"
    return BadInput(f"{path}: no such {what}", where=where, fix=fix)


def no_such_suite(path: Path, where: str | None = None) -> BadInput:
    """no_such_path's error for a golden suite, whose fix also offers the shipped suites: the
    closest name to a typo (`tiny-bnech`), else the names there are."""
    import difflib

    error = no_such_path(path, where, "test file or suite directory")
    if (error.fix or "").startswith("did you mean"):
        return error
    shipped = shipped_suites()
    close = ([] if path.is_absolute() or not path.parts else
             difflib.get_close_matches(path.parts[0], shipped, n=1, cutoff=0.6))
    fix = (f"did you mean the shipped suite {close[0]}?" if close else
           f"{error.fix}; or name a shipped suite: {', '.join(shipped)}")
    return BadInput(error.message, where=where, fix=fix)

"""Where the IREE command-line tools (iree-compile, iree-opt, iree-run-module,
iree-benchmark-module, ...) come from: one answer for every command, with the reason.

The order, first hit wins:

1. `--iree-tools DIR[:DIR...]` (a global `runner` option), else `$IREE_TOOL_PATH`: IREE's
   own variable (`iree.compiler.tools.binaries` searches it first too), so one setting
   points the runner and IREE's Python API at the same build. A directory named there that
   does not exist is an error, not a silent fall-through to another compiler.
2. `PATH`: the harness images and `build-dir:`/`source:` builds put a build's `tools/`
   first on PATH, and an activated venv puts its console scripts there; PATH winning over
   the installed packages is what keeps a source build from being shadowed by a wheel that
   happens to be installed beside it. Where the first on PATH is one of the installed IREE
   packages' own console scripts (their RECORD lists it), the binary that script would
   start is run directly: the same tool, without a Python process around each call (which
   doubled the CPU of a short `iree-benchmark-executable` call on a 2-core VM, and a stage's
   dispatch replay makes hundreds of them).
3. The installed packages' own tool locations, found as IREE's Python packages find them:
   `iree.compiler.tools.binaries.find_tool` (the compiler wheel's `_mlir_libs/`) and
   `iree._runtime.libs.library_path` (the runtime wheel's `_runtime_libs/`, what the
   `iree-run-module` console script execs). So `/path/to/venv/bin/runner` works without
   activating the venv.

A tool missing from the override directories falls through to PATH and the packages (as
IREE's own lookup does); `runner --version` says which place each tool came from and why.

An override directory that holds IREE's Python console scripts (a venv's `bin/`) stands for
the directories of the binaries those scripts start (the compiler wheel's `_mlir_libs/`, the
runtime wheel's `_runtime_libs/`), in the lookup and in the exported $IREE_TOOL_PATH alike:
such a script looks its binary up on $IREE_TOOL_PATH first, so finding itself there it would
start itself again, without end (1,150 `iree-compile --version` processes and 22 GB in 15
minutes, before this). A script whose binary is not beside its interpreter is refused.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from runner.base.errors import BadInput, RunnerError, StepFailed, ToolFailed
from runner.base.signals import import_held

TOOL_PATH_ENV = "IREE_TOOL_PATH"
FLAG = "--iree-tools"
# The tools `runner --version` reports: every one some command runs.
REPORTED = ("iree-compile", "iree-opt", "iree-run-module", "iree-benchmark-module")
_from_flag: str | None = None  # the $IREE_TOOL_PATH value --iree-tools set, for the origin
VERSION_TIMEOUT_S = 60  # `iree-compile --version` answers in well under a second


@dataclass(frozen=True)
class Tool:
    name: str
    path: str
    origin: str  # --iree-tools | $IREE_TOOL_PATH | PATH | iree.compiler | iree.runtime
    reason: str  # why this one: what was searched before it

    def line(self) -> str:
        return f"{self.path} (from {self.origin}: {self.reason})"


def use_tool_dirs(value: str) -> None:
    """`--iree-tools DIR[:DIR...]`: checked now, then exported as $IREE_TOOL_PATH so child
    processes and IREE's own Python API resolve the same tools."""
    dirs = _binary_dirs(_split(value), FLAG)
    global _from_flag
    _from_flag = os.environ[TOOL_PATH_ENV] = os.pathsep.join(str(d) for d in dirs)


def _split(value: str) -> list[Path]:
    return [Path(p).expanduser().resolve() for p in value.split(os.pathsep) if p]


def _check_dirs(dirs: list[Path], origin: str) -> None:
    for d in dirs:
        if not d.is_dir():
            raise BadInput(f"{d} is not a directory", where=origin,
                           fix="name an IREE build's tools/ directory (the one holding "
                           "iree-compile), or leave it out to use PATH and the installed "
                           "iree-base-compiler / iree-base-runtime packages")


def override_dirs() -> tuple[list[Path], str]:
    """The override directories and where they came from (empty: none set). A $IREE_TOOL_PATH
    naming console scripts is exported again as their binaries' directories (module doc)."""
    value = os.environ.get(TOOL_PATH_ENV, "")
    origin = FLAG if value and value == _from_flag else f"${TOOL_PATH_ENV}"
    dirs = _binary_dirs(_split(value), origin)
    if value and dirs != _split(value):
        os.environ[TOOL_PATH_ENV] = os.pathsep.join(str(d) for d in dirs)
    return dirs, origin


def _binary_dirs(dirs: list[Path], origin: str) -> list[Path]:
    """`dirs` checked, each directory of IREE console scripts replaced by the directories of
    the binaries they start (module doc)."""
    _check_dirs(dirs, origin)
    out: list[Path] = []
    for d in dirs:
        scripts = sorted(p for p in d.glob("iree-*") if _iree_console_script(p))
        if not scripts:
            out.append(d)
            continue
        interpreter = Path(_shebang(scripts[0]))
        libs = [lib for root in {d.parent, interpreter.parent.parent}
                for pattern in ("lib/python*/site-packages/iree/compiler/_mlir_libs",
                                "lib/python*/site-packages/iree/_runtime_libs")
                for lib in sorted(root.glob(pattern)) if lib.is_dir()]
        if not libs:
            raise BadInput(
                f"{d} holds IREE's Python console scripts ({scripts[0].name}), and the "
                "binaries they start are not beside their interpreter", where=origin,
                fix="name the directory of the binaries (site-packages/iree/compiler/"
                "_mlir_libs, site-packages/iree/_runtime_libs) or an IREE build's tools/")
        out += [lib for lib in dict.fromkeys(libs) if lib not in out]
    return out


def _iree_console_script(path: Path) -> bool:
    """A `#!` script that starts an IREE Python package's tool (not a user's own wrapper)."""
    if not _executable(path) or not _script(str(path)):
        return False
    try:
        head = path.read_text(errors="replace")[:4096]
    except OSError:
        return False
    return re.search(r"^\s*(from|import)\s+iree[._]", head, re.M) is not None


def _shebang(path: Path) -> str:
    with open(path, "rb") as f:
        return f.readline()[2:].decode(errors="replace").strip().split()[0]


def _executable(path: Path | str | None) -> bool:
    return bool(path) and os.path.isfile(str(path)) and os.access(str(path), os.X_OK)


def package_tool(name: str) -> tuple[str, str] | None:
    """(path, package) of `name` in the installed IREE Python packages, located the way
    those packages locate it themselves; None where neither ships it."""
    try:
        binaries = import_held("iree.compiler.tools.binaries")

        path = binaries.find_tool(name)  # ValueError: not a compiler tool, or not installed
        if _executable(path):
            return os.path.normpath(path), "iree.compiler"
    except (ImportError, ValueError):
        pass
    try:
        # iree.runtime's console scripts exec from here. The submodule itself: its package
        # does not import it, so in a process that has not imported iree.runtime (a
        # `runner bench` the GPU check starts) `iree._runtime.libs` is no attribute yet.
        libs = import_held("iree._runtime.libs")
        path = os.path.join(libs.library_path, name)
        if _executable(path):
            return path, "iree.runtime"
    except (ImportError, AttributeError):
        pass
    return None


@cache
def _console_scripts() -> dict[str, str]:
    """The installed IREE packages' console scripts (real path -> package), from their
    RECORDs: each only starts the package's own binary of its name (`package_tool`), in a
    Python process of its own."""
    out = {}
    for dist, package in (("iree-base-compiler", "iree.compiler"),
                          ("iree-base-runtime", "iree.runtime")):
        try:
            installed = importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        names = {e.name for e in installed.entry_points if e.group == "console_scripts"}
        for file in installed.files or ():
            path = os.path.realpath(str(installed.locate_file(file)))
            if file.name in names and _script(path):
                out[path] = package
    return out


def _script(path: str) -> bool:
    """A `#!` script, not a binary (the packages' RECORDs list their binaries of the same
    names too: one on PATH, such as a Tracy build's, is run as it is)."""
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def find_tool(name: str) -> Tool:
    """`name` by the order in the module doc; a RunnerError lists every place looked in."""
    dirs, origin = override_dirs()
    for d in dirs:
        if _executable(d / name):
            return Tool(name, str(d / name), origin, f"{name} is in {d}")
    skipped = f"not in {origin}" if dirs else f"{FLAG} / ${TOOL_PATH_ENV} not set"
    on_path = shutil.which(name)
    if on_path:
        script_of = _console_scripts().get(os.path.realpath(on_path))
        found = package_tool(name) if script_of else None
        if found and found[1] == script_of:
            return Tool(name, found[0], script_of, f"{skipped}; first {name} on PATH, "
                        f"{on_path}, is the installed {script_of} package's console script, "
                        "which runs this")
        return Tool(name, on_path, "PATH", f"{skipped}; first {name} on PATH")
    found = package_tool(name)
    if found:
        path, package = found
        return Tool(name, path, package, f"{skipped}, not on PATH; the installed {package} "
                    "package's own copy")
    # BadInput (the IREE the user installed or named), not ToolFailed: the dispatch
    # measurements read a ToolFailed raised while they run a tool as "this driver cannot",
    # and a tool missing is not that.
    raise BadInput(
        f"`{name}` not found: {skipped}, not on PATH, and no installed IREE package ships it",
        where=name,
        fix="pip install iree-base-compiler iree-base-runtime (the `runner` venv's packages "
            f"are found without activating it), or pass {FLAG} DIR / set ${TOOL_PATH_ENV} "
            "to an IREE build's tools/ directory")


def tool_path(name: str) -> str:
    return find_tool(name).path


def json_lines(argv: list[str], where: str) -> Iterator[Any]:
    """Each line an IREE tool writes as JSON (`argv` names the tool bare, as a user would
    type it; the found one runs), read as the tool writes it. A line that is not JSON stops
    the tool; its exit status is checked once its output ends. Both are RunnerErrors that
    give the command to reproduce them (not ToolFailed: the dispatch replay reads a
    ToolFailed from iree-benchmark-module as "unavailable on this driver", and a dump tool
    that fails is an error of the run, not that)."""
    shown = shlex.join(argv)
    # stderr into a file, not a second pipe: a tool that fills a stderr pipe nobody reads
    # while this reads stdout would wait forever, and so would this.
    with tempfile.TemporaryFile("w+") as errors:
        proc = subprocess.Popen([tool_path(argv[0]), *argv[1:]], stdout=subprocess.PIPE,
                                stderr=errors, text=True)
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                if line.strip():
                    try:
                        row = json.loads(line)
                    except ValueError as e:
                        proc.kill()
                        raise StepFailed(f"{argv[0]} wrote a line that is not JSON: {e}",
                                         where=where, fix=f"run `{shown}` by hand; make the "
                                         "file again if it is damaged") from e
                    yield row
        finally:
            proc.stdout.close()
            rc = proc.wait()
        errors.seek(0)
        err = errors.read()
    if rc != 0:  # StepFailed, not ToolFailed: reading a file is no "this driver cannot"
        raise StepFailed(f"{argv[0]} failed (exit {rc}): {err.strip()[-1000:]}", where=where,
                         fix=f"reproduce with: {shown}")


def found_path(name: str) -> str | None:
    """The tool's path, or None where it is nowhere: for records and printed equivalent
    commands, which must not fail because a tool the command itself does not run is absent."""
    try:
        return tool_path(name)
    except RunnerError:
        return None


def describe_tools() -> dict[str, dict[str, str] | None]:
    """Each reported tool's path, origin and reason (None: not found): for manifests."""
    out: dict[str, dict[str, str] | None] = {}
    for name in REPORTED:
        try:
            t = find_tool(name)
            out[name] = {"path": t.path, "origin": t.origin, "reason": t.reason}
        except RunnerError:
            out[name] = None
    return out


@dataclass(frozen=True)
class CompilerInfo:
    path: str
    version: str
    commit: str


def compiler_info() -> CompilerInfo:
    """The iree-compile runner.base.iree_tools finds, with its version (asked once per path)."""
    return _compiler_at(tool_path("iree-compile"))


def compiler_here() -> CompilerInfo | None:
    """The compiler `compiler_info` gives, or None where no iree-compile is found at all: a
    machine that runs vmfbs compiled elsewhere (runner.model.compile). An override directory
    that does not exist is still an error: a typo must not silently mean "no compiler"."""
    override_dirs()
    try:
        path = tool_path("iree-compile")
    except RunnerError:
        return None
    return _compiler_at(path)


def nominal_compiler() -> CompilerInfo:
    """The compiler a machine without one would need: the version of its IREE runtime (a
    vmfb loads in the runtime of its compiler's release), for printing commands."""
    try:
        version = import_held("iree.runtime.version")

        return CompilerInfo("iree-compile", version.VERSION, "unknown")
    except ImportError:
        return CompilerInfo("iree-compile", "unknown", "unknown")


@cache
def _compiler_at(path: str) -> CompilerInfo:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False,
                             timeout=VERSION_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise ToolFailed(f"`{path} --version` did not answer in {VERSION_TIMEOUT_S} s",
                         where=path, fix="point --iree-tools (or $IREE_TOOL_PATH) at a working "
                         "IREE build's tools; `runner --version` shows which tools are found "
                         "where") from e
    match = re.search(r"compiler version (\S+)(?: @ (\w+))?", out.stdout + out.stderr)
    if out.returncode != 0 or not match:
        raise ToolFailed(f"`{path} --version` failed: {out.stderr.strip()[:300]}", where=path,
                         fix="point --iree-tools (or $IREE_TOOL_PATH) at a working IREE build; "
                         "`runner --version` shows which tools are found where")
    return CompilerInfo(path, match.group(1), match.group(2) or "unknown")



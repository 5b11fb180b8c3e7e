"""IREE compile flags in the spelling of the build that compiles.

IREE renames flags between releases, and an `iree-compile` stops on a flag it does not know
("Unknown command line argument"). A profile is written once, in today's spelling, and a
bisect or trend reaches back to the oldest release of the tested range, so every flag a
profile (or IREE CI's own flag list) passes is written for the build at hand:

- a flag the build knows goes as it is;
- a flag IREE renamed (`RENAMES`) goes in the spelling the build knows, its value translated
  where the meaning moved (a prefetch switch became a stage count);
- any other flag the build does not know is refused before anything compiles, naming the
  flag, the build, the spelling it knows where there is one, and the fix.

Which flags a build knows is asked of the build itself (`iree-compile --help-list-hidden`,
0.15 s, once per compiler per process: nothing is written, so a dry run asks too), which holds
for nightlies and source builds whatever their version says. Where no compiler is at hand (a
machine that runs modules compiled elsewhere looks up the flags another machine's compiler of
a given version used) the release number decides, by the table.

A new rename: add a `Rename` with the first release that has the new spelling;
tests/test_iree_flags.py checks every entry against each release's `--help-list-hidden`.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from runner.base.errors import BadInput, ToolFailed
from runner.base.iree_range import release
from runner.base.iree_tools import CompilerInfo

HELP_TIMEOUT_S = 60


def _same(value: str) -> str | None:
    return value


def _stages_as_switch(value: str) -> str | None:
    """`--iree-llvmgpu-prefetch-num-stages=N` before 3.11: the switch prefetched with two
    stages (iree #22818 kept that depth as the default), and 0 or 1 stages meant none; a
    deeper pipeline has no older spelling."""
    if not value.isdigit() or int(value) > 2:
        return None
    return "true" if int(value) == 2 else "false"


def _switch_as_stages(value: str) -> str | None:
    """`--iree-llvmgpu-enable-prefetch[=true|false]` from 3.11 on: two stages, or none."""
    return {"": "2", "true": "2", "1": "2", "false": "0", "0": "0"}.get(value.lower())


@dataclass(frozen=True)
class Rename:
    """One flag IREE renamed: `new` from release `since` on, `old` before it."""

    new: str
    old: str
    since: str  # the first release whose iree-compile knows `new`
    why: str  # where the rename came from, for the next person to check it
    as_old: Callable[[str], str | None] = _same  # the value `new=V` has in `old`'s spelling
    as_new: Callable[[str], str | None] = _same  # and back; None: it has no such spelling


RENAMES: tuple[Rename, ...] = (
    Rename("--iree-rocm-target", "--iree-hip-target", "3.11.0",
           "the HIP target options became ROCm's in 3.11 (hip kept as deprecated until 3.12)"),
    Rename("--iree-rocm-waves-per-eu", "--iree-hip-waves-per-eu", "3.11.0",
           "as --iree-rocm-target; 3.9 and 3.10 know only the hip spelling"),
    Rename("--iree-llvmgpu-prefetch-num-stages", "--iree-llvmgpu-enable-prefetch", "3.11.0",
           "iree #23568 replaced the switch with a stage count", _stages_as_switch,
           _switch_as_stages),
)


@cache
def known_flags(compiler_path: str) -> frozenset[str]:
    """Every flag name the compiler at `compiler_path` lists in `--help-list-hidden`."""
    try:
        proc = subprocess.run([compiler_path, "--help-list-hidden"], capture_output=True,
                              text=True, timeout=HELP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolFailed(f"cannot list the flags of `{compiler_path}`: {e}",
                         where=compiler_path,
                         fix="point --iree-tools (or $IREE_TOOL_PATH) at a working IREE "
                         "build; `runner --version` shows which tools are found where") from e
    if proc.returncode != 0:
        raise ToolFailed(f"`{compiler_path} --help-list-hidden` failed "
                         f"(exit {proc.returncode}): {proc.stderr.strip()[:300]}",
                         where=compiler_path,
                         fix="point --iree-tools (or $IREE_TOOL_PATH) at a working IREE build")
    return frozenset(re.findall(r"^\s+(--?[A-Za-z0-9][\w.-]*)", proc.stdout, re.M))


def _asks(compiler: CompilerInfo) -> bool:
    """Whether the compiler itself can be asked: a real executable, not a version read from
    another machine's compile cache."""
    return os.path.isfile(compiler.path) and os.access(compiler.path, os.X_OK)


class Spelling:
    """What one build knows: asked of it where it is here, else judged by its release."""

    def __init__(self, compiler: CompilerInfo):
        self.compiler = compiler
        self.known = known_flags(compiler.path) if _asks(compiler) else None
        self.release = release(compiler.version)

    def knows(self, name: str) -> bool | None:
        """True or False where known; None where neither the build nor the table can say."""
        if self.known is not None:
            return name in self.known
        for rename in RENAMES:
            if name in (rename.new, rename.old):
                if self.release is None:  # no version: taken as a build of today
                    return name == rename.new
                return (self.release >= (release(rename.since) or ())) == (name == rename.new)
        return None

    def spell(self, flag: str, where: str) -> str:
        """`flag` as this build writes it (see the module docstring)."""
        name, eq, value = flag.partition("=")
        if not name.startswith("-") or self.knows(name) is not False:
            return flag
        for rename in RENAMES:
            if name in (rename.new, rename.old):
                other, translate = ((rename.old, rename.as_old) if name == rename.new
                                    else (rename.new, rename.as_new))
                if self.knows(other) is False:
                    break
                translated = translate(value)
                if translated is None:
                    raise self._refused(flag, where, f"its value has no spelling in {other}, "
                                        f"the flag this build knows ({rename.why})")
                return f"{other}={translated}" if eq or translated != value else other
        raise self._refused(flag, where, self._close(name))

    def _close(self, name: str) -> str:
        close = difflib.get_close_matches(name, sorted(self.known or ()), n=1, cutoff=0.75)
        return f"it knows {close[0]}" if close else "no flag it knows is close"

    def _refused(self, flag: str, where: str, known: str) -> BadInput:
        c = self.compiler
        return BadInput(
            f"IREE {c.version} (`{c.path}`) does not know `{flag}`: {known}", where=where,
            fix="use a build that knows the flag, or drop it from the profile; if IREE "
            "renamed it, add the rename to runner/base/iree_flags.py RENAMES "
            "(docs/layouts.md, 'Flags across IREE builds')")


def spelled_for(flags: Sequence[str], compiler: CompilerInfo, where: str) -> tuple[str, ...]:
    """`flags` in the spelling of `compiler`'s build; a flag it cannot take is refused
    (RunnerError naming `where`, the flag, the build and the fix)."""
    spelling = Spelling(compiler)
    return tuple(spelling.spell(flag, where) for flag in flags)


def rocm_chip_flag(chip: str, compiler: CompilerInfo) -> str:
    """The ROCm chip flag for `chip` as `compiler`'s build spells it."""
    return Spelling(compiler).spell(f"--iree-rocm-target={chip}", where="--rocm-chip")

"""The one way to name an IREE build, wherever a command takes one (`--iree` of validate,
bench and image build, `--good/--bad` of bisect, the builds of trend):

- `wheels:VERSION`: the released or nightly `iree-base-compiler`/`-runtime` wheels
  (`wheels:3.13.0`, `wheels:3.14.0rc20250601`);
- `commit:SHA`: the packages IREE's CI (PkgCI) built for one commit of an IREE checkout;
- `source:SHA`: IREE built from source at a commit (or a tag/branch);
- `build-dir:DIR`: an existing IREE CMake build tree with its Python bindings.

Every value ends up in a build argument, a pip requirement or a copied path, so it is
checked here against a narrow pattern rather than quoted later: no shell metacharacters,
no `..`, nothing git or pip could read as an option. A command that cannot use a kind says
so with the flag and what to type instead (`kinds=`).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from runner.base.errors import BadInput

KINDS = ("wheels", "commit", "source", "build-dir")
# What a harness image is built from (`image build`, and validate's and bench's builds):
# `commit:` names PkgCI's packages, which bisect and trend install into venvs.
IMAGE_KINDS = ("wheels", "source", "build-dir")
BUILD_GRAMMAR = "wheels:VERSION | commit:SHA | source:SHA | build-dir:DIR"
BUILD_EXAMPLES = ("wheels:3.13.0", "commit:1a2b3c4d5e", "source:1a2b3c4d5e",
            "build-dir:../iree-build")

_SHA = re.compile(r"[0-9a-fA-F]{7,40}")
# A git ref or tag: git's own rules, narrowed to characters that need no quoting anywhere.
_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/+-]{0,199}")
# The PEP 440 versions IREE publishes: releases, rc nightlies, post and dev releases.
VERSION = re.compile(r"[0-9]+(\.[0-9]+){0,3}((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?")
_PEP440 = re.compile(r"(?P<release>[0-9]+(?:\.[0-9]+)*)(?:(?P<pre>a|b|rc)(?P<pre_n>[0-9]+))?"
                     r"(?:\.post(?P<post>[0-9]+))?(?:\.dev(?P<dev>[0-9]+))?")
_PRE_RANK = {"a": 0, "b": 1, "rc": 2}
# What a build tree must hold to be used: the compiler tool and both Python packages.
TREE_REQUIRED = ("tools/iree-compile", "compiler/bindings/python/iree/compiler/__init__.py",
                 "runtime/bindings/python/iree/runtime/__init__.py")


def _instead(kind: str, value: str, where: str, kinds: tuple[str, ...]) -> str:
    """What to type instead of a build kind `where` cannot use."""
    if kind == "commit" and "source" in kinds:
        return (f"build it from source: {where} source:{value} (commit: names PkgCI's "
                "packages of a commit, which `runner bisect` and `runner trend` install)")
    return f"use {grammar(kinds)} with {where}"


@dataclass(frozen=True)
class BuildSpec:
    """One IREE build, checked: `kind` and its value (a version, a lower-cased SHA or a
    ref, a resolved directory). `text` is the canonical spelling (`source:` and `commit:`
    SHAs lower-cased, `build-dir:` an absolute path)."""

    kind: str
    value: str

    @property
    def text(self) -> str:
        return f"{self.kind}:{self.value}"

    @property
    def version(self) -> str | None:
        return self.value if self.kind == "wheels" else None

    @property
    def commit(self) -> str | None:
        return self.value if self.kind in ("commit", "source") else None

    @property
    def path(self) -> Path | None:
        return Path(self.value) if self.kind == "build-dir" else None


def parse_build_spec(text: str, where: str, kinds: tuple[str, ...] = KINDS) -> BuildSpec:
    """`text` as a build of one of `kinds`; `where` names the flag (`--iree`, `--good`)."""
    kind, colon, value = text.partition(":")
    if not colon and _SHA.fullmatch(text):
        raise BadInput(f"{text!r} is a commit, but built how?", where=where,
                       fix=f"write source:{text} (built from source)"
                       + (f" or commit:{text} (PkgCI's packages of it)"
                          if "commit" in kinds else ""))
    if not colon or kind not in KINDS or not value:
        raise BadInput(f"{text!r} is not an IREE build", where=where,
                       fix=f"use {grammar(kinds)}, e.g. "
                       + ", ".join(e for e in BUILD_EXAMPLES if e.split(":")[0] in kinds))
    if kind not in kinds:
        raise BadInput(f"{kind}: builds cannot be used with {where}", where=where,
                       fix=_instead(kind, value, where, kinds))
    if kind == "wheels":
        if not VERSION.fullmatch(value):
            raise BadInput(f"{value!r} is not a wheel version", where=where,
                           fix="use a PEP 440 release such as 3.13.0 or a nightly such as "
                           "3.14.0rc20250601")
        return BuildSpec(kind, value)
    if kind in ("commit", "source"):
        return BuildSpec(kind, validate_commit(value, where))
    return BuildSpec(kind, str(build_tree(value, where)))


def grammar(kinds: tuple[str, ...] = KINDS) -> str:
    """The spellings of `kinds`, as BUILD_GRAMMAR writes them."""
    return " | ".join(g for g in BUILD_GRAMMAR.split(" | ") if g.split(":")[0] in kinds)


def validate_commit(value: str, where: str = "source") -> str:
    """A commit SHA (7-40 hex, lower-cased) or a safe tag/branch name."""
    if _SHA.fullmatch(value):
        return value.lower()
    bad = (not _REF.fullmatch(value) or ".." in value or "//" in value or "@{" in value
           or value.endswith((".", "/", ".lock")) or "/." in value)
    if bad:
        raise BadInput(f"{value!r} is neither a commit SHA nor a safe git ref", where=where,
                       fix="give 7-40 hex digits, or a tag/branch made of letters, digits "
                       "and . _ - / + (no '..', no leading '-')")
    return value


def build_tree(value: str, where: str) -> Path:
    """An IREE CMake build tree with Python bindings, resolved."""
    path = Path(value).expanduser()
    if not path.is_dir():
        raise BadInput(f"build tree {value!r} is not a directory", where=where,
                       fix="give the CMake build directory of an IREE build "
                       "(the one holding tools/iree-compile)")
    missing = [p for p in TREE_REQUIRED if not (path / p).exists()]
    if missing:
        raise BadInput(f"{path} is not an IREE build tree with Python bindings: missing "
                       f"{', '.join(missing)}", where=where,
                       fix="configure with -DIREE_BUILD_PYTHON_BINDINGS=ON and build it")
    return path.resolve()


def version_key(version: str, where: str = "wheels") -> tuple:
    """PEP 440 order for the versions IREE publishes: 3.4.0rc20250101 < 3.4.0 < 3.4.1."""
    m = _PEP440.fullmatch(version)
    if m is None:
        raise BadInput(f"{version!r} is not a PEP 440 version", where=where,
                       fix="use a release such as 3.13.0 or a nightly such as "
                       "3.14.0rc20250601")
    release = tuple(int(x) for x in m["release"].split("."))
    release += (0,) * (4 - len(release))
    pre = (_PRE_RANK[m["pre"]], int(m["pre_n"])) if m["pre"] else (3, 0)
    dev = int(m["dev"]) if m["dev"] is not None else sys.maxsize
    return (release, pre, int(m["post"] or -1), dev)


def is_version(text: str) -> bool:
    return _PEP440.fullmatch(text) is not None

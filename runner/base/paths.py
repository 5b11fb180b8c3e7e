"""Where things live: the cache, and the files the runner ships.

Everything the runner reads at run time is package data under `runner/assets/`, found the
same way in a source checkout, an editable install and a wheel. The repository's top-level
`configs/`, `dockerfiles/`, `goldens/` and `scripts/docker_setup.sh` are the source of truth:
in a checkout, `runner/assets/` holds symlinks to them (and to `pyproject.toml` and
`README.md`, the recipe the harness image builds the runner's wheel from), and building a
wheel copies what they point at into the package.

`REPO_DIR` is the directory above the package: a checkout only in a checkout. Only tools that
edit the checkout on purpose (regenerating the shipped assets, the CLI reference's path
scrubbing) use it, through `checkout_dir()`; nothing writes into an installed package
(`refuse_package_write`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from runner.base.errors import BadInput

PACKAGE_DIR = Path(__file__).resolve().parents[1]
ASSETS_DIR = PACKAGE_DIR / "assets"
CONFIGS_DIR = ASSETS_DIR / "configs"  # the shipped profiles
DOCKERFILES_DIR = ASSETS_DIR / "dockerfiles"
GOLDENS_DIR = ASSETS_DIR / "goldens"  # the tiny golden suites
DOCKER_SETUP_SCRIPT = ASSETS_DIR / "scripts" / "docker_setup.sh"
PROJECT_FILES_DIR = ASSETS_DIR / "project"  # pyproject.toml, README.md
MLPERF_DATA_DIR = ASSETS_DIR / "mlperf"
REPO_DIR = PACKAGE_DIR.parent
# `builtin:tiny/clip.irpa` names a file the runner ships (under ASSETS_DIR), wherever the
# runner is installed: profiles and the tiny golden suites refer to the tiny model so.
BUILTIN = "builtin:"
CACHE_ENV = "RUNNER_CACHE_DIR"
DEFAULT_CACHE = "~/.cache/iree-sdxl-runner"  # as profiles and docs write it


def cache_dir() -> Path:
    """`$RUNNER_CACHE_DIR`, default `~/.cache/iree-sdxl-runner`, created on first use (not
    by a dry run: see `caches_read_only`)."""
    root = os.environ.get(CACHE_ENV) or DEFAULT_CACHE
    path = Path(root).expanduser()
    if caches_writable():
        path.mkdir(parents=True, exist_ok=True)
    return path


_read_only = 0  # how many dry runs are running in this process (tests run them in-process)


@contextlib.contextmanager
def caches_read_only() -> Iterator[None]:
    """While a dry run runs (the CLI's wrapper enters this for every command that acts), the
    cache is read and never written: a dry run writes nothing, its cache included, so a
    cache writer that may run in one (a probe's answers, the cache directory itself) asks
    `caches_writable()` first and leaves the write out. Process-wide, not per context: a
    dry run's helper threads read the cache read-only too."""
    global _read_only
    _read_only += 1
    try:
        yield
    finally:
        _read_only -= 1


def caches_writable() -> bool:
    return _read_only == 0


def builtin_path(ref: str) -> Path:
    """The shipped file a `builtin:...` reference names (not checked: callers that read
    third-party references check it stays inside ASSETS_DIR, runner.inputs.paths)."""
    return ASSETS_DIR / ref.removeprefix(BUILTIN)


def builtin_ref(path: Path) -> str:
    """`builtin:...` for a path inside the package's assets, else the absolute path."""
    path = Path(path).resolve()
    try:
        return BUILTIN + path.relative_to(ASSETS_DIR.resolve()).as_posix()
    except ValueError:
        return str(path)


def checkout_dir() -> Path | None:
    """The source checkout this runner is imported from; None in an installed package."""
    if (REPO_DIR / "pyproject.toml").is_file() and (REPO_DIR / "configs").is_dir():
        return REPO_DIR
    return None


def refuse_package_write(path: Path, where: str) -> None:
    """Nothing writes into an installed runner package (it may be shared, read-only, or
    replaced by the next install): a target inside it is refused. A checkout's package is
    the source tree, which the tools that regenerate shipped assets edit on purpose."""
    if checkout_dir() is not None:
        return
    named = Path(os.path.abspath(path))
    try:
        target = named.resolve()
    except (OSError, RuntimeError):  # a link loop: judged by the path as named
        target = named
    if named.is_relative_to(PACKAGE_DIR) or target.is_relative_to(PACKAGE_DIR):
        raise BadInput(f"{path} is inside the installed runner package ({PACKAGE_DIR})",
                       where=where,
                       fix="write to a directory of your own: pass --out DIR (the shipped "
                       "files are regenerated from a source checkout)")

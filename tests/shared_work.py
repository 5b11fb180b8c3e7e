"""Work the suite does once per session and shares: whichever process needs it first does
it, the others (pytest-xdist workers) wait for it and read the same result.

`once(factory, name)` holds an exclusive lock while the caller builds or checks its piece of
work, so two workers never build the same thing at once: the second finds the first's result
(a directory done here, or the runner's own caches filled). `shared_dir` builds a directory
once; tests that change what they are given copy it first (`copy_of`).
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

DONE = ".done"


def shared_root(factory: pytest.TempPathFactory) -> Path:
    """The session's directory every worker sees: the parent of the workers' own base
    temp dirs under pytest-xdist (`pytest-N/`), the base temp dir otherwise."""
    base = factory.getbasetemp()
    root = base.parent if base.name.startswith("popen-gw") else base
    (root / "shared").mkdir(exist_ok=True)
    return root / "shared"


@contextlib.contextmanager
def once(factory: pytest.TempPathFactory, name: str) -> Iterator[Path]:
    """An exclusive lock on `name` across the session's processes, held while inside."""
    root = shared_root(factory)
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield root
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def shared_dir(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]
               ) -> Path:
    """`build(dir)` once per session (a failed build is tried again by the next asker);
    the directory it filled, for every test that asks."""
    with once(factory, name) as root:
        out = root / name
        if not (out / DONE).is_file():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            build(out)
            (out / DONE).touch()
        return out


def copy_of(shared: Path, to: Path) -> Path:
    """A test's own copy of a shared directory, to change as it likes."""
    shutil.copytree(shared, to, symlinks=True, ignore=shutil.ignore_patterns(DONE))
    return to


def cache_sharing_traces(cache: Path) -> Path:
    """A runner cache of a test's own (exports it looks at alone) that shares the
    session's MLIR traces: an export of modules traced before reads them, as an export
    in the session's cache would (runner.model.export.traces)."""
    from runner.base.paths import cache_dir
    from runner.model.export.traces import TRACES

    (cache_dir() / TRACES).mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    (cache / TRACES).symlink_to(cache_dir() / TRACES)
    return cache

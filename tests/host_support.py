"""Test helpers that touch the host: small tmpfs mounts (a full or read-only disk on demand,
as root), polling for a condition another process brings about, and this host's IREE as a
`build-dir:` build tree."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def wait_for(predicate: Callable[[], object], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


@contextlib.contextmanager
def tmpfs(path: Path, options: str) -> Iterator[Path]:
    """A tmpfs at `path` (made here) with mount `options` such as `size=64k` or `ro`; the
    test is skipped where mounting needs a root this process does not have."""
    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def host_build_tree(root: Path) -> Path:
    """This host's own IREE (the installed wheels) laid out as a CMake build tree: tools/
    and the two Python binding dirs, by links, so `build-dir:` builds cost nothing to make."""
    import iree.compiler
    import iree.runtime

    package = Path(iree.runtime.__file__).parent.parent  # site-packages/iree
    (root / "tools").mkdir(parents=True)
    (root / "tools" / "iree-compile").symlink_to(
        Path(iree.compiler.__file__).parent / "_mlir_libs" / "iree-compile")
    for binding, names in (("compiler", ["compiler"]),
                           ("runtime", ["runtime", "_runtime", "_runtime_libs"])):
        target = root / binding / "bindings" / "python" / "iree"
        target.mkdir(parents=True)
        for name in names:
            if (package / name).exists():
                (target / name).symlink_to(package / name)
    return root

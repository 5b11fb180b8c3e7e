"""Which IREE ran and where it was imported from: the classic failure of a source build on
PYTHONPATH is being shadowed by an installed wheel, so every manifest records both."""

from __future__ import annotations

import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from runner.base.signals import import_held


def _package(name: str) -> dict[str, Any]:
    try:
        module = import_held(name)
        version = import_held(f"{name}.version")
    except ImportError as e:
        return {"available": False, "error": str(e)}
    return {"available": True, "file": module.__file__, "version": version.VERSION,
            "commit": version.REVISIONS.get("IREE", "unknown")}


def iree_provenance() -> dict[str, Any]:
    """`iree-compile` is its path (None: not found); `iree-tools` says for each tool where
    it came from and why (runner.base.iree_tools)."""
    from runner.base.iree_tools import describe_tools

    tools = describe_tools()
    compiler = tools.get("iree-compile")
    return {
        "iree.compiler": _package("iree.compiler"),
        "iree.runtime": _package("iree.runtime"),
        "iree-compile": compiler["path"] if compiler else None,
        "iree-tools": tools,
    }


def host_info() -> dict[str, Any]:
    return {"hostname": socket.gethostname(), "platform": platform.platform(),
            "python": sys.version.split()[0], "executable": sys.executable}


GIT_TIMEOUT_S = 30


def runner_provenance() -> dict[str, Any]:
    """The runner's version and, from a git checkout, its commit and whether it is dirty."""
    import runner

    root = Path(runner.__file__).resolve().parent.parent
    out: dict[str, Any] = {"version": runner.__version__, "commit": None, "dirty": None}
    if shutil.which("git") and (root / ".git").exists():
        try:  # a git that hangs (a lock, a network mount) leaves the commit unknown
            head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                                  capture_output=True, text=True, check=False,
                                  timeout=GIT_TIMEOUT_S)
            status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--",
                                     "runner", "configs"], capture_output=True, text=True,
                                    check=False, timeout=GIT_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            return out
        if head.returncode == 0:
            out["commit"] = head.stdout.strip()
            out["dirty"] = bool(status.stdout.strip())
    return out

"""Build-time check, run as the last RUN step of every image: is the IREE that a worker will
use the one this image's flavor promises?

The classic failure of a source build on PYTHONPATH is being shadowed by an installed wheel
(or the reverse), and it is silent: everything imports, the wrong compiler runs. So the build
fails here unless `iree-compile`, `iree.compiler` and `iree.runtime` all come from the
intended place, and the answer is written to /opt/runner/iree-provenance.json for the run
manifest. Runs with the image's own python (3.10+), stdlib plus the installed runner.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

WHEELS = ("iree-base-compiler", "iree-base-runtime")
SECRETS_DIR = "/run/runner-build-secrets"
VENV_BIN = "/opt/venv/bin"


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _module(name: str, problems: list[str]) -> dict:
    try:
        module = importlib.import_module(name)
        version = importlib.import_module(f"{name}.version")
    except Exception as e:  # an ImportError, or a native library that fails to load
        problems.append(f"`import {name}` failed: {e}")
        return {"file": None}
    return {"file": module.__file__, "version": getattr(version, "VERSION", None),
            "commit": getattr(version, "REVISIONS", {}).get("IREE")}


def _under(path: str | None, root: str) -> bool:
    return path is not None and os.path.realpath(path).startswith(os.path.realpath(root) + "/")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--flavor", required=True, choices=["wheels", "source", "build-dir"])
    parser.add_argument("--tree", help="IREE build tree (source and build-dir flavors)")
    parser.add_argument("--expect-version", default="")
    parser.add_argument("--expect-commit", default="")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    problems: list[str] = []
    compiler = _module("iree.compiler", problems)
    runtime = _module("iree.runtime", problems)
    tool = shutil.which("iree-compile")
    dists = {name: _dist_version(name) for name in WHEELS}

    if args.flavor == "wheels":
        site = sysconfig.get_paths()["purelib"]
        expected = {"iree.compiler": site, "iree.runtime": site, "iree-compile": VENV_BIN}
        for name in WHEELS:
            if dists[name] != args.expect_version:
                problems.append(f"{name} is {dists[name]}, expected {args.expect_version}")
        if os.environ.get("PYTHONPATH"):
            problems.append(f"PYTHONPATH is set ({os.environ['PYTHONPATH']}) in a wheels image")
    else:
        if not args.tree:
            problems.append("--tree is required for the source and build-dir flavors")
            args.tree = "/nonexistent"
        tree = args.tree
        expected = {"iree.compiler": f"{tree}/compiler/bindings/python",
                    "iree.runtime": f"{tree}/runtime/bindings/python",
                    "iree-compile": f"{tree}/tools"}
        for name in WHEELS:
            if dists[name] is not None:
                problems.append(f"wheel {name} {dists[name]} is still installed; it must be "
                                "uninstalled after everything else")
    found = {"iree.compiler": compiler["file"], "iree.runtime": runtime["file"],
             "iree-compile": tool}
    for what, root in expected.items():
        path = found[what]
        if what == "iree-compile":
            ok = path is not None and os.path.dirname(path) == root
        else:
            ok = _under(path, root)
        print(f"verify: {what:14s} {path}  ({'ok' if ok else 'WRONG'}: expected under {root})")
        if not ok:
            problems.append(f"{what} comes from {path}, expected under {root}")

    commit_file = Path("/opt/iree/COMMIT")
    built_commit = commit_file.read_text().strip() if commit_file.is_file() else None
    if args.flavor == "source":
        wanted = args.expect_commit.lower()
        if built_commit is None:
            problems.append("/opt/iree/COMMIT is missing: the checkout step did not record it")
        elif re.fullmatch(r"[0-9a-f]{7,40}", wanted) and not built_commit.startswith(wanted):
            problems.append(f"built commit {built_commit} is not the requested {wanted}")

    version_text = None
    if tool:
        proc = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False)
        version_text = (proc.stdout + proc.stderr).strip()
        print(f"verify: iree-compile --version: {version_text.splitlines()[0:2]}")
        if proc.returncode != 0:
            problems.append(f"`{tool} --version` exited {proc.returncode}: {version_text[-500:]}")

    drivers: list[str] = []
    try:
        import iree.runtime as rt

        drivers = sorted(rt.query_available_drivers())
    except Exception as e:
        problems.append(f"iree.runtime cannot list drivers: {e}")

    # The network secrets live only in the build stages (fragments/python-base.Dockerfile).
    if os.path.exists(SECRETS_DIR):
        problems.append(f"{SECRETS_DIR} exists in the final image: build secrets leaked")
    for var in ("PIP_CONFIG_FILE", "PIP_CERT"):
        if os.environ.get(var, "").startswith(SECRETS_DIR):
            problems.append(f"{var} points at the build secrets in the final image")

    try:
        from runner.base.provenance import iree_provenance

        runner_view = iree_provenance()
    except Exception as e:
        problems.append(f"the runner package does not import: {e}")
        runner_view = None

    record = {
        "flavor": args.flavor,
        "expected": {"version": args.expect_version or None,
                     "commit": args.expect_commit or None, "locations": expected},
        "iree.compiler": compiler,
        "iree.runtime": runtime,
        "iree-compile": {"path": tool, "version_output": version_text},
        "wheels_installed": dists,
        "built_commit": built_commit,
        "runtime_drivers": drivers,
        "python": sys.version.split()[0],
        "runner": runner_view,
        "env": {k: os.environ.get(k) for k in ("PATH", "PYTHONPATH", "VIRTUAL_ENV")},
    }
    if problems:
        for p in problems:
            print(f"verify: FAIL: {p}", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    print(f"verify: ok ({args.flavor}); provenance in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Disk and download sizes of the runner's dependencies and of each extra, as pip installs them.

A throwaway venv per extra: the base dependencies (pyproject's `dependencies`, what a worker
needs) first, measured, then the extra on top; `du` gives the venv's size and `pip download`
into an empty directory the bytes pip fetches for it (dependencies included). The default
extras leave out `metrics` and `export`, which pull torch (GBs): name them to measure them.

    python3 scripts/measure_install_sizes.py [--extras compile,mlperf,docker,docs] [--record]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib
from measured import add_record_option, emit

REPO = Path(__file__).resolve().parent.parent


def megabytes(path: Path) -> int:
    out = subprocess.run(["du", "-sm", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "--quiet", "--disable-pip-version-check", *args],
                   check=True, capture_output=True)


def venv_with(tmp: Path, name: str, requirements: list[str]) -> Path:
    venv = tmp / name
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip(venv / "bin" / "python", "install", *requirements)
    return venv


def download_mb(tmp: Path, requirements: list[str]) -> int:
    target = Path(tempfile.mkdtemp(dir=tmp))
    pip(Path(sys.executable), "download", "--dest", str(target), *requirements)
    return megabytes(target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--extras", default="compile,mlperf,docker,docs")
    add_record_option(parser)
    args = parser.parse_args()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base, extras = project["dependencies"], project["optional-dependencies"]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        empty = megabytes(venv_with(tmp, "empty", ["pip"]))
        base_venv = megabytes(venv_with(tmp, "base", base))
        result = {"python": f"{sys.version_info.major}.{sys.version_info.minor}",
                  "empty_venv_mb": empty,
                  "base": {"venv_mb": base_venv, "download_mb": download_mb(tmp, base)}}
        for extra in args.extras.split(","):
            size = megabytes(venv_with(tmp, extra, [*base, *extras[extra]]))
            result[extra] = {"venv_mb": size, "adds_mb": size - base_venv,
                             "download_mb": download_mb(tmp, extras[extra])}
    emit("install_sizes", result, args.record)


if __name__ == "__main__":
    main()

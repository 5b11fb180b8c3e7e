"""The runner's own wheel, for the carry: a GPU machine without this checkout and without a
network installs the runner from the carry alone (`pip install --no-index --find-links`).

Built from the running package and the recipe it ships (runner/assets/project: pyproject.toml
and README.md), as the harness image is, so a runner installed from a wheel builds one too.
The wheel is pure Python: the optional C hex encoder (runner/rundir/_hex.c) is left out and
the accuracy log uses numpy's encoder, so one wheel installs on whatever Python the GPU
machine has, not only this machine's. The tiny model's FID reference statistics (26 MB of
the 33) are left out too: only scoring reads them, and scoring needs torch (the `metrics`
extra), which the check never installs (it runs with `--no-score`). setuptools is already
here (it built this install): no build isolation, no index.

`python -m runner.gpucheck.wheel --out DIR` is the prepare step that runs it.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from runner.base.errors import RunnerError, StepFailed, ToolFailed
from runner.base.paths import PACKAGE_DIR, PROJECT_FILES_DIR

DIST = "iree-sdxl-runner"
# The optional extension's table in pyproject.toml, up to the next table.
_EXTENSION = re.compile(r"(?ms)^\[\[tool\.setuptools\.ext-modules\]\].*?(?=^\[|\Z)")
LEFT_OUT = ("fid_statistics.npz",)  # scoring's, see above
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.egg-info", *LEFT_OUT)


def stage(project: Path) -> None:
    """The project a pure wheel is built from: the recipe less the extension, and the
    package with its shipped links copied as what they name."""
    recipe = (PROJECT_FILES_DIR / "pyproject.toml").read_text()
    project.mkdir(parents=True)
    (project / "pyproject.toml").write_text(_EXTENSION.sub("", recipe))
    shutil.copy2(PROJECT_FILES_DIR / "README.md", project / "README.md")
    shutil.copytree(PACKAGE_DIR, project / "runner", ignore=_SKIP)


def build_wheel(out: Path) -> Path:
    """The wheel, written into `out` (replacing an older one of the runner there)."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="runner-wheel-") as tmp:
        project, built = Path(tmp) / "project", Path(tmp) / "wheels"
        stage(project)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
             "--no-index", "--quiet", "-w", str(built), str(project)],
            capture_output=True, text=True, errors="replace", check=False)
        wheels = sorted(built.glob("*.whl"))
        if proc.returncode != 0 or len(wheels) != 1:
            raise ToolFailed(f"pip wheel exited {proc.returncode}: "
                             f"{(proc.stderr or proc.stdout).strip()[-1500:]}",
                             where="the runner's wheel",
                             fix="install setuptools>=74 in this Python (pip install "
                             "'setuptools>=74'), or prepare with --no-wheels")
        (wheel,) = wheels
        if not wheel.name.endswith("-py3-none-any.whl"):
            raise StepFailed(f"the runner's wheel {wheel.name} is not pure Python",
                             where=str(PROJECT_FILES_DIR / "pyproject.toml"),
                             fix="keep compiled extensions optional in the recipe")
        for old in out.glob(f"{DIST.replace('-', '_')}-*.whl"):
            old.unlink()
        return Path(shutil.move(str(wheel), out / wheel.name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runner.gpucheck.wheel", allow_abbrev=False,
                                     description="build the runner's pure wheel into --out")
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args(argv)
    try:
        wheel = build_wheel(Path(args.out))
    except RunnerError as e:
        print(e, file=sys.stderr)
        return 1
    print(f"runner wheel: {wheel} ({wheel.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

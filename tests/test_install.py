"""The real install: a wheel built from this checkout, installed into a fresh venv that cannot
reach the checkout, runs the README's commands from a temporary directory.

The wheel is built with pip from a copy of the project's source tree (what an sdist holds:
pyproject.toml, README.md, runner/ with its links to configs/, dockerfiles/, goldens/ and
scripts/), so the build writes nothing into the checkout. The venv has no pip of its own and
no site-packages but its own; the host's (torch and IREE, gigabytes) are added afterwards by
a `.pth` line naming them, which puts them on sys.path without running their own `.pth` files,
so the checkout's editable install (a `.pth` file there) never loads. The commands run with a
sanitized environment (no PYTHONPATH, no user site, PATH without the host interpreter's bin)
from an empty directory, and the first check proves the venv's runner is the one imported and
that no other `runner` package is on sys.path.

Fast checks of the same promise (every shipped link resolves, nothing reads REPO_DIR at run
time, no writer targets the installed package) run without building anything.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import site
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from repo_support import REPO

from runner.base.errors import RunnerError
from runner.base.paths import ASSETS_DIR, PACKAGE_DIR

# The project's source tree: what `pip wheel` / an sdist needs.
SOURCE_TREE = ("pyproject.toml", "README.md", "runner", "configs", "dockerfiles", "goldens",
               "scripts")
# Modules that may name REPO_DIR: tools that edit the checkout on purpose.
REPO_DIR_USERS = {"runner/base/paths.py"}


# --------------------------------------------------------------------------- fast checks

def test_every_shipped_link_names_a_file_of_the_repository():
    links = [p for p in ASSETS_DIR.rglob("*") if p.is_symlink()]
    assert {p.relative_to(ASSETS_DIR).as_posix() for p in links} == {
        "configs", "dockerfiles", "goldens", "scripts/docker_setup.sh",
        "project/pyproject.toml", "project/README.md"}
    for link in links:
        target = link.resolve()
        assert target.exists() and target.is_relative_to(REPO), link
        assert not target.is_relative_to(PACKAGE_DIR), link  # the top-level source of truth
    assert (ASSETS_DIR / "configs" / "mi325x.yaml").is_file()
    assert (ASSETS_DIR / "goldens" / "tiny" / "clip_cpu.json").is_file()


def test_only_checkout_tools_name_repo_dir():
    users = set()
    for path in PACKAGE_DIR.rglob("*.py"):
        if path.relative_to(PACKAGE_DIR).parts[0] == "assets":
            continue
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.Name) and n.id == "REPO_DIR" for n in ast.walk(tree)) or any(
                isinstance(n, ast.alias) and n.name == "REPO_DIR" for n in ast.walk(tree)):
            users.add(path.relative_to(REPO).as_posix())
    assert users == REPO_DIR_USERS


def test_writers_refuse_the_installed_package(monkeypatch, tmp_path, capsys):
    """Outside a checkout, the tools that regenerate shipped files refuse the package as
    their target before doing anything; a directory of the user's own is fine."""
    from runner.base import paths
    from runner.cli.main import main
    from runner.goldens import cli as goldens_cli
    from runner.goldens.tiny_suite import build_tiny_suite
    from runner.model.export.export_tiny import export_tiny

    monkeypatch.setattr(paths, "REPO_DIR", tmp_path)  # as in site-packages: no checkout
    assert paths.checkout_dir() is None
    # Targets that do not exist: were a writer to skip its check, it would write nowhere
    # that matters (and the folder is removed).
    targets = [ASSETS_DIR / "tiny" / "never-written", paths.GOLDENS_DIR / "never-written"]
    try:
        for target in targets:  # the check itself first: the writers call it before anything
            with pytest.raises(RunnerError, match="inside the installed runner package"):
                paths.refuse_package_write(target, "--out")
        for write, target in zip((export_tiny, build_tiny_suite), targets, strict=True):
            with pytest.raises(RunnerError, match="inside the installed runner package") as e:
                write(target)
            assert "--out" in e.value.fix
    finally:
        for target in targets:
            shutil.rmtree(target, ignore_errors=True)
    paths.refuse_package_write(tmp_path / "mine", "--out")  # no error
    # `goldens bump` with no path edits the shipped suite in place: refused before any
    # write (the write itself is disarmed, so a missing check fails here, not the checkout).
    monkeypatch.setattr(goldens_cli, "atomic_write_text",
                        lambda *a, **k: pytest.fail("bump wrote into the package"))
    assert main(["goldens", "bump", "--to", "v2.0"]) == 2
    assert "inside the installed runner package" in capsys.readouterr().err


# --------------------------------------------------------------------------- the wheel

@dataclass(frozen=True)
class Installed:
    source: Path  # the project's source tree the wheel was built from
    wheel: Path
    venv: Path
    workdir: Path
    env: dict[str, str]
    seconds: dict[str, float]
    package_files: dict[str, tuple[int, int]]  # the installed package as pip left it

    def run(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.venv / "bin" / "runner"), *args], cwd=self.workdir,
                              env=self.env, capture_output=True, text=True, timeout=timeout,
                              check=False)

    def python(self, code: str) -> str:
        proc = subprocess.run([str(self.venv / "bin" / "python"), "-c", code],
                              cwd=self.workdir, env=self.env, capture_output=True, text=True,
                              timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout


def _source_tree(dest: Path) -> None:
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.egg-info", "build")
    dest.mkdir(parents=True)
    for name in SOURCE_TREE:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, symlinks=True, ignore=skip)
        else:
            shutil.copy2(src, dest / name)


def _timed(seconds: dict[str, float], name: str, argv: list[str], **kw) -> None:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=900, **kw)
    seconds[name] = round(time.perf_counter() - start, 1)
    assert proc.returncode == 0, f"{argv}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("install")
    seconds: dict[str, float] = {}
    _source_tree(root / "src")
    # No build isolation: the build backend is the installed setuptools (pyproject's
    # build-system requirement), so the test needs no index.
    _timed(seconds, "pip wheel", [sys.executable, "-m", "pip", "wheel", "--no-deps",
                                  "--no-build-isolation", "--disable-pip-version-check",
                                  "--quiet", "-w", str(root / "wheels"), str(root / "src")])
    (wheel,) = (root / "wheels").glob("iree_sdxl_runner-*.whl")
    venv = root / "venv"
    _timed(seconds, "venv", [sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _timed(seconds, "pip install", [sys.executable, "-m", "pip", "--python", str(python),
                                    "install", "--no-deps", "--no-index",
                                    "--disable-pip-version-check", "--quiet", str(wheel)])
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; "
                                   "print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "zz_host_packages.pth").write_text(
        "".join(f"{p}\n" for p in site.getsitepackages()))
    workdir = root / "work"
    workdir.mkdir()
    keep = ("HOME", "LANG", "LC_ALL", "TMPDIR", "RUNNER_CACHE_DIR", "RUNNER_COMPILE_TIMEOUT")
    env = {k: v for k, v in os.environ.items() if k in keep or k.startswith(("SSL_", "PIP_"))}
    env.update(PATH=f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin", PYTHONNOUSERSITE="1",
               RUNNER_PROGRESS="plain", VIRTUAL_ENV=str(venv))
    return Installed(root / "src", wheel, venv, workdir, env, seconds,
                     _files(purelib / "runner"))


def _files(package: Path) -> dict[str, tuple[int, int]]:
    """Every file of the package but Python's bytecode cache: size and mtime."""
    return {str(p.relative_to(package)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


@pytest.mark.slow
def test_the_installed_wheel_runs_the_readme_from_anywhere(installed: Installed):
    # The wheel carries everything the runner reads at run time.
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    for shipped in ("configs/mi325x.yaml", "configs/models/sdxl.yaml",
                    "dockerfiles/wheels.Dockerfile", "dockerfiles/fragments/image.Dockerfile",
                    "dockerfiles/verify_iree.py", "scripts/docker_setup.sh",
                    "goldens/tiny/clip_cpu.json", "goldens/tiny-torch/modules/clip_cpu.json",
                    "goldens/tiny-bench/clip_cpu.json", "project/pyproject.toml",
                    "tiny/model.json"):
        assert f"runner/assets/{shipped}" in names, shipped
    assert not [n for n in names if "/assets/" in n and n.endswith("/")]

    # The venv's runner, and no other, is importable; the checkout is nowhere on sys.path.
    seen = json.loads(installed.python(
        "import json, sys, importlib.util, runner; "
        "print(json.dumps({'file': runner.__file__, 'path': sys.path, "
        "'finders': [type(f).__name__ for f in sys.meta_path]}))"))
    assert Path(seen["file"]).is_relative_to(installed.venv)
    with_runner = [p for p in seen["path"] if p and (Path(p) / "runner").is_dir()]
    assert len(with_runner) == 1 and Path(with_runner[0]).is_relative_to(installed.venv)
    assert not [p for p in seen["path"] if p and Path(p).resolve().is_relative_to(REPO)]
    assert not [f for f in seen["finders"] if "Editable" in f]

    # The wheel's requirements hold in this environment (the host's IREE, torch, ...).
    unmet = installed.python(
        "from importlib.metadata import requires, version\n"
        "from packaging.requirements import Requirement\n"
        "for text in requires('iree-sdxl-runner'):\n"
        "    r = Requirement(text)\n"
        "    if r.marker and not any(r.marker.evaluate({'extra': e})\n"
        "                            for e in ('', 'compile', 'metrics', 'docker')):\n"
        "        continue\n"
        "    if not r.specifier.contains(version(r.name), prereleases=True):\n"
        "        print(text, version(r.name))\n")
    assert unmet == ""

    version = installed.run("--version")
    assert version.returncode == 0 and "IREE: inside the tested range" in version.stdout

    unknown = installed.run("plan", "--profile", "mi999x")
    assert unknown.returncode == 2 and "mi325x" in unknown.stderr
    assert "RUNNER_PROFILE_PATH" in unknown.stderr

    plan = installed.run("plan", "--profile", "mi325x")
    assert plan.returncode == 0, plan.stderr
    assert re.search(r"^w000\s", plan.stdout, re.MULTILINE) and "workers" in plan.stdout

    start = time.perf_counter()
    run = installed.run("run", "--profile", "cpu", "--count", "4", "--out", "runs/main")
    installed.seconds["runner run"] = round(time.perf_counter() - start, 1)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "verdict: SUBSET" in run.stdout + run.stderr  # scored; 4 of 32 is not judged
    # recorded in the results store: the store's migrations ship in the wheel
    assert "history: 1 result(s) recorded in" in run.stderr, run.stderr[-3000:]
    main = installed.workdir / "runs" / "main"
    for name in ("report.html", "summary.md", "accuracy.json", "mlperf_log_accuracy.json"):
        assert (main / name).is_file(), name
    assert json.loads((main / "accuracy.json").read_text())["fid"]["score"] > 0

    goldens = installed.run("goldens", "check", "--out", "goldens")
    assert goldens.returncode == 0, goldens.stderr[-3000:]
    results = json.loads((installed.workdir / "goldens" / "results.json").read_text())["results"]
    assert sorted(r["status"] for r in results) == ["passed"] * 3
    for r in results:  # the shipped suite and the tiny model it names, from the venv
        assert Path(r["file"]).is_relative_to(installed.venv)
        assert f"{installed.venv}/" in r["commands"][0] and f"{REPO}/" not in r["commands"][0]

    image = installed.run("image", "build", "--iree", "wheels:3.13.0", "--dry-run",
                          "--keep-context")
    assert image.returncode == 0, image.stderr[-3000:]
    (build,) = [line for line in image.stdout.splitlines() if line.startswith("docker build")]
    context = Path(build.split()[-1])  # the staged build context, kept by a dry run
    staged = context / "project"
    assert (staged / "pyproject.toml").read_bytes() == \
        (installed.source / "pyproject.toml").read_bytes()  # the build recipe the wheel ships
    assert (staged / "runner" / "assets" / "configs" / "cpu.yaml").is_file()
    shutil.rmtree(context, ignore_errors=True)

    assert _files(Path(seen["file"]).parent) == installed.package_files  # nothing written
    print(f"wheel {installed.wheel.stat().st_size / 1e6:.1f} MB; seconds: {installed.seconds}")

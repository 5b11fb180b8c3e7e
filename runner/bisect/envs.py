"""One isolated, cached environment per IREE build: a venv (seconds, like IREE's bisect
script) or, with `--install docker`, the harness image.

A venv lives under `$RUNNER_CACHE_DIR/builds/<name>/` and is reused by every later bisect
and trend. A venv cannot be moved after it is made (its scripts name their interpreter by
absolute path), so it is not staged elsewhere and renamed: it is made in place under a
lock, and `build.json`, written atomically last, is the commit point; a directory without
it is a broken attempt, removed before the next one.

The runner's own code reaches the venv through PYTHONPATH, as a directory holding only a
link to this runner's package: the measurement then runs this very runner against the
build's `iree.compiler`/`iree.runtime`, and nothing of the host's site-packages (its own
IREE above all) can leak in. The venv gets the IREE packages and the worker's
requirements (numpy, pyyaml, regex), nothing else.

Per-commit packages (`commit:<sha>`) are PkgCI's wheels for that commit, fetched as IREE's
`install_packages_for_commit.py` does (`gh api .../pkgci.yml/runs?head_sha=` then
`gh run download <run> --name linux_x86_64_release_packages`) into
`$RUNNER_CACHE_DIR/pkgci/<sha>/`, or found in `--find-links DIR` as `DIR/<sha>/*.whl` (the
layout of IREE's script's own work dir, so its downloads are reused). A release's wheels
are `pip download`ed into `$RUNNER_CACHE_DIR/wheels/`. Every venv is keyed by the bytes of
the wheels it installs: the same packages, whether a PyPI release or a commit's, make one
venv.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from runner.base import shellscript
from runner.base.errors import BadInput, RunnerError
from runner.base.fileio import atomic_write_json, sha256_file
from runner.base.paths import PACKAGE_DIR, cache_dir
from runner.base.progress import echo
from runner.bisect.builds import COMPILER_PACKAGE, RUNTIME_PACKAGE, Build, Sources

BUILD_EXECUTORS = ("venv", "docker")
MARKER = "build.json"
PKGCI_REPO, PKGCI_WORKFLOW = "iree-org/iree", "pkgci.yml"
PKGCI_ARTIFACT = "linux_x86_64_release_packages"
SETUP_TIMEOUT_S = 1800
# The worker's requirements besides the IREE runtime (pyproject's `dependencies`).
WORKER_REQUIREMENTS = ("numpy>=1.26", "pyyaml>=6", "regex>=2023")
_WHEEL_VERSION = re.compile(r"^iree_base_compiler-([^-]+)-")
GLOB = "/*.whl"  # a commit's wheels before they are fetched: a shell glob in printed lines


class BuildUnavailable(RunnerError):
    """This build has no usable environment (no package, a failed install or build): the
    bisection skips it, as `git bisect skip` does."""


@dataclass(frozen=True)
class Setup:
    """How a build's environment is made: the exact commands, in order (a dry run prints
    them), and where it will live."""

    build: Build
    executor: str
    commands: list[list[str]]
    root: Path | None = None  # the venv's directory (venv executor)
    image_source: str | None = None  # the harness image's `--from` (docker executor)
    notes: list[str] = field(default_factory=list)
    wheels: list[Path] = field(default_factory=list)  # per-commit packages found


@dataclass(frozen=True)
class BuildEnv:
    """A ready environment: the interpreter and tools of one build."""

    build: Build
    executor: str
    python: str  # runs `python -m runner...` with the build's IREE
    bin_dir: str | None = None  # first on PATH: iree-compile, iree-run-module, ...
    pythonpath: tuple[str, ...] = ()
    image: str | None = None  # docker: the harness image tag
    image_id: str | None = None
    root: str | None = None
    cached: bool = False
    seconds: float = 0.0

    def environ(self) -> dict[str, str]:
        """The environment the build's commands run with (venv executor)."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        if self.bin_dir:
            env["PATH"] = os.pathsep.join([self.bin_dir, env.get("PATH", "")])
        if self.root:
            env["VIRTUAL_ENV"] = self.root
        env["PYTHONPATH"] = os.pathsep.join(self.pythonpath)
        env["PYTHONNOUSERSITE"] = "1"
        env["RUNNER_CACHE_DIR"] = str(cache_dir())
        env["RUNNER_BUILD"] = self.build.spec
        return env

    def to_dict(self) -> dict:
        return {"executor": self.executor, "python": self.python, "bin_dir": self.bin_dir,
                "image": self.image, "image_id": self.image_id, "root": self.root,
                "cached": self.cached, "seconds": round(self.seconds, 3)}


def runner_source_dir(create: bool = True) -> Path:
    """A directory holding only `runner` (a link to this runner's package), for the
    PYTHONPATH of build environments: this runner's code, no other host package."""
    digest = hashlib.sha256(str(PACKAGE_DIR).encode()).hexdigest()[:16]
    root = cache_dir() / "runner-src" / digest
    link = root / "runner"
    if create and not link.exists():
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".runner.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(PACKAGE_DIR, target_is_directory=True)
        tmp.replace(link)
    return root


def build_tree_paths(tree: Path) -> tuple[str, list[str]]:
    """A CMake build tree's tools dir and Python bindings: used where they are, with the
    interpreter running the runner (the bindings were built for it)."""
    return str(tree / "tools"), [str(tree / "compiler/bindings/python"),
                                 str(tree / "runtime/bindings/python")]


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def packages_dir(build: Build, sources: Sources) -> Path:
    """Where a build's wheels are, or will be downloaded to: a release's from its index
    (one dir per index, since two indexes may serve other bytes), a commit's PkgCI wheels
    in `--find-links DIR/<sha>/` or the cache."""
    if build.kind == "wheels":
        index = _key(sources.find_links, sources.pre)[:8]
        return cache_dir() / "wheels" / f"{build.version}-{index}"
    assert build.commit is not None
    if sources.find_links and "://" not in sources.find_links:
        return Path(sources.find_links) / build.commit
    return cache_dir() / "pkgci" / build.commit


def fetch_commands(build: Build, dest: Path, sources: Sources) -> list[list[str]]:
    """How the build's wheels are fetched. A release: `pip download` of the two packages
    (pip's own index configuration, plus `--find-links`/`--pre`). A commit: IREE's
    install_packages_for_commit.py, as commands: the pkgci workflow's latest run for the
    commit, then its release-packages artifact; the second needs the first's answer
    (`.workflow_runs[-1].id`), shown in a dry run as `$RUN_ID`."""
    if build.kind == "wheels":
        return [[_python(), "-m", "pip", "download", "--quiet", "--no-deps",
                 "--disable-pip-version-check", "-d", str(dest),
                 f"{COMPILER_PACKAGE}=={build.version}", f"{RUNTIME_PACKAGE}=={build.version}",
                 *sources.pip_index_args()]]
    return [["gh", "api", "-H", "Accept: application/vnd.github+json",
             "-H", "X-GitHub-Api-Version: 2022-11-28",
             f"/repos/{PKGCI_REPO}/actions/workflows/{PKGCI_WORKFLOW}/runs?head_sha="
             f"{build.commit}", "--jq", ".workflow_runs[-1].id"],
            ["gh", "run", "download", "--repo", PKGCI_REPO, "$RUN_ID", "--name",
             PKGCI_ARTIFACT, "--dir", str(dest)]]


def _wheels(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.whl")) if directory.is_dir() else []


def venv_root(name: str) -> Path:
    return cache_dir() / "builds" / name


def _python() -> str:
    """The interpreter venvs are made from: the one running the runner (the worker code
    and IREE's cp3XX wheels must agree on it)."""
    return sys.executable


def plan_setup(build: Build, sources: Sources, executor: str = "venv",
               from_source: bool = False) -> Setup:
    """What making this build's environment takes, without doing any of it."""
    if executor not in BUILD_EXECUTORS:
        raise BadInput(f"unknown install mode {executor!r}", where="--install",
                       fix=f"use one of {', '.join(BUILD_EXECUTORS)}")
    if executor == "docker" or build.kind == "source" or from_source:
        return _plan_image(build, sources, from_source)
    if build.kind == "build-dir":
        return Setup(build, "venv", [], notes=[f"the build tree {build.path} as it is"])
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    directory = packages_dir(build, sources)
    wheels = _wheels(directory)
    commands: list[list[str]] = []
    notes = []
    if not wheels:
        if build.kind == "commit" and sources.find_links:
            notes.append(f"no packages in {directory}")
        else:
            commands += fetch_commands(build, directory, sources)
    if wheels:
        # keyed by the packages' bytes: the same wheels, from PyPI or a commit, one venv
        key = _key([sha256_file(w) for w in wheels], py, WORKER_REQUIREMENTS)
        versions = sorted({m.group(1) for w in wheels if (m := _WHEEL_VERSION.match(w.name))})
        name = f"iree-{'-'.join(versions) or 'wheels'}-{key[:12]}"
    else:
        name = f"iree-{build.label}-KEY"
        notes.append("KEY: known once the wheels are fetched (a hash of their bytes)")
    root = venv_root(name)
    commands += _venv_commands(root, [str(w) for w in wheels] or [f"{directory}{GLOB}"])
    return Setup(build, "venv", commands, root, notes=notes, wheels=wheels)


# Installed without bytecode: iree-base-compiler's dependencies for its Python frontends,
# which no probe imports; compiling their thousands of files took ~7 s of CPU, most of the
# Python bytecode a build's venv was made with.
NOT_IMPORTED = ("sympy", "mpmath")


def _venv_commands(root: Path, install: list[str]) -> list[list[str]]:
    """The venv, the build's wheels and the worker's requirements installed in it, then the
    bytecode of everything a probe may import (pip's own step, less NOT_IMPORTED)."""
    venv_python = str(root / "venv" / "bin" / "python")
    site = f"{root / 'venv' / 'lib'}/python{sys.version_info.major}.{sys.version_info.minor}" \
        "/site-packages"
    return [[_python(), "-m", "venv", str(root / "venv")],
            [venv_python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--no-compile", *install, *WORKER_REQUIREMENTS],
            [venv_python, "-m", "compileall", "-q", "-x", f"/({'|'.join(NOT_IMPORTED)})/",
             site]]


def _plan_image(build: Build, sources: Sources, from_source: bool) -> Setup:
    from runner.docker.image import parse_source

    if build.kind == "commit":
        if not from_source:
            raise BadInput("per-commit packages install into a venv, not the harness image",
                           where="--install docker",
                           fix="drop --install docker, or add --build to build each commit "
                           "from source in the harness image")
        spec = f"source:{build.commit}"
    elif build.kind == "wheels":
        if from_source:
            raise BadInput("--build builds commits from source", where="--build",
                           fix="use commit:<sha> builds with --repo, or drop --build")
        spec = build.spec
    else:
        spec = build.spec
    url = sources.find_links if build.kind == "wheels" else None
    if url and "://" not in url:
        raise BadInput("the harness image installs wheels from a find-links URL, not a "
                       "directory", where="--find-links",
                       fix="serve the directory over http, or use --install venv")
    source = parse_source(spec, find_links=url, where=build.spec)
    argv = ["runner", "image", "build", "--iree", source.spec]
    if url:
        argv += ["--find-links", url]
    return Setup(build, "docker", [argv], image_source=source.spec)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One process makes a build's environment at a time; the others wait and reuse it."""
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f"{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _run_setup(argv: list[str], log: Path, build: Build) -> None:
    with open(log, "a") as out:
        out.write(f"$ {shellscript.join(argv)}\n")
        out.flush()
        try:
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False,
                                  timeout=SETUP_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise BuildUnavailable(f"{argv[0]} failed: {e}", where=build.spec,
                                   fix=f"see {log}") from e
    if proc.returncode != 0:
        tail = [line for line in log.read_text(errors="replace").splitlines()
                if line.strip() and not line.startswith("WARNING: Location")][-6:]
        raise BuildUnavailable(f"`{' '.join(argv[:6])} ...` failed (exit {proc.returncode}): "
                               + " | ".join(tail), where=build.spec,
                               fix=f"see {log}")


def _fetch(build: Build, directory: Path, log: Path, sources: Sources) -> list[Path]:
    """The build's wheels, downloaded into a staging dir that becomes `directory` only
    once it holds them: a release's with pip, a commit's with gh (IREE's script's calls)."""
    staged = directory.with_name(f".{directory.name}.{os.getpid()}")
    shutil.rmtree(staged, ignore_errors=True)
    try:
        _download(build, staged, log, sources)
        shutil.rmtree(directory, ignore_errors=True)  # an empty leftover
        staged.replace(directory)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return _wheels(directory)


def _download(build: Build, staged: Path, log: Path, sources: Sources) -> None:
    if build.kind == "wheels":
        _run_setup(fetch_commands(build, staged, sources)[0], log, build)
        return
    if shutil.which("gh") is None:
        raise BuildUnavailable("no packages, and `gh` is not on PATH to fetch PkgCI's",
                               where=build.spec,
                               fix="install gh and `gh auth login`, or pass --find-links DIR "
                               "holding DIR/<sha>/*.whl")
    api, download = fetch_commands(build, staged, sources)
    proc = subprocess.run(api, capture_output=True, text=True, check=False, timeout=300)
    run_id = proc.stdout.strip()
    if proc.returncode != 0 or not run_id.isdigit():
        raise BuildUnavailable(f"no pkgci run for this commit: {proc.stderr.strip()[-300:]}",
                               where=build.spec, fix="pick a commit PkgCI built (a merged "
                               "commit of main), or --build it from source")
    _run_setup([*download[:5], run_id, *download[6:-1], str(staged)], log, build)
    if not _wheels(staged):
        raise BuildUnavailable(f"pkgci run {run_id} has no wheels", where=build.spec,
                               fix="--build the commit from source instead")


def ensure_env(build: Build, sources: Sources, executor: str = "venv",
               from_source: bool = False, base_image: str | None = None) -> BuildEnv:
    """The build's environment, from the cache or made now; BuildUnavailable when it cannot
    be had (the bisection skips the build)."""
    setup = plan_setup(build, sources, executor, from_source)
    start = time.perf_counter()
    if setup.executor == "docker":
        return _ensure_image(setup, base_image, start)
    if build.kind == "build-dir":
        assert build.path is not None
        bin_dir, paths = build_tree_paths(Path(build.path))
        return BuildEnv(build, "venv", _python(), bin_dir, (*paths, str(runner_source_dir())),
                        cached=True)
    if not setup.wheels:
        if build.kind == "commit" and sources.find_links:
            raise BuildUnavailable(f"no packages for this commit in {sources.find_links}",
                                   where=build.spec,
                                   fix=f"put its wheels in {packages_dir(build, sources)}/")
        directory = packages_dir(build, sources)
        with _locked(directory):  # another bisect may be fetching the same packages
            if not _wheels(directory):
                _fetch(build, directory, directory.parent / f"{directory.name}.log", sources)
        setup = plan_setup(build, sources, executor, from_source)
    assert setup.root is not None
    root = setup.root
    with _locked(root):
        cached = (root / MARKER).is_file()
        if not cached:
            shutil.rmtree(root, ignore_errors=True)  # a broken earlier attempt
            root.mkdir(parents=True)
            log = root / "setup.log"
            echo(f"bisect: making the environment of {build.label} in {root}")
            for argv in setup.commands:
                _run_setup(argv, log, build)
            freeze = subprocess.run([str(root / "venv/bin/python"), "-m", "pip", "freeze"],
                                    capture_output=True, text=True, check=False).stdout
            atomic_write_json(root / MARKER, {
                "build": build.to_dict(), "commands": setup.commands,
                "wheels": {w.name: sha256_file(w) for w in setup.wheels},
                "seconds": round(time.perf_counter() - start, 3),
                "packages": freeze.split()})
    seconds = time.perf_counter() - start
    return BuildEnv(build, "venv", str(root / "venv" / "bin" / "python"),
                    str(root / "venv" / "bin"), (str(runner_source_dir()),),
                    root=str(root / "venv"), cached=cached, seconds=seconds)


def _ensure_image(setup: Setup, base_image: str | None, start: float) -> BuildEnv:
    from runner.docker.image import DEFAULT_BASE_IMAGE, build_image, parse_source

    assert setup.image_source is not None
    url = setup.commands[0][-1] if "--find-links" in setup.commands[0] else None
    try:
        built = build_image(parse_source(setup.image_source, find_links=url),
                            base_image=base_image or DEFAULT_BASE_IMAGE)
    except RunnerError as e:
        raise BuildUnavailable(f"the harness image could not be built: {e}",
                               where=setup.build.spec,
                               fix=f"run `{shellscript.join(setup.commands[0])}` by hand to "
                               "see it fail" if setup.commands else
                               "run `runner image build` for it by hand") from e
    return BuildEnv(setup.build, "docker", "python3", image=built.tag,
                    image_id=built.image_id, cached=built.cached,
                    seconds=time.perf_counter() - start)


def env_prefix(bin_dir: str, pythonpath: list[str]) -> str:
    """The variables a build's command runs with, as a shell prefix (printed commands)."""
    return (f"PATH={shellscript.quote(bin_dir)}:\"$PATH\" "
            f"PYTHONPATH={shellscript.quote(os.pathsep.join(pythonpath))} PYTHONNOUSERSITE=1 ")


def setup_lines(setup: Setup) -> list[str]:
    """The setup commands as shell lines (a dry run, reproduce.sh)."""
    lines = [f"# {note}" for note in setup.notes]
    for argv in setup.commands:
        if "$RUN_ID" in argv:
            i = argv.index("$RUN_ID")
            lines.append(f"{shellscript.join(argv[:i])} \"$RUN_ID\" "
                         f"{shellscript.join(argv[i + 1:])}")
        elif argv[:2] == ["gh", "api"]:
            lines.append(f"RUN_ID=$({shellscript.join(argv)})")
        else:
            lines.append(" ".join(f"{shellscript.quote(w[:-len(GLOB)])}{GLOB}"
                                  if w.endswith(GLOB) else shellscript.quote(w) for w in argv))
    return lines

"""Build the runner's docker image with IREE from pinned wheels, a source commit, or an
existing build tree, behind a content-addressed tag.

The tag is a hash of everything that decides the image: the assembled Dockerfile, the build
args and labels, every file of the staged build context (the project, the verify script, a
build tree) and the base image's ID. So an unchanged build is one `images.get` (seconds), and
a result that records the tag records exactly what ran. The network settings a build needs
(CA bundle, pip index, proxies) are left out of the hash: they change how packages are
fetched, not which ones (the versions are pinned), and they may hold credentials.

The flavors share one Dockerfile skeleton (dockerfiles/*.Dockerfile with
`# runner:include` fragments): each flavor defines its `iree-python`, `iree-tree` and
`final-venv` stages around the shared python-base, worker and image stages. They are
assembled into one file here because the engine's classic builder (the only one docker-py
can drive) builds every stage of a Dockerfile, so a single file with all three flavors would
run a source build to make a wheels image.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.base.errors import BadInput, RunnerError, StepFailed, ToolFailed
from runner.base.fileio import sha256_file
from runner.base.paths import DOCKERFILES_DIR, PACKAGE_DIR, PROJECT_FILES_DIR, cache_dir
from runner.docker.buildenv import BuildNetwork, host_build_network, mask
from runner.docker.engine import BUILD_READ_TIMEOUT_S, connect
from runner.inputs.iree_build import IMAGE_KINDS, parse_build_spec

FLAVORS = IMAGE_KINDS
IMAGE_REPO = "iree-sdxl-runner"
DEFAULT_BASE_IMAGE = "runner-base:bookworm"
DEFAULT_GIT_URL = "https://github.com/iree-org/iree.git"
LABEL = "org.iree-sdxl-runner."
PROVENANCE_PATH = "/opt/runner/iree-provenance.json"
IREE_TREE_PATH = "/opt/iree/build"

# CMake names of the compiler targets and runtime drivers a source build may enable.
TARGET_BACKENDS = {"llvm-cpu": "LLVM_CPU", "rocm": "ROCM", "cuda": "CUDA",
                   "vulkan-spirv": "VULKAN_SPIRV", "vmvx": "VMVX"}
HAL_DRIVERS = {"local-sync": "LOCAL_SYNC", "local-task": "LOCAL_TASK", "hip": "HIP",
               "cuda": "CUDA", "vulkan": "VULKAN"}
# The lab default: CPU for host-side checks, ROCm/HIP for the MI300-series GPUs.
DEFAULT_BACKENDS = ("llvm-cpu", "rocm")
IMAGE_HAL_DRIVERS = ("local-sync", "local-task", "hip")

_URL = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~%/+=-]*)?")
_TAG_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_NAME = re.compile(r"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
                   r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")
# Project files a `pip install .` reads; tests, docs and scripts do not change the image.
_PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg", "MANIFEST.in", "README.md",
                  "LICENSE")
_SKIP_NAMES = {"__pycache__", ".pytest_cache", ".ruff_cache", "CMakeFiles"}
_SKIP_SUFFIXES = (".pyc", ".pyo", ".o", ".obj", ".a", ".egg-info")
# A checkout's compiled extension (runner/rundir/_hex*.so) is the host interpreter's: the image's
# wheel build compiles its own, or goes without where the base image has no compiler.
_PROJECT_SKIP_SUFFIXES = (*_SKIP_SUFFIXES, ".so")
# Parts of a build tree a worker uses. lib/ holds libIREECompiler.so for tools/ in a real
# build (tools are linked with RPATH $ORIGIN/../lib).
_TREE_PARTS = ("tools", "lib", "compiler/bindings/python", "runtime/bindings/python")
# Context paths that feed the build but not the hash (see the module docstring).
_UNHASHED = ("runner-build/secrets", "ccache")

Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- what to build

@dataclass(frozen=True)
class ImageSource:
    """Where the image's IREE comes from, validated; `spec` is its canonical spelling
    (runner.inputs.iree_build)."""

    flavor: str
    spec: str
    version: str | None = None
    find_links: str | None = None
    commit: str | None = None
    git_url: str | None = None
    build_dir: Path | None = None
    backends: tuple[str, ...] = DEFAULT_BACKENDS
    drivers: tuple[str, ...] = IMAGE_HAL_DRIVERS


def parse_source(spec: str, *, find_links: str | None = None, git_url: str | None = None,
                 backends: tuple[str, ...] | None = None,
                 drivers: tuple[str, ...] | None = None,
                 where: str = "--iree") -> ImageSource:
    """A build an image can hold (runner.inputs.iree_build's grammar, less `commit:`), with
    the options of its flavor checked: `--find-links` for wheels, `--git-url`, `--backends`
    and `--drivers` for a source build."""
    build = parse_build_spec(spec, where, kinds=FLAVORS)
    flavor = build.kind
    if flavor != "wheels" and find_links:
        raise BadInput("--find-links applies to wheels: builds only", where="--find-links",
                       fix=f"drop --find-links, or name a wheels:VERSION build with {where}")
    if flavor != "source" and (git_url or backends or drivers):
        raise BadInput("--git-url, --backends and --drivers apply to source: builds only",
                       where=where, fix=f"drop them, or use source:<sha> instead of {spec}")
    if flavor == "wheels":
        if find_links is not None:
            _check_url(find_links, "--find-links")
        return ImageSource("wheels", build.text, version=build.version,
                           find_links=find_links or None)
    if flavor == "source":
        url = git_url or DEFAULT_GIT_URL
        _check_url(url, "--git-url")
        return ImageSource("source", build.text, commit=build.commit, git_url=url,
                           backends=_names(backends or DEFAULT_BACKENDS, TARGET_BACKENDS,
                                           "--backends"),
                           drivers=_names(drivers or IMAGE_HAL_DRIVERS, HAL_DRIVERS, "--drivers"))
    return ImageSource("build-dir", build.text, build_dir=build.path)


def _check_url(url: str, where: str) -> None:
    host = re.match(r"[A-Za-z][A-Za-z0-9+.-]*://([^/]*)", url)
    if host and "@" in host.group(1):
        raise BadInput(f"{mask(url)} carries credentials", where=where,
                       fix="put credentials in pip's config (passed to builds as a secret), "
                       "not in a build arg")
    if not _URL.fullmatch(url):
        raise BadInput(f"{mask(url)!r} is not a plain http(s) URL", where=where,
                       fix="use e.g. https://iree.dev/pip-release-links.html")


def _names(given: tuple[str, ...], known: dict[str, str], where: str) -> tuple[str, ...]:
    out = []
    for name in given:
        if name not in known:
            raise BadInput(f"unknown name {name!r}", where=where,
                           fix=f"use a comma list of: {', '.join(known)}")
        if name not in out:
            out.append(name)
    return tuple(out)


# --------------------------------------------------------------------------- the plan

@dataclass(frozen=True)
class BuildPlan:
    """A staged build: everything `docker build` gets, and the tag it will carry."""

    source: ImageSource
    base_image: str
    base_image_id: str | None
    context_dir: Path
    build_args: dict[str, str]
    labels: dict[str, str]
    inputs_hash: str
    tag: str
    extra_tags: tuple[str, ...] = ()
    proxies: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    no_cache: bool = False

    @property
    def dockerfile(self) -> Path:
        return self.context_dir / "Dockerfile"

    def command(self) -> list[str]:
        """The `docker build` argv equivalent to what the SDK is asked to do.

        Proxies appear by name only: the docker CLI then takes their values from the
        environment, so a proxy URL with a password is never printed.
        """
        argv = ["docker", "build", "--network", "host", "--rm", "--force-rm",
                "-f", str(self.dockerfile)]
        if self.no_cache:
            argv.append("--no-cache")
        for tag in (self.tag, *self.extra_tags):
            argv += ["-t", tag]
        for key, value in self.build_args.items():
            argv += ["--build-arg", f"{key}={value}"]
        for key in self.proxies:
            argv += ["--build-arg", key]
        for key, value in self.labels.items():
            argv += ["--label", f"{key}={value}"]
        argv.append(str(self.context_dir))
        return argv


@dataclass(frozen=True)
class BuildResult:
    tag: str
    image_id: str | None
    cached: bool
    seconds: float
    plan: BuildPlan
    dry_run: bool = False


def assemble_dockerfile(flavor: str) -> str:
    """dockerfiles/<flavor>.Dockerfile with its `# runner:include` lines expanded."""
    if flavor not in FLAVORS:
        raise BadInput(f"unknown flavor {flavor!r}", fix=f"use one of {', '.join(FLAVORS)}")
    top = DOCKERFILES_DIR / f"{flavor}.Dockerfile"
    if not top.is_file():
        raise StepFailed(f"{top} is missing", where=str(top),
                         fix="the runner's installation is incomplete: reinstall it")
    header = (f"# Assembled by runner.docker.image from dockerfiles/{flavor}.Dockerfile; "
              "edit that, not this.\n")
    return header + _expand(top, depth=0)


def _expand(path: Path, depth: int) -> str:
    if depth > 4:
        raise BadInput("`# runner:include` nests too deep", where=str(path),
                       fix="include fragments that do not include each other in a loop")
    out = []
    for line in path.read_text().splitlines(keepends=True):
        m = re.fullmatch(r"# runner:include (\S+)\s*", line)
        if m:
            part = (DOCKERFILES_DIR / m.group(1)).resolve()
            if not part.is_relative_to(DOCKERFILES_DIR.resolve()) or not part.is_file():
                raise BadInput(f"include {m.group(1)!r} is not a file in dockerfiles/",
                               where=str(path), fix="name a fragment in dockerfiles/")
            out.append(f"# >>> {m.group(1)}\n{_expand(part, depth + 1)}# <<< {m.group(1)}\n")
        else:
            out.append(line)
    return "".join(out)


def plan_build(source: ImageSource, *, base_image: str = DEFAULT_BASE_IMAGE,
               tags: tuple[str, ...] = (), client: Any = None,
               ccache_dir: Path | None = None, network: BuildNetwork | None = None,
               require_base: bool = True, project_dir: Path | None = None,
               contexts: Path | None = None) -> BuildPlan:
    """Stage the build context under `contexts` (default: the cache's) and compute the
    content tag.

    `project_dir` is a runner project (pyproject.toml and runner/) installed into the image;
    by default this runner itself, from its package and its shipped build recipe, so an
    installed runner builds images as a checkout does (`_project_paths`).

    `client` may be None only when `require_base` is False (a dry run with no engine): the
    base image's ID is then unknown and the tag is computed without it, which the notes say.
    """
    for tag in tags:
        validate_tag(tag)
    validate_tag(base_image, where="--base-image")
    notes: list[str] = []
    base_id = _base_image_id(client, base_image, require_base)
    if base_id is None:
        notes.append(f"base image {base_image} is not in a reachable engine: the tag below "
                     "omits its ID and will differ from the real build's")
    network = network or host_build_network()
    notes.extend(network.notes)
    if source.flavor == "source":
        source = _pin_ref(source, notes)

    contexts = contexts or cache_dir() / "docker" / "contexts"
    contexts.mkdir(parents=True, exist_ok=True)
    staging = contexts / f".staging-{os.getpid()}-{time.monotonic_ns()}"
    try:
        notes.extend(_stage(staging, source, network, ccache_dir, project_dir))
        build_args = _build_args(source, base_image)
        labels = _labels(source, base_image, base_id, project_dir)
        digest = _inputs_hash(staging, build_args, labels, base_image, base_id)
        labels[LABEL + "inputs-sha256"] = digest
        final = _publish_context(staging, f"{source.flavor}-{digest[:12]}")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return BuildPlan(source=source, base_image=base_image, base_image_id=base_id,
                     context_dir=final, build_args=build_args, labels=labels,
                     inputs_hash=digest, tag=content_tag(source, digest),
                     extra_tags=tuple(t for t in tags if t != content_tag(source, digest)),
                     proxies=dict(network.proxies), notes=tuple(notes))


def _publish_context(staging: Path, stem: str) -> Path:
    """Renames a staged context to its name beside it. Named by hash and owner: two builds
    of the same inputs at once must not delete each other's context, and a context whose
    owner has exited is cleared here."""
    contexts = staging.parent
    _clear_stale_contexts(contexts, stem)
    final = contexts / f"{stem}-{os.getpid()}"
    if final.exists():
        shutil.rmtree(final)
    staging.rename(final)
    return final


def _clear_stale_contexts(contexts: Path, stem: str) -> None:
    for old in contexts.glob(f"{stem}-*"):
        pid = old.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def validate_tag(tag: str, where: str = "--tag") -> str:
    """NAME[:TAG] or NAME@sha256:DIGEST, as docker accepts them."""
    name, at, digest = tag.partition("@")
    if at:
        ok = bool(_NAME.fullmatch(name) and re.fullmatch(r"sha256:[0-9a-f]{64}", digest))
    else:
        last = tag.split("/")[-1]
        name, _, version = tag.rpartition(":") if ":" in last else (tag, "", "")
        ok = bool(_NAME.fullmatch(name) and (not version or _TAG_PART.fullmatch(version)))
    if not ok:
        raise BadInput(f"{tag!r} is not a valid image reference", where=where,
                       fix="use NAME[:TAG] with a lower-case name, e.g. my-runner:dev")
    return tag


def content_tag(source: ImageSource, digest: str) -> str:
    """`iree-sdxl-runner:<flavor>-<what>-<hash12>`: readable, and unique per input set."""
    if source.flavor == "wheels":
        what = source.version or ""
    elif source.flavor == "source":
        what = (source.commit or "")[:12]
    else:
        what = _tree_version(source.build_dir)[0] or "tree"
    what = re.sub(r"[^A-Za-z0-9_.-]+", "-", what).strip(".-")[:60]
    return f"{IMAGE_REPO}:{source.flavor}-{what}-{digest[:12]}" if what \
        else f"{IMAGE_REPO}:{source.flavor}-{digest[:12]}"


def _pin_ref(source: ImageSource, notes: list[str]) -> ImageSource:
    """A branch or tag resolved to the commit it names now, when the remote answers.

    The content tag hashes the build args, so a build of `source:main` would otherwise be
    a cache hit forever after, whatever main has become. A full SHA needs nothing; a short
    one is a fixed commit already. Without network the ref is built as given, and said so.
    """
    ref = source.commit or ""
    if re.fullmatch(r"[0-9a-f]{7,40}", ref):
        return source
    url = source.git_url or DEFAULT_GIT_URL
    try:
        proc = subprocess.run(
            ["git", "ls-remote", "--", url, f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}",
             f"refs/heads/{ref}"],
            capture_output=True, text=True, timeout=30, check=False,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
        lines = [line.split("\t") for line in proc.stdout.splitlines() if "\t" in line]
    except (OSError, subprocess.TimeoutExpired):
        proc, lines = None, []
    if not lines:
        why = "git ls-remote failed" if proc is None else "the remote did not resolve it"
        notes.append(f"ref {ref!r} is not pinned to a commit ({why}): the content tag cannot "
                     "see where it points; pass a SHA, or --no-cache to rebuild")
        return source
    # A peeled tag (`^{}`) names the commit an annotated tag points at; prefer it.
    by_ref = {name: sha for sha, name in lines}
    sha = by_ref.get(f"refs/tags/{ref}^{{}}") or by_ref.get(f"refs/tags/{ref}") \
        or by_ref.get(f"refs/heads/{ref}")
    notes.append(f"ref {ref!r} resolved to {sha} at {mask(url)}")
    return dataclasses.replace(source, commit=sha, spec=f"{source.spec} ({sha})")


def _base_image_id(client: Any, base_image: str, required: bool) -> str | None:
    if client is None:
        if required:
            client = connect()
        else:
            return None
    from docker.errors import ImageNotFound

    try:
        return str(client.images.get(base_image).id)
    except ImageNotFound:
        if not required:
            return None
        setup = "run scripts/docker_setup.sh, which imports it" \
            if base_image == DEFAULT_BASE_IMAGE else f"`docker pull {base_image}` first"
        raise BadInput(f"base image {base_image} is not in the docker engine",
                       where="--base-image", fix=setup) from None


def _build_args(source: ImageSource, base_image: str) -> dict[str, str]:
    args = {"BASE_IMAGE": base_image}
    if source.flavor == "wheels":
        args["IREE_VERSION"] = source.version or ""
        args["IREE_FIND_LINKS"] = source.find_links or ""
    elif source.flavor == "source":
        args["IREE_GIT_URL"] = source.git_url or DEFAULT_GIT_URL
        args["IREE_COMMIT"] = source.commit or ""
        args["IREE_TARGET_BACKENDS"] = " ".join(TARGET_BACKENDS[b] for b in source.backends)
        args["IREE_HAL_DRIVERS"] = " ".join(HAL_DRIVERS[d] for d in source.drivers)
        args["CMAKE_BUILD_TYPE"] = "Release"
    return args


def _labels(source: ImageSource, base_image: str, base_id: str | None,
            project_dir: Path | None) -> dict[str, str]:
    labels = {
        LABEL + "flavor": source.flavor,
        # A build tree's host path is not recorded: it says nothing about the image's
        # content (which the hash covers) and would make the same tree a new image per path.
        LABEL + "source": source.spec if source.flavor != "build-dir" else "build-dir",
        LABEL + "base-image": base_image,
        LABEL + "base-image-id": base_id or "",
        LABEL + "runner-version": _project_version(project_dir),
        LABEL + "provenance-file": PROVENANCE_PATH,
    }
    if source.flavor == "wheels":
        labels[LABEL + "iree.version"] = source.version or ""
        if source.find_links:
            labels[LABEL + "iree.find-links"] = source.find_links
    elif source.flavor == "source":
        labels[LABEL + "iree.commit"] = source.commit or ""
        labels[LABEL + "iree.git-url"] = source.git_url or ""
        labels[LABEL + "iree.target-backends"] = ",".join(source.backends)
        labels[LABEL + "iree.hal-drivers"] = ",".join(source.drivers)
    else:
        version, commit = _tree_version(source.build_dir)
        labels[LABEL + "iree.version"] = version or "unknown"
        labels[LABEL + "iree.commit"] = commit or "unknown"
    return labels


def _project_paths(project_dir: Path | None) -> tuple[Path, Path]:
    """Where the project's files (pyproject.toml, README.md) and its `runner` package are:
    `project_dir`'s, or this runner's own (the package ships its build recipe)."""
    if project_dir is None:
        return PROJECT_FILES_DIR, PACKAGE_DIR
    return project_dir, project_dir / "runner"


def _project_version(project_dir: Path | None) -> str:
    pyproject = _project_paths(project_dir)[0] / "pyproject.toml"
    text = pyproject.read_text() if pyproject.is_file() else ""
    m = re.search(r'(?m)^version\s*=\s*"([^"]+)"', text)
    return m.group(1) if m else "unknown"


def _tree_version(tree: Path | None) -> tuple[str | None, str | None]:
    """VERSION and the IREE revision from a build tree's generated version.py (not imported:
    it is another interpreter's package)."""
    if tree is None:
        return None, None
    path = tree / "compiler/bindings/python/iree/compiler/version.py"
    text = path.read_text() if path.is_file() else ""
    version = re.search(r'VERSION\s*=\s*"([^"]*)"', text)
    commit = re.search(r'"IREE"\s*:\s*"([^"]*)"', text)
    return (version.group(1) if version else None), (commit.group(1) if commit else None)


# --------------------------------------------------------------------------- staging

def _stage(ctx: Path, source: ImageSource, network: BuildNetwork,
           ccache_dir: Path | None, project_dir: Path | None) -> list[str]:
    """Lay out the build context; returns notes about what was left out."""
    notes: list[str] = []
    ctx.mkdir(parents=True)
    (ctx / "Dockerfile").write_text(assemble_dockerfile(source.flavor))
    build = ctx / "runner-build"
    build.mkdir()
    shutil.copy2(DOCKERFILES_DIR / "verify_iree.py", build / "verify_iree.py")
    network.write(build / "secrets")
    project = ctx / "project"
    project.mkdir()
    files, package = _project_paths(project_dir)
    for name in _PROJECT_FILES:
        if (files / name).is_file():
            shutil.copy2(files / name, project / name)
    if not (project / "pyproject.toml").is_file():
        raise BadInput(f"{files} has no pyproject.toml", where=str(files),
                       fix="name a runner project (pyproject.toml and runner/), or "
                       "reinstall the runner")
    # The shipped files' links (a checkout's runner/assets/) are staged as what they name.
    _copy_tree(package, project / "runner", notes,
               [(os.path.realpath(package), project / "runner")],
               suffixes=_PROJECT_SKIP_SUFFIXES)
    # The dependency stub (fragments/worker.Dockerfile): the project's metadata and an empty
    # package, so the dependency layer is keyed on pyproject.toml alone.
    deps = ctx / "project-deps"
    (deps / "runner").mkdir(parents=True)
    shutil.copy2(project / "pyproject.toml", deps / "pyproject.toml")
    (deps / "runner" / "__init__.py").write_text("")
    if (project / "README.md").is_file():
        (deps / "README.md").write_text("")
    if source.flavor == "source":
        (ctx / "ccache").mkdir()
        if ccache_dir is not None:
            if not ccache_dir.is_dir():
                raise BadInput(f"{ccache_dir} is not a directory", where="--ccache-dir",
                               fix="give an existing ccache directory, or leave it out")
            _copy_tree(ccache_dir, ctx / "ccache", notes,
                       [(os.path.realpath(ccache_dir), ctx / "ccache")], skip=False)
    if source.flavor == "build-dir":
        assert source.build_dir is not None
        parts = [p for p in _TREE_PARTS if (source.build_dir / p).is_dir()]
        roots = [(os.path.realpath(source.build_dir / p), ctx / "iree-build" / p)
                 for p in parts]
        for part, (_, staged) in zip(parts, roots, strict=True):
            _copy_tree(source.build_dir / part, staged, notes, roots)
    return notes


Roots = list[tuple[str, Path]]


def _copy_tree(src: Path, dst: Path, notes: list[str], roots: Roots, skip: bool = True,
               suffixes: tuple[str, ...] = _SKIP_SUFFIXES) -> None:
    """Copy with hard links where possible (a build tree is gigabytes).

    `roots` pairs each real source directory being staged with where it is staged. A
    symlink whose target is inside one of them stays a relative link to the staged copy,
    as the tree had it; one that leaves them (IREE's binding trees link into the source
    checkout) is copied as what it points at, since the image will not have the target.
    Build intermediates (CMakeFiles/, __pycache__, names ending in `suffixes`) are left out.
    """
    dst.mkdir(parents=True, exist_ok=True)
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        if skip and (entry.name in _SKIP_NAMES or entry.name.endswith(suffixes)):
            continue
        target = dst / entry.name
        if entry.is_symlink():
            real = os.path.realpath(entry.path)
            if not os.path.exists(real):
                notes.append(f"dangling symlink {entry.path} left out")
                continue
            staged = _staged_path(real, roots)
            if staged is not None:
                os.symlink(os.path.relpath(staged, dst), target)
            elif os.path.isdir(real):
                _copy_tree(Path(real), target, notes, [*roots, (real, target)], skip, suffixes)
            else:
                _link_or_copy(real, target)
        elif entry.is_dir():
            _copy_tree(Path(entry.path), target, notes, roots, skip, suffixes)
        elif entry.is_file():
            _link_or_copy(entry.path, target)


def _staged_path(real: str, roots: Roots) -> Path | None:
    for root, staged in roots:
        if real == root or real.startswith(root + os.sep):
            return staged / os.path.relpath(real, root)
    return None


def _link_or_copy(src: str, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _context_entries(ctx: Path) -> Iterator[tuple[str, os.DirEntry]]:
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        with os.scandir(ctx / rel_dir) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
            if rel in _UNHASHED:
                continue
            yield rel, e
            if e.is_dir(follow_symlinks=False):
                stack.append(rel)


def _inputs_hash(ctx: Path, build_args: dict[str, str], labels: dict[str, str],
                 base_image: str, base_id: str | None) -> str:
    h = hashlib.sha256()

    def feed(*parts: str) -> None:
        for p in parts:
            h.update(p.encode() + b"\0")

    feed("iree-sdxl-runner image v1", base_image, base_id or "")
    feed(json.dumps(build_args, sort_keys=True), json.dumps(labels, sort_keys=True))
    for rel, e in sorted(_context_entries(ctx), key=lambda x: x[0]):
        if e.is_symlink():
            feed(rel, "link", os.readlink(e.path))
        elif e.is_dir():
            feed(rel, "dir")
        else:
            mode = "x" if os.access(e.path, os.X_OK) else "-"
            feed(rel, "file", mode, sha256_file(Path(e.path)))
    return h.hexdigest()


# --------------------------------------------------------------------------- building

DRY_CONTEXT = ("the build context was staged in a temporary directory to hash it, then removed "
               "(a dry run writes nothing); `runner image build --iree BUILD --dry-run "
               "--keep-context` keeps it under the cache, so the printed command runs")


def build_image(source: ImageSource, *, base_image: str = DEFAULT_BASE_IMAGE,
                tags: tuple[str, ...] = (), dry_run: bool = False,
                progress: Progress | None = _stderr, client: Any = None,
                ccache_dir: Path | None = None, keep_context: bool = False,
                network: BuildNetwork | None = None, no_cache: bool = False,
                project_dir: Path | None = None) -> BuildResult:
    """Build (or find) the image for `source`; returns its content tag and ID.

    An existing image with the content tag is a cache hit: nothing is sent to the engine
    but the extra tags. A dry run writes nothing: it stages the context in a temporary
    directory to hash it and removes it, and returns the plan without building;
    `keep_context` keeps a dry run's context under the cache, so its printed command runs.
    `no_cache` rebuilds every layer (as after a base image or index change the hash cannot
    see) and replaces the tag.
    """
    say = progress or (lambda _line: None)
    start = time.perf_counter()
    client = _engine(client, dry_run)
    plan = _planned(source, dry_run and not keep_context, base_image=base_image, tags=tags,
                    client=client, ccache_dir=ccache_dir, network=network,
                    require_base=not dry_run, project_dir=project_dir)
    if no_cache:
        plan = dataclasses.replace(plan, no_cache=True)
    for note in plan.notes:
        say(f"note: {note}")
    if dry_run:
        return BuildResult(plan.tag, None, False, time.perf_counter() - start, plan, True)

    existing = None if no_cache else _existing(client, plan)
    if existing is not None:
        for tag in plan.extra_tags:
            _tag(existing, tag)
        shutil.rmtree(plan.context_dir, ignore_errors=True)
        say(f"cached: {plan.tag} ({existing.short_id})")
        return BuildResult(plan.tag, str(existing.id), True, time.perf_counter() - start, plan)

    say(f"building {plan.tag} from {plan.context_dir}")
    image_id = _stream_build(client, plan, say)
    image = client.images.get(plan.tag)
    for tag in plan.extra_tags:
        _tag(image, tag)
    if not keep_context:
        shutil.rmtree(plan.context_dir, ignore_errors=True)
    seconds = time.perf_counter() - start
    say(f"built {plan.tag} ({image.short_id}) in {seconds:.1f}s")
    return BuildResult(plan.tag, str(image.id or image_id), False, seconds, plan)


def _engine(client: Any, dry_run: bool) -> Any:
    """The docker engine to ask: a build needs one; a dry run uses one it can reach (for the
    base image's ID), else goes on without (None)."""
    if client is not None:
        return client
    if not dry_run:
        return connect()
    try:
        return connect(timeout=10)
    except RunnerError:
        return None


def _planned(source: ImageSource, scratch: bool, **plan: Any) -> BuildPlan:
    """plan_build's plan; `scratch` (a dry run): its context staged in a temporary
    directory, hashed and removed, so the dry run writes nothing."""
    if not scratch:
        return plan_build(source, **plan)
    with tempfile.TemporaryDirectory(prefix="runner-dry-context-") as contexts:
        planned = plan_build(source, contexts=Path(contexts), **plan)
    return dataclasses.replace(planned, notes=(*planned.notes, DRY_CONTEXT))


def _existing(client: Any, plan: BuildPlan) -> Any:
    from docker.errors import ImageNotFound

    try:
        image = client.images.get(plan.tag)
    except ImageNotFound:
        return None
    # A tag is only a name: trust it if the image says it was built from these inputs.
    if image.labels.get(LABEL + "inputs-sha256") != plan.inputs_hash:
        return None
    return image


def _tag(image: Any, ref: str) -> None:
    repo, _, tag = ref.rpartition(":") if ":" in ref.split("/")[-1] else (ref, "", "latest")
    image.tag(repo, tag or "latest")


def _stream_build(client: Any, plan: BuildPlan, say: Progress) -> str | None:
    """Run the build through the SDK, echoing the log; a failure names its step."""
    from docker.errors import APIError, DockerException

    tail: collections.deque[str] = collections.deque(maxlen=40)
    step = "(before the first step)"
    image_id = None
    buildargs = {**plan.build_args, **plan.proxies}
    reproduce = shlex.join(plan.command())
    try:
        stream = client.api.build(
            path=str(plan.context_dir), dockerfile="Dockerfile", tag=plan.tag,
            buildargs=buildargs, labels=plan.labels, network_mode="host", rm=True,
            forcerm=True, pull=False, decode=True, nocache=plan.no_cache,
            timeout=BUILD_READ_TIMEOUT_S)
        for chunk in stream:
            if "stream" in chunk:
                for line in chunk["stream"].splitlines():
                    if not line.strip():
                        continue
                    if line.startswith("Step "):
                        step = line
                    tail.append(line)
                    say(line)
            elif "aux" in chunk and isinstance(chunk["aux"], dict):
                image_id = chunk["aux"].get("ID", image_id)
            elif "error" in chunk:
                detail = chunk.get("errorDetail", {}).get("message") or chunk["error"]
                raise ToolFailed(
                    f"docker build failed at {step}\n  {detail.strip()}\n  last log lines:\n"
                    + "\n".join(f"    {x}" for x in tail),
                    where=str(plan.dockerfile),
                    fix=f"the context is kept; reproduce with: {reproduce}")
    except (APIError, DockerException) as e:
        raise ToolFailed(f"docker build failed at {step}: {e}", where=str(plan.dockerfile),
                         fix=f"reproduce with: {reproduce}") from e
    return image_id


# --------------------------------------------------------------------------- inspection

def image_info(ref: str, *, client: Any = None, provenance: bool = True) -> dict[str, Any]:
    """What a run manifest records about an image: its ID, tags, labels and, read from the
    image itself (no container is started), the provenance its verify step wrote."""
    from docker.errors import ImageNotFound

    client = client or connect()
    try:
        image = client.images.get(ref)
    except ImageNotFound:
        raise BadInput(f"image {ref} is not in the docker engine", where="image",
                       fix="build it with `runner image build --iree ...`") from None
    attrs = image.attrs
    info: dict[str, Any] = {
        "ref": ref,
        "id": image.id,
        "tags": list(image.tags),
        "created": attrs.get("Created"),
        "labels": dict(image.labels),
        "size": attrs.get("Size"),
    }
    if provenance:
        info["provenance"] = read_image_file(client, image.id, PROVENANCE_PATH)
    return info


def read_image_file(client: Any, image: str, path: str) -> Any:
    """A JSON file from inside an image, via a created-but-never-started container."""
    container = client.containers.create(image, command=["true"])
    try:
        chunks, _ = container.get_archive(path)
        data = b"".join(chunks)
    except Exception as e:
        raise StepFailed(f"{path} is not in image {image}: {e}", where=image,
                         fix="rebuild the image with `runner image build`") from e
    finally:
        container.remove(force=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.next()
        f = tar.extractfile(member) if member else None
        if f is None:
            raise StepFailed(f"{path} in image {image} is not a file", where=image,
                             fix="rebuild the image with `runner image build`")
        return json.loads(f.read().decode())

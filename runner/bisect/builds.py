"""What an IREE build is here, and the candidate builds between two of them.

A build is named in the runner's one build grammar (runner.inputs.iree_build:
`wheels:<version>`, `commit:<sha>`, `source:<sha>`, `build-dir:<path>`); a `commit:` of an
IREE checkout (`--repo`) is resolved here to its full SHA, and its wheels are PkgCI's
artifacts for that commit, as IREE's own bisect script installs them. A range between two
builds of one kind lists the builds in between, in order from the good end to the bad end:

- wheels: the versions the package index holds (`pip index versions`, so pip's own
  configuration, `--find-links` pages or dirs and `--pre` nightlies apply), PEP 440 order,
  which orders IREE's `X.Y.ZrcYYYYMMDD` nightlies by date;
- commits: the first-parent commits from `git rev-list` (git bisect's `--first-parent`,
  as IREE's script runs it: merges count, not the commits they bring in).
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from runner.base.errors import BadInput, ServiceUnreachable, ToolFailed
from runner.docker.image import parse_source
from runner.inputs.iree_build import is_version, parse_build_spec, version_key

COMPILER_PACKAGE, RUNTIME_PACKAGE = "iree-base-compiler", "iree-base-runtime"
_FULL_SHA = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class Build:
    """One IREE build under test. `spec` is canonical (`commit:` with the full SHA), and
    `label` the short name tables and directories use."""

    kind: str
    spec: str
    label: str
    version: str | None = None  # wheels
    commit: str | None = None  # commit, source
    path: str | None = None  # build-dir
    subject: str = ""  # a commit's subject line and date, for the step table

    def to_dict(self) -> dict:
        return {"kind": self.kind, "spec": self.spec, "label": self.label,
                "version": self.version, "commit": self.commit, "path": self.path,
                "subject": self.subject}

    @classmethod
    def from_dict(cls, raw: dict) -> Build:
        return cls(raw["kind"], raw["spec"], raw["label"], raw.get("version"),
                   raw.get("commit"), raw.get("path"), raw.get("subject", ""))


@dataclass(frozen=True)
class Sources:
    """Where builds come from: the package index options (`find_links`, `pre`) and the
    IREE checkout that `commit:` specs name commits of."""

    find_links: str | None = None
    pre: bool = False
    repo: Path | None = None

    def pip_index_args(self) -> list[str]:
        """The pip options that pick the index: a find-links page or dir, nightlies."""
        args = ["--find-links", self.find_links] if self.find_links else []
        return [*args, "--pre"] if self.pre else args


def check_find_links(value: str | None, where: str = "--find-links") -> str | None:
    """A plain http(s) URL (no credentials: they would land in reports) or a directory."""
    if not value:
        return None
    if "://" in value:
        parse_source("wheels:0", find_links=value, where=where)  # the URL rules of images
        return value
    path = Path(value).expanduser()
    if not path.is_dir():
        raise BadInput(f"{value!r} is neither an http(s) URL nor a directory", where=where,
                       fix="give a find-links page (https://iree.dev/pip-release-links.html)"
                       " or a directory of wheels")
    return str(path.resolve())


def parse_build(text: str, sources: Sources, where: str = "--good") -> Build:
    """A build in the one grammar, checked; a `commit:` resolved in `--repo` to its full SHA
    and subject line."""
    spec = parse_build_spec(text, where)
    if spec.kind == "wheels":
        assert spec.version is not None
        version_key(spec.version, where)
        return Build("wheels", spec.text, spec.version, version=spec.version)
    if spec.kind == "source":
        assert spec.commit is not None
        return Build("source", spec.text, spec.commit[:12], commit=spec.commit)
    if spec.kind == "build-dir":
        assert spec.path is not None
        return Build("build-dir", spec.text, spec.path.name or spec.value, path=spec.value)
    if sources.repo is None:
        raise BadInput(f"{text} names a commit, but of which repository?", where=where,
                       fix="pass --repo IREE_CHECKOUT (a clone of iree-org/iree)")
    sha, subject = resolve_commit(sources.repo, spec.value, where)
    return Build("commit", f"commit:{sha}", sha[:10], commit=sha, subject=subject)


def _git(repo: Path, *args: str, where: str) -> str:
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              check=False, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolFailed(f"git failed: {e}", where=where, fix="install git") from e
    if proc.returncode != 0:
        raise ToolFailed(f"`git {' '.join(args)}` failed: {proc.stderr.strip()[-500:]}",
                         where=where, fix="pass --repo a clone of iree-org/iree holding "
                         "both commits (git fetch)")
    return proc.stdout


def resolve_commit(repo: Path, ref: str, where: str) -> tuple[str, str]:
    """(full SHA, "subject (date)") of a commit of `repo`. `--end-of-options` keeps a ref
    from ever being read as an option."""
    out = _git(repo, "log", "-1", "--format=%H%x00%s%x00%cs", "--end-of-options",
               f"{ref}^{{commit}}", "--", where=where)
    sha, subject, date = [*out.strip().split("\0"), "", ""][:3]
    if not _FULL_SHA.fullmatch(sha):
        raise BadInput(f"{ref!r} is not a commit of {repo}", where=where,
                       fix=f"git -C {repo} fetch, or check the SHA")
    return sha, f"{subject[:80]} ({date})"


def available_versions(sources: Sources) -> list[str]:
    """Every `iree-base-compiler` version the index offers, through pip itself, so the
    user's pip configuration (index URL, proxy, certificates) is the one used."""
    argv = [sys.executable, "-m", "pip", "index", "versions", COMPILER_PACKAGE,
            "--disable-pip-version-check", *sources.pip_index_args()]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ServiceUnreachable(f"`pip index versions` failed: {e}", where="--good/--bad",
                                 fix="check the network / pip's index configuration, or pass "
                                 "--find-links DIR|URL") from e
    m = re.search(r"^Available versions: (.*)$", proc.stdout, re.MULTILINE)
    if proc.returncode != 0 or m is None:
        raise BadInput(f"the package index lists no {COMPILER_PACKAGE}: "
                       f"{proc.stderr.strip()[-500:]}", where=" ".join(argv[2:]),
                       fix="check the network / pip's index configuration, or pass "
                       "--find-links DIR|URL")
    return [v.strip() for v in m.group(1).split(",") if is_version(v.strip())]


def _wheel_range(good: Build, bad: Build, sources: Sources) -> list[Build]:
    assert good.version is not None and bad.version is not None
    versions = available_versions(sources)
    for end, flag in ((good, "--good"), (bad, "--bad")):
        if end.version not in versions:
            hint = " (a nightly needs --pre)" if "rc" in str(end.version) and \
                not sources.pre else ""
            raise BadInput(f"{COMPILER_PACKAGE}=={end.version} is not in the index{hint}",
                           where=flag, fix=f"pick one of: {', '.join(versions[:20])}")
    lo, hi = sorted([version_key(good.version), version_key(bad.version)])
    inside = sorted((v for v in versions if lo <= version_key(v) <= hi), key=version_key,
                    reverse=version_key(good.version) > version_key(bad.version))
    return [Build("wheels", f"wheels:{v}", v, version=v) for v in inside]


def _commit_range(good: Build, bad: Build, repo: Path) -> list[Build]:
    assert good.commit and bad.commit
    where = f"--repo {repo}"
    ancestor = subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor",
                               good.commit, bad.commit], capture_output=True, check=False)
    if ancestor.returncode != 0:
        raise BadInput(f"{good.label} is not an ancestor of {bad.label}", where=where,
                       fix="the good commit must come before the bad one on its branch")
    out = _git(repo, "rev-list", "--first-parent", "--reverse",
               "--format=%H%x00%s%x00%cs", f"{good.commit}..{bad.commit}", where=where)
    builds = [good]
    for line in out.splitlines():
        if line.startswith("commit "):
            continue
        sha, subject, date = [*line.split("\0"), "", ""][:3]
        builds.append(Build("commit", f"commit:{sha}", sha[:10], commit=sha,
                            subject=f"{subject[:80]} ({date})"))
    if builds[-1].commit != bad.commit:
        raise BadInput(f"{bad.label} is not on the first-parent line from {good.label}",
                       where=where, fix="bisect along the branch the bad commit is on")
    return builds


def backwards_note(good: Build, bad: Build) -> str | None:
    """A warning when --good is the newer release: then the search runs backwards, to the
    newest bad build (what finding a fix needs), which is rarely what was meant."""
    if good.version is None or bad.version is None:
        return None
    if version_key(good.version) <= version_key(bad.version):
        return None
    return (f"--good {good.spec} is newer than --bad {bad.spec}: bisecting backwards, for "
            f"the newest build that is bad (the fix of a problem the older builds have); "
            f"to find a regression, swap them: --good {bad.spec} --bad {good.spec}")


def candidates(good: Build, bad: Build, sources: Sources) -> list[Build]:
    """The builds from `good` to `bad`, both included, in that order."""
    if good.spec == bad.spec:
        raise BadInput("the good and the bad build are the same", where="--good/--bad",
                       fix="name two different builds")
    if good.kind != bad.kind or good.kind not in ("wheels", "commit"):
        # two unrelated builds: nothing lies between them, the answer is the bad one
        return [good, bad]
    if good.kind == "wheels":
        return _wheel_range(good, bad, sources)
    assert sources.repo is not None
    return _commit_range(good, bad, sources.repo)


def parse_range(text: str, sources: Sources, where: str = "--range") -> list[Build]:
    """`A..B`: every build from A to B (trend); `wheels:3.10.0..3.13.0` for short."""
    a, dots, b = text.partition("..")
    if not dots or not a or not b:
        raise BadInput(f"{text!r} is not a range", where=where,
                       fix="use A..B, e.g. wheels:3.10.0..wheels:3.13.0")
    if ":" not in b:
        b = f"{a.partition(':')[0]}:{b}"
    return candidates(parse_build(a, sources, where), parse_build(b, sources, where), sources)

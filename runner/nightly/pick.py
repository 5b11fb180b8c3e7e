"""Which IREE build tonight measures, and whether this machine has measured it already.

IREE publishes a nightly as a pre-release (`3.14.0rc20261207`) on its find-links page, and a
release on PyPI: the newest of those the index offers is the night's build, unless the
scheduler names one. A build this machine measured before is skipped, so a scheduler that
fires twice, or a night with no new nightly, costs nothing: the history store says so, or,
where it cannot be reached, a finished night dir under the same `--out` does.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

from runner.base.errors import BadInput, RunnerError
from runner.bisect.builds import Build, Sources, available_versions, parse_build
from runner.inputs.iree_build import parse_build_spec, version_key


def newest_build(sources: Sources) -> Build:
    """The newest `iree-base-compiler` the index (or find-links page) offers."""
    versions = available_versions(sources)
    if not versions:
        raise BadInput("the package index offers no IREE build", where="--find-links",
                       fix="pass --find-links URL|DIR (and --pre for nightlies), or --iree")
    newest = max(versions, key=version_key)
    return Build("wheels", f"wheels:{newest}", newest, version=newest)


def pick_build(given: str | None, sources: Sources) -> Build:
    """`--iree` as given, else the newest build on the index. A night measures released
    wheels: a commit's PkgCI packages and source builds are `runner bisect`'s."""
    if not given:
        return newest_build(sources)
    if parse_build_spec(given, "--iree").kind != "wheels":
        raise BadInput(f"{given} is not a wheels: build", where="--iree",
                       fix="name a release or nightly, e.g. wheels:3.13.0 or "
                       "wheels:3.14.0rc20261207 --pre")
    return parse_build(given, sources, "--iree")


def night_dir_name(day: str, build: Build) -> str:
    """`2026-12-07-3.14.0rc20261207`: a night's dir, dated and named for its build."""
    label = "".join(c if c.isalnum() or c in "._-" else "_" for c in build.label)[:60]
    return f"{day}-{label}"


def measured_in_store(results_url: str | None, build: Build, profile: str) -> list[str]:
    """The out dirs of the store's results of `build` and `profile` from this machine;
    none where the store cannot be read: the night then runs, as a store that cannot be
    reached fails nothing."""
    if build.version is None and build.commit is None:
        return []
    try:
        from runner.history.store import Query, opened
        from runner.history.url import resolve

        query = Query(profile=profile, machine=socket.gethostname(),
                      versions=(build.version or str(build.commit),))
        with opened(resolve(results_url)) as store:
            found = store.query(query)
    except (RunnerError, ImportError):
        return []
    return [r.out_dir for r in found]


def unfinished(night: Path) -> bool:
    """A night dir whose steps did not all finish (a killed night: the same command again
    goes on with it)."""
    try:
        return not json.loads((night / "nightly.json").read_text()).get("measured")
    except (OSError, ValueError, AttributeError):
        return False


def measured_here(root: Path, build: Build) -> Path | None:
    """A night dir under `root` that measured `build` to its end, else None."""
    if not root.is_dir():
        return None
    for night in sorted(root.iterdir()):
        record = night / "nightly.json"
        try:
            state = json.loads(record.read_text()) if record.is_file() else {}
        except (OSError, ValueError):
            continue
        if state.get("build", {}).get("spec") == build.spec and state.get("measured"):
            return night
    return None

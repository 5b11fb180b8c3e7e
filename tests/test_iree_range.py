"""The IREE releases the runner is tested against (runner/base/iree_range.py): pyproject's
requirements agree with the range, `runner --version` judges a build against it, and the
oldest and the newest release run the tiny model for real.

The two releases' real wheels are installed as `runner bisect` installs a build (a venv per
build under $RUNNER_CACHE_DIR/builds/, made once and reused by later sessions and bisects),
and this runner runs in each through the same PYTHONPATH link a bisect step uses.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import tomllib
from cli_support import cli
from repo_support import REPO

from runner.base.iree_range import NEWEST, OLDEST, range_lines, release, verdict


def requirements() -> dict[str, list[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {"": project["dependencies"], **project["optional-dependencies"]}


def test_pyproject_requires_the_range_floor_and_pins_only_the_export_extra():
    reqs = requirements()
    assert f"iree-base-runtime>={OLDEST}" in reqs[""]
    assert [r for r in reqs["compile"] if r.startswith("iree-base-")] == [
        f"iree-base-compiler>={OLDEST}"]
    # No upper bound and no pin outside [export]: a nightly or a self-built IREE is kept.
    for extra, listed in reqs.items():
        for req in listed:
            if req.startswith("iree-base-"):
                assert ("==" in req) == (extra == "export"), (extra, req)
                assert "<" not in req, req
    assert f"iree-base-compiler=={NEWEST}" in reqs["export"]  # the byte-for-byte re-export


def test_builds_are_judged_by_their_release_number():
    assert release("3.13.0rc20261016") == (3, 13, 0)  # what the 3.13.0 wheels report
    assert release("3.14.0.dev0") == (3, 14, 0) and release("v3.8") == (3, 8, 0)
    assert verdict(NEWEST) == verdict(OLDEST) == verdict(f"{NEWEST}rc20261016") == "inside"
    assert verdict("3.14.0rc20260101") == "newer" and verdict("2.9.0") == "older"
    assert verdict("unknown") == "unknown" and verdict(None) == "unknown"
    inside = range_lines({"iree.compiler": NEWEST, "iree.runtime": f"{NEWEST}rc20261016"})
    assert inside == [f"IREE: inside the tested range ({OLDEST} to {NEWEST}): "
                      "iree.compiler, iree.runtime"]
    out = range_lines({"iree.compiler": "3.14.0rc20260101", "iree.runtime": "2.9.0",
                       "iree-compile": NEWEST})
    assert out[0].startswith(f"IREE: OUTSIDE the tested range ({OLDEST} to {NEWEST}) for "
                             "iree.compiler, iree.runtime")
    assert f"iree.compiler 3.14.0rc20260101 is newer than the newest tested release, {NEWEST}" \
        in out[1]
    assert f"iree.runtime 2.9.0 is older than the oldest tested release, {OLDEST}" in out[2]
    assert len(out) == 3  # iree-compile is inside: no warning
    assert "no IREE compiler or runtime found" in range_lines({"iree.runtime": None})[0]


def test_version_reports_the_range_of_the_installed_iree():
    proc = cli("--version", cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.splitlines()[-1]
    assert f"({OLDEST} to {NEWEST})" in last
    from runner.base.provenance import iree_provenance

    runtime = iree_provenance()["iree.runtime"]["version"]
    assert ("inside" in last) == (verdict(runtime) == "inside")


@pytest.mark.slow
@pytest.mark.parametrize("version", [OLDEST, NEWEST])
def test_the_oldest_and_newest_releases_run_the_tiny_model(version, tmp_path):
    from runner.bisect.builds import Sources, parse_build
    from runner.bisect.envs import ensure_env

    env = ensure_env(parse_build(f"wheels:{version}", Sources()), Sources())
    environ = {**env.environ(), "RUNNER_PROGRESS": "plain"}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([env.python, "-m", *args], capture_output=True, text=True,
                              cwd=tmp_path, env=environ, timeout=1800, check=False)

    shown = run("runner", "--version")
    assert shown.returncode == 0, shown.stderr
    assert f"iree.runtime {version}" in shown.stdout and f"iree-compile {version}" in shown.stdout
    assert shown.stdout.splitlines()[-1].startswith("IREE: inside the tested range")
    # IREE CI's golden tests of the tiny model (clip, unet, vae), within their thresholds.
    goldens = run("runner", "goldens", "check", "--out", str(tmp_path / "goldens"))
    assert goldens.returncode == 0, goldens.stdout[-2000:] + goldens.stderr[-2000:]
    results = json.loads((tmp_path / "goldens" / "results.json").read_text())
    assert results["compiler"]["version"].startswith(version)
    assert [r["status"] for r in results["results"]] == ["passed"] * 3
    # The whole pipeline (the unet's scheduler loop included) makes images.
    probe = run("runner.bisect.probe", "--profile", "tiny", "--samples", "0-1", "--out",
                str(tmp_path / "probe"))
    state = json.loads((tmp_path / "probe" / "probe.json").read_text())
    assert probe.returncode == 0 and state["ok"], state.get("error")
    assert state["iree"]["iree.runtime"]["version"].startswith(version)
    assert len(list((tmp_path / "probe" / "images").glob("*.png"))) == 2

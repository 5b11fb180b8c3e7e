# ruff: noqa: F811  (pytest fixtures imported from docker_support are parameters here)
"""`runner validate` end to end on the real docker engine: image, in-image compile, docker
accuracy run, score, goldens v2.0; a failing verdict stops before goldens; a second call
reuses every step."""

import json
import os
import shutil

import pytest
from cli_support import Ran, cli
from docker_support import docker_client  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.docker]
REPO_GOLDENS = "goldens/tiny"


def validate(*args: str) -> Ran:
    return cli("validate", "--iree", "wheels:3.13.0", "--profile", "cpu", "--count", "32", *args)


@pytest.fixture(scope="module")
def passed(docker_client, tmp_path_factory):
    """The README's command as written: --goldens and --out relative to the cwd (the
    workers' containers must still get absolute paths)."""
    out = tmp_path_factory.mktemp("validate") / "ok"
    proc = validate("--goldens", REPO_GOLDENS, "--to", "v2.0", "--out", os.path.relpath(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_validate_passes_and_writes_bumped_goldens(passed):
    state = json.loads((passed / "validate.json").read_text())
    assert state["passed"] is True
    assert set(state["steps"]) == {"compile", "run", "score", "goldens"}
    assert state["steps"]["score"]["detail"]["passed"] is True
    bumped = sorted(p.name for p in (passed / "goldens" / "json").glob("*.json"))
    assert bumped == ["clip_cpu.json", "unet_cpu.json", "vae_cpu.json"]
    assert "_v2.0.bin" in (passed / "goldens" / "json" / "vae_cpu.json").read_text()
    manifest = json.loads((passed / "run" / "run.json").read_text())
    assert manifest["executor"] == "docker" and manifest["iree"]["iree.runtime"]["file"].startswith(
        "/opt/venv")
    for name in ("validate.md", "run/report.html", "run/junit.xml", "run/accuracy.json"):
        assert (passed / name).is_file(), name
    # what the results store keeps: the build asked for, the image's IREE, the scores
    from runner.history.extract import extract

    (kept,) = extract(passed)
    accuracy = json.loads((passed / "run" / "accuracy.json").read_text())
    assert (kept.command, kept.build, kept.verdict) == ("validate", "wheels:3.13.0", "PASS")
    assert kept.runtime_version == manifest["iree"]["iree.runtime"]["version"]
    scores = {m.name: m for m in kept.metrics if m.name in ("fid", "clip")}
    assert {name: (m.value, m.verdict) for name, m in scores.items()} == {
        name: (accuracy[name]["score"], "pass") for name in ("fid", "clip")}


def test_second_validate_reuses_every_step(passed):
    proc = validate("--goldens", REPO_GOLDENS, "--to", "v2.0", "--out", str(passed))
    assert proc.returncode == 0, proc.stderr
    for step in ("compile", "run", "score", "goldens"):
        assert f"validate: {step}: up to date, skipped" in proc.stderr


def test_failing_accuracy_stops_before_goldens(passed, tmp_path):
    out = tmp_path / "fail"
    # The passing validate's steps, without its attempt record (other inputs now: another
    # attempt, which reuses the image, compile and run by validate's own step ledger).
    shutil.copytree(passed, out, ignore=shutil.ignore_patterns("goldens", "attempt.*"))
    proc = validate("--goldens", REPO_GOLDENS, "--set", "accuracy.clip=[0.0, 1.0]",
                    "--baseline", str(passed), "--out", str(out))
    assert proc.returncode == 1
    assert "stopping before the goldens step" in proc.stderr
    assert not (out / "goldens").exists()
    state = json.loads((out / "validate.json").read_text())
    assert state["passed"] is False and "accuracy failed" in state["goldens"]
    # Against the passing validate of the same build: same images, so no score moved.
    assert state["baseline"]["fid_delta"] == 0.0 and state["baseline"]["clip_delta"] == 0.0
    assert (out / "run" / "compare.json").is_file()


def test_dry_run_prints_every_command(docker_client, tmp_path):
    proc = validate("--goldens", REPO_GOLDENS, "--dry-run", "--out", str(tmp_path / "dry"))
    assert proc.returncode == 0, proc.stderr  # a preview is not a failure
    assert "# validate: DRY RUN (nothing was run or judged)" in proc.stdout
    assert "(not built)" in proc.stdout and "None" not in proc.stdout  # no image id yet
    assert "docker build --network host" in proc.stdout
    assert "python3 -m runner compile --profile" in proc.stderr
    assert proc.stdout.count("python3 -m runner.batch.worker --task") == 2
    assert "runner goldens generate" in proc.stderr or "goldens generate" in proc.stderr

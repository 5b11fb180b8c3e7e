# ruff: noqa: F811  (pytest fixtures imported from docker_support are parameters here)
"""`runner run --executor docker` on a real engine: same bytes as local workers, and a
reproduce.sh that re-runs the run by hand."""

import json
import os
import subprocess

import pytest
from cli_support import Ran, cli
from docker_support import docker_client, project_snapshot, wheels_image  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.docker]
COUNT = 6


def run_cli(*args: str, cwd=None) -> Ran:
    args = (*args, "--no-score") if args[0] == "run" else args  # scoring is tested apart
    return cli(*args, cwd=cwd)


def hashes(run_dir):
    data = json.loads((run_dir / "dataset.json").read_text())
    return [(s["qsl_idx"], s["sha256"]) for s in data["samples"]]


def test_docker_workers_match_local_workers_and_reproduce(wheels_image, tmp_path):
    local, docked = tmp_path / "local", tmp_path / "docker"
    assert run_cli("run", "--profile", "cpu", "--count", str(COUNT), "--out",
                   str(local)).returncode == 0
    # --out relative to the driver's cwd: containers get absolute paths (task files, mounts).
    proc = run_cli("run", "--profile", "cpu", "--count", str(COUNT), "--executor", "docker",
                   "--image", wheels_image.tag, "--out", "docker", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert hashes(docked) == hashes(local) and len(hashes(local)) == COUNT
    # The modules come from the image's own iree-compile (here a cache hit: same compiler).
    assert f"{wheels_image.tag} python3 -m runner compile --profile" in proc.stderr
    assert (docked / "compile" / "compile-bs1-vae1.yaml").is_file()
    manifest = json.loads((docked / "run.json").read_text())
    assert manifest["executor"] == "docker"
    assert manifest["image"]["id"] == wheels_image.image_id
    assert manifest["image"]["provenance"]["iree.runtime"]["file"].startswith("/opt/venv")
    script = (docked / "reproduce.sh").read_text()
    assert "runner image build --iree wheels:3.13.0" in script
    assert script.count("docker run --rm --network host --cpuset-cpus") == 2
    assert "--privileged" not in script

    again = tmp_path / "again"
    rerun = subprocess.run(["bash", str(docked / "reproduce.sh"), str(again)],
                           capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr
    assert hashes(again) == hashes(local)


def test_docker_executor_needs_an_image(tmp_path):
    proc = run_cli("run", "--profile", "cpu", "--count", "2", "--executor", "docker",
                   "--out", str(tmp_path / "r"))
    assert proc.returncode == 2 and "--image" in proc.stderr


def test_an_image_the_engine_lacks_is_refused_by_the_dry_run_as_by_the_run(docker_client,
                                                                           tmp_path):
    """The same check for both, before anything is compiled or written; with no engine to
    ask, the dry run says the image was not checked (the run itself stops there)."""
    out = tmp_path / "r"
    for dry in (["--dry-run"], []):
        proc = run_cli("run", "--profile", "cpu", "--count", "2", "--executor", "docker",
                       "--image", "iree-sdxl-runner:no-such-tag", "--out", str(out), *dry)
        assert proc.returncode == 2, proc.stderr
        assert "--image: image iree-sdxl-runner:no-such-tag is not in the docker engine" in \
            proc.stderr and "docker pull" in proc.stderr and not out.exists()
    gone = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    proc = cli("run", "--profile", "cpu", "--count", "2", "--executor", "docker", "--image",
               "iree-sdxl-runner:no-such-tag", "--out", str(out), "--dry-run", env=gone)
    assert proc.returncode == 0, proc.stderr
    assert "# image iree-sdxl-runner:no-such-tag: not checked, no docker engine answers at " \
        f"unix://{tmp_path}/no-engine.sock" in proc.stdout and not out.exists()

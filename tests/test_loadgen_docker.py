# ruff: noqa: F811  (pytest fixtures imported from docker_support are parameters here)
"""`runner mlperf --executor docker`: LoadGen on the host, the workers in harness containers
serving the same file queue through the bind-mounted run dir."""

import json

import pytest
from docker_support import docker_client, project_snapshot, wheels_image  # noqa: F401
from test_loadgen import user_conf

from runner.cli.main import main

pytestmark = [pytest.mark.slow, pytest.mark.docker]


def test_loadgen_drives_docker_workers(wheels_image, tmp_path):
    conf = user_conf(tmp_path, 6)
    out = tmp_path / "out"
    rc = main(["mlperf", "--profile", "cpu", "--scenario", "offline", "--mode", "performance",
               "--count", "4", "--user-conf", str(conf), "--executor", "docker",
               "--image", wheels_image.tag, "--out", str(out)])
    assert rc in (0, 1)
    record = json.loads((out / "results.json").read_text())
    (test,) = record["tests"]
    assert test["summary"]["scenario"] == "Offline" and test["summary"]["samples_per_second"]
    assert test["sut"]["completed"] == test["sut"]["issued"] >= 6
    manifest = json.loads((out / "work" / "run.json").read_text())
    assert manifest["executor"] == "docker" and manifest["image"]["ref"] == wheels_image.tag
    assert all(cmd.startswith("docker run") for cmd in manifest["worker_commands"].values())

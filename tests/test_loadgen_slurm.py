# ruff: noqa: F811  (the Slurm cluster fixture imported from test_slurm is a parameter here)
"""`runner mlperf --executor slurm`: LoadGen on the submitting host, the node tasks' workers
serving the open queue on the shared run dir (the loopback cluster of scripts/slurm_setup.sh,
one core per node task)."""

from __future__ import annotations

import json

import pytest
from test_loadgen import user_conf
from test_slurm import slurm_cluster  # noqa: F401

from runner.cli.main import main

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


def test_loadgen_drives_slurm_node_tasks(slurm_cluster, tmp_path):
    conf = user_conf(tmp_path, 8)
    out = tmp_path / "out"
    rc = main(["mlperf", "--profile", "cpu", "--set", "layout.devices=0", "--scenario",
               "offline", "--mode", "performance", "--count", "8", "--user-conf", str(conf),
               "--executor", "slurm", "--nodes", "2", "--cpus-per-node", "1",
               "--out", str(out)])
    assert rc in (0, 1)
    (test,) = json.loads((out / "results.json").read_text())["tests"]
    assert test["sut"]["completed"] == test["sut"]["issued"] >= 8
    manifest = json.loads((out / "work" / "run.json").read_text())
    assert manifest["executor"] == "slurm" and manifest["status"] == "complete"
    assert len(manifest["slurm"]["jobs"]) == 1  # node tasks ended with the queue: no resubmits
    assert {n["outcome"] for n in manifest["slurm"]["nodes"].values()} <= {"done", "withdrawn"}
    served = [name for name, stats in manifest["workers"].items() if stats["samples"]]
    assert served and all(name.startswith("j0n") for name in served)

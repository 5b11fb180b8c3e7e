# ruff: noqa: F811  (pytest fixtures imported from docker_support are parameters here)
"""Runs on a real Slurm cluster: the one-node cluster scripts/slurm_setup.sh brings up on
loopback, where each array task ("node") gets its own core (`--cpus-per-node 1`) and runs the
cpu profile with one device. Every run here must give the same per-sample bytes as a local
run, whatever happens to its node tasks.

Needs root to start munge/slurm; skipped when the cluster cannot start here, except under
CI=1, where that is a failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cli_support import cli
from docker_support import build_tree, docker_client  # noqa: F401
from host_support import wait_for
from repo_support import REPO

from runner.base.errors import RunnerError
from runner.batch.aggregate import aggregate
from runner.batch.cluster import node_state_path, slurm_flags
from runner.batch.run import RunOutcome
from runner.batch.slurm import (
    SlurmOptions,
    sbatch_argv,
    slurm_options,
)
from runner.batch.status import run_status
from runner.cli.grammar import add_slurm
from runner.cli.main import main
from runner.config.mlperf_data import CAPTIONS_FILE
from runner.config.profile import load_profile
from runner.lifecycle import Lifecycle, executor_for
from runner.rundir.store import SampleStore

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

SETUP = REPO / "scripts" / "slurm_setup.sh"
COUNT = 24
NODES = 2
ARGV = ["run", "--profile", "cpu", "--devices", "0", "--executor", "slurm", "--nodes",
        str(NODES), "--cpus-per-node", "1", "--no-score"]


def options(**kw) -> SlurmOptions:
    return SlurmOptions(**{"nodes": NODES, "cpus_per_node": 1, "poll_seconds": 0.3, **kw})


def run_on_slurm(profile, ids: list[int], run_dir: Path, argv: list[str],
                 opts: SlurmOptions, captions: Path | None = None) -> RunOutcome:
    """A new run through the lifecycle with the Slurm executor, as `runner run` makes it."""
    executor = executor_for("slurm", profile, slurm=opts, captions=captions)
    with Lifecycle.create(run_dir, profile, ids, argv, executor, captions=captions,
                          score=False) as lc:
        outcome = lc.execute()
        if outcome.complete:
            lc.complete(reports=False)
        return outcome


def resume_on_slurm(run_dir: Path) -> RunOutcome:
    """`runner run --resume DIR` of a Slurm run, with its recorded options."""
    with Lifecycle.open(run_dir) as lc:
        options = SlurmOptions.from_dict(lc.manifest.slurm_options)
        lc.resume(executor_for("slurm", lc.profile, slurm=options))
        return lc.execute()


def one_core_profile():
    profile = load_profile("cpu")
    return dataclasses.replace(profile, layout=profile.layout.with_overrides(devices="0"))


def hashes(run_dir: Path) -> dict[int, str]:
    data = json.loads((run_dir / "dataset.json").read_text())
    ids = [s["qsl_idx"] for s in data["samples"]]
    assert len(ids) == len(set(ids)), "a sample is in the dataset twice"
    return {s["qsl_idx"]: s["sha256"] for s in data["samples"]}


def node_state(run_dir: Path, key: str) -> dict:
    try:
        return json.loads(node_state_path(run_dir, key).read_text())
    except (OSError, ValueError):
        return {}


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    proc = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        message = f"Slurm cannot start here:\n{proc.stderr[-3000:]}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def test_the_cluster_has_every_core(slurm_cluster):
    """The node declares every core this host gives the suite, however the suite's own
    thread pools are limited (a pytest-xdist worker's OMP_NUM_THREADS once made `nproc` in
    the setup script say 1: each run's second node task then waited for Resources)."""
    cpus = subprocess.run(["sinfo", "-h", "-o", "%C"], capture_output=True, text=True,
                          check=True).stdout.split("/")  # allocated/idle/other/total
    assert int(cpus[3]) == len(os.sched_getaffinity(0)), cpus


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, tiny_compiled) -> dict[int, str]:
    """The reference: the same samples with the local executor (2 workers)."""
    run_dir = tmp_path_factory.mktemp("slurm-ref") / "local"
    proc = cli("run", "--profile", "cpu", "--count", str(COUNT), "--no-score", "--out", run_dir)
    assert proc.returncode == 0, proc.stderr
    return hashes(run_dir)


@pytest.fixture(scope="module")
def slurm_run(slurm_cluster, local_run, tmp_path_factory) -> Path:
    # Spaces, quotes and a command substitution in the path: the batch script and sbatch
    # argv must carry it as data, never run it.
    run_dir = tmp_path_factory.mktemp("slurm") / "run 'a' $(touch PWNED)"
    outcome = run_on_slurm(one_core_profile(), list(range(12)), run_dir,
                           [*ARGV, "--count", "12"], options())
    assert outcome.complete and outcome.deaths == []
    aggregate(run_dir)
    return run_dir


def test_slurm_run_gives_the_local_bytes_and_records_nodes(slurm_run, local_run):
    got = hashes(slurm_run)
    assert got == {i: local_run[i] for i in range(12)}
    assert not list(Path.cwd().glob("PWNED")) and not list(slurm_run.parent.glob("PWNED"))
    manifest = json.loads((slurm_run / "run.json").read_text())
    assert manifest["executor"] == "slurm" and manifest["status"] == "complete"
    (job,) = manifest["slurm"]["jobs"]
    assert job["job_id"].isdigit() and "--array=0-1" in job["sbatch"]
    assert "--cpus-per-task=1" in job["sbatch"] and "--exclusive" not in job["sbatch"]
    nodes = manifest["slurm"]["nodes"]
    assert sorted(nodes) == ["j0n0", "j0n1"]
    cores = []
    for key, node in nodes.items():
        assert node["outcome"] == "done" and node["slurm"]["JobState"] == "COMPLETED"
        assert node["hostname"] == socket.gethostname() and node["nodelist"]
        assert node["slurm_id"] == f"{job['job_id']}_{key[-1]}"
        assert [w["name"] for w in node["plan"]["workers"]] == [f"{key}-w000"]
        assert node["layout"] == manifest["layout"]
        cores += node["cores"]
    assert len(cores) == len(set(cores)) == NODES  # two simulated nodes never share a core
    workers = {s["worker"] for s in json.loads((slurm_run / "dataset.json").read_text())[
        "samples"]}
    assert workers <= {"j0n0-w000", "j0n1-w000"}
    assert sorted(manifest["workers"]) == ["j0n0-w000", "j0n1-w000"]
    script = (slurm_run / "reproduce.sh").read_text()
    assert f"#     {shlex.join(job['sbatch'])}" in script
    assert "runner run --profile cpu --devices 0 --executor slurm" in script
    batch = (slurm_run / "slurm" / "j0.sbatch").read_text()
    assert f"--run-dir {shlex.quote(str(slurm_run.resolve()))}" in batch


def test_status_shows_each_node_and_worker(slurm_run, capsys):
    assert main(["status", str(slurm_run)]) == 0
    out = capsys.readouterr().out
    assert "12/12 samples (100%)" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    for key in ("j0n0", "j0n1"):
        assert rows[key][3:5] == ["done", "COMPLETED"]
    per_worker = [int(rows[w][2]) for w in ("j0n0-w000", "j0n1-w000")]
    assert sum(per_worker) == 12
    assert main(["status", str(slurm_run), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert [n["samples"] for n in status["nodes"]] == per_worker


def test_cancelled_node_task_is_rerun_without_loss_or_duplicates(slurm_cluster, local_run,
                                                                   tmp_path):
    run_dir = tmp_path / "cancel"
    result: dict = {}

    def submitter() -> None:
        try:
            result["outcome"] = run_on_slurm(one_core_profile(), list(range(COUNT)), run_dir,
                                             ARGV, options())
        except BaseException as e:  # reported by the assertion below
            result["error"] = e

    thread = threading.Thread(target=submitter)
    thread.start()
    wait_for(lambda: node_state(run_dir, "j0n1").get("state") == "running"
             and SampleStore(run_dir).done_ids())
    job_id = json.loads((run_dir / "run.json").read_text())["slurm"]["jobs"][0]["job_id"]
    live = {n["node"]: n for n in run_status(run_dir)["nodes"]}  # `runner status`, mid-run
    assert (live["j0n1"]["state"], live["j0n1"]["job_state"]) == ("running", "RUNNING")
    assert live["j0n1"]["workers"] == ["j0n1-w000"]
    subprocess.run(["scancel", f"{job_id}_1"], check=True)
    thread.join(timeout=300)
    assert "error" not in result, result.get("error")
    outcome = result["outcome"]
    assert outcome.complete
    aggregate(run_dir)
    assert hashes(run_dir) == local_run
    manifest = json.loads((run_dir / "run.json").read_text())
    cancelled = manifest["slurm"]["nodes"]["j0n1"]
    assert cancelled["outcome"] == "cancelled" and cancelled["slurm"]["JobState"] == "CANCELLED"
    jobs = manifest["slurm"]["jobs"]
    assert len(jobs) == 2 and jobs[1]["reason"].startswith("replaces 1 failed")
    assert manifest["slurm"]["nodes"]["j1n0"]["outcome"] == "done"
    assert [d["node"] for d in manifest["attempts"][-1]["deaths"]] == ["j0n1"]
    assert not any((run_dir / "queue" / "claimed").glob("*/*.json"))


def test_requeued_node_task_hands_back_its_batches(slurm_cluster, local_run, tmp_path):
    """Preemption or node failure with --requeue: Slurm stops the task and queues it again
    (22.05 delays its restart by BeginTime). Its batches go to the running node at once, and
    once every sample is stored the waiting task is withdrawn instead of waited for."""
    run_dir = tmp_path / "requeue"
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(outcome=run_on_slurm(
        one_core_profile(), list(range(COUNT)), run_dir, ARGV, options())))
    thread.start()
    wait_for(lambda: node_state(run_dir, "j0n1").get("state") == "running"
             and SampleStore(run_dir).done_ids())
    job_id = json.loads((run_dir / "run.json").read_text())["slurm"]["jobs"][0]["job_id"]
    subprocess.run(["scontrol", "requeue", f"{job_id}_1"], check=True)
    thread.join(timeout=300)
    assert result["outcome"].complete and result["outcome"].deaths == []
    aggregate(run_dir)
    assert hashes(run_dir) == local_run
    manifest = json.loads((run_dir / "run.json").read_text())
    requeued = manifest["slurm"]["nodes"]["j0n1"]
    assert requeued["slurm"]["Restarts"] == "1"
    assert requeued["outcome"] == "withdrawn" or (requeued["outcome"] == "done"
                                                  and requeued["restart_count"] == 1)
    assert len(manifest["slurm"]["jobs"]) == 1  # a requeue is not a failure to replace


DRIVER = """
import dataclasses, sys
from runner.batch.slurm import SlurmOptions
from runner.lifecycle import Lifecycle, executor_for
from runner.config.profile import load_profile
p = load_profile("cpu")
p = dataclasses.replace(p, layout=p.layout.with_overrides(devices="0"))
ex = executor_for("slurm", p, slurm=SlurmOptions(nodes=2, cpus_per_node=1, poll_seconds=0.3))
with Lifecycle.create(sys.argv[1], p, list(range(int(sys.argv[2]))), ["run"], ex) as lc:
    lc.execute()
"""


def test_killed_submitter_resume_reattaches_to_running_nodes(slurm_cluster, local_run,
                                                             tmp_path):
    run_dir = tmp_path / "reattach"
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(run_dir), str(COUNT)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    wait_for(lambda: len(SampleStore(run_dir).done_ids()) >= 2)
    os.killpg(proc.pid, signal.SIGKILL)  # the login session dies; the node tasks go on
    proc.wait(timeout=60)
    assert len(SampleStore(run_dir).done_ids()) < COUNT
    outcome = resume_on_slurm(run_dir)
    assert outcome.complete
    aggregate(run_dir)
    assert hashes(run_dir) == local_run
    manifest = json.loads((run_dir / "run.json").read_text())
    assert len(manifest["slurm"]["jobs"]) == 1  # re-attached, nothing resubmitted
    assert {n["outcome"] for n in manifest["slurm"]["nodes"].values()} == {"done"}
    # The killed submitter's attempt is recorded as killed (its stale lock was taken over).
    assert [a["status"] for a in manifest["attempts"]] == ["interrupted", "finished"]
    assert not (run_dir / "run.lock").exists()


def test_relative_out_dir_runs_on_the_nodes(slurm_cluster, local_run, tmp_path):
    """`--out` relative to the submitter's cwd: the nodes get the absolute run dir."""
    proc = cli(*ARGV, "--count", "4", "--out", "runs/rel", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "runs" / "rel"
    assert hashes(run_dir) == {i: local_run[i] for i in range(4)}
    batch = (run_dir / "slurm" / "j0.sbatch").read_text()
    assert f"--run-dir {shlex.quote(str(run_dir))}" in batch


def test_nodes_that_cannot_see_the_inputs_fail_clearly_and_boundedly(slurm_cluster, tmp_path,
                                                                    monkeypatch):
    captions = tmp_path / "private" / "captions.tsv"
    captions.parent.mkdir()
    captions.write_bytes(CAPTIONS_FILE.read_bytes())
    import runner.batch.slurm as slurm

    real_submit = slurm.submit

    def submit_then_hide(*args, **kwargs):
        captions.unlink(missing_ok=True)  # as if on a disk the nodes do not mount
        return real_submit(*args, **kwargs)

    monkeypatch.setattr(slurm, "submit", submit_then_hide)
    run_dir = tmp_path / "hidden"
    outcome = run_on_slurm(one_core_profile(), [0, 1], run_dir, ARGV,
                           options(max_resubmits=1), captions=captions)
    assert not outcome.complete and outcome.done == 0
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "incomplete" and manifest["missing"] == [0, 1]
    assert len(manifest["slurm"]["jobs"]) == 2  # the first array and one replacement
    for node in manifest["slurm"]["nodes"].values():
        assert node["outcome"] == "failed" and node["slurm"]["JobState"] == "FAILED"
        assert "not visible on node" in node["log_tail"] and "same path" in node["log_tail"]


def test_arguments_and_options(tmp_path):
    parser = argparse.ArgumentParser()
    parser.add_argument("--partition")  # the layout's spx/cpx flag on `runner run`
    parser.add_argument("--image")
    add_slurm(parser)
    args = parser.parse_args(["--partition", "cpx", "--nodes", "4", "--slurm-partition", "gpu",
                              "--slurm-time", "2:00:00", "--account", "lab",
                              "--sbatch-arg=--gres=gpu:8"])
    opts = slurm_options(args)
    assert (opts.nodes, opts.partition, opts.time, opts.account) == (4, "gpu", "2:00:00", "lab")
    argv = sbatch_argv(tmp_path, opts, 0, 4, tmp_path / "j0.sbatch")
    assert argv[:2] == ["sbatch", "--parsable"] and "--exclusive" in argv
    assert {"--array=0-3", "--partition=gpu", "--time=2:00:00", "--account=lab",
            "--gres=gpu:8", "--requeue"} <= set(argv)
    resumed = slurm_options(parser.parse_args([]), recorded=opts.to_dict())
    assert resumed == opts
    for bad, where in ((["--nodes", "0"], "--nodes"),
                       (["--node-executor", "docker"], "--image"),
                       (["--sbatch-arg", "gres=gpu:8"], "--sbatch-arg"),
                       (["--slurm-time", "banana"], "--slurm-time"),
                       (["--slurm-time", "2h"], "--slurm-time"),
                       (["--slurm-time", "1:2:3:4"], "--slurm-time")):
        with pytest.raises(RunnerError) as e:
            slurm_options(parser.parse_args(bad))
        assert e.value.where == where
    for good in ("90", "30:00", "2:00:00", "1-12", "1-12:30", "2-00:00:00", "UNLIMITED"):
        assert slurm_options(parser.parse_args(["--slurm-time", good])).time == good


def test_a_bad_slurm_time_fails_the_dry_run_as_the_run(tmp_path):
    """sbatch would refuse it after the compile; the dry run and the run refuse it first,
    writing nothing."""
    out = tmp_path / "o"
    for dry in (["--dry-run"], []):
        ran = cli("run", "--profile", "cpu", "--count", "2", "--executor", "slurm",
                  "--slurm-time", "banana", "--out", out, *dry)
        assert ran.returncode == 2 and "'banana' is not a Slurm time limit" in ran.stderr
        assert "HH:MM:SS" in ran.stderr and not out.exists()


def test_without_slurm_commands_the_dry_run_fails_as_the_run(tmp_path, monkeypatch):
    """On a host without sbatch (not the cluster's login node) the run stops before any work;
    its dry run says so too, instead of printing a job script it could not submit."""
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    out = tmp_path / "o"
    for dry in (["--dry-run"], []):
        ran = cli("run", "--profile", "cpu", "--count", "2", "--executor", "slurm",
                  "--nodes", "1", "--out", out, *dry)
        assert ran.returncode == 2, ran.stderr
        assert "Slurm commands not found: sbatch" in ran.stderr
        assert "--executor slurm" in ran.stderr and "login node" in ran.stderr
        assert not out.exists()


def test_a_layout_that_does_not_fit_a_node_task_fails_before_submitting(tmp_path):
    profile = load_profile("cpu")  # two cpu devices; a node task gets one CPU
    with pytest.raises(RunnerError, match="need 2 cores"):
        run_on_slurm(profile, [0], tmp_path / "r", ARGV, options())
    assert not (tmp_path / "r").exists()


def test_slurm_flags_round_trip_through_the_run_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--executor")
    parser.add_argument("--image")
    add_slurm(parser)
    opts = SlurmOptions(nodes=3, partition="gpu", time="1:00:00", account="lab",
                        node_executor="docker", image="iree-sdxl-runner:x", cpus_per_node=4,
                        sbatch_args=("--gres=gpu:8",), max_resubmits=1)
    flags = slurm_flags(opts)
    args = parser.parse_args(flags)
    assert args.executor == "slurm" and slurm_options(args) == opts
    assert slurm_flags(SlurmOptions()) == ["--executor", "slurm", "--nodes", "1"]


def bench_table(md: str) -> list[str]:
    """The rows of bench.md's one throughput table."""
    section = md.split("## Throughput")[1].split("###")[0]
    return [line for line in section.splitlines()
            if line.startswith("| devices=") or line.startswith("| **devices=")]


def test_slurm_sweep_of_two_layouts_gives_one_table(slurm_cluster, local_run, tmp_path,
                                                    capsys):
    out = tmp_path / "bench"
    assert main(["bench", "--profile", "cpu", "--executor", "slurm", "--devices", "0",
                 "--batch-size", "1,2", "--cpus-per-node", "1", "--count", "4",
                 "--out", str(out)]) == 0
    md = capsys.readouterr().out
    report = json.loads((out / "bench.json").read_text())
    assert report["executor"] == "slurm" and report["slurm"]["cpus_per_node"] == 1
    layouts = report["layouts"]
    assert [lay["label"] for lay in layouts] == ["devices=0 cpd=1 bs=1", "devices=0 cpd=1 bs=2"]
    jobs = [lay["slurm"]["jobs"] for lay in layouts]
    assert all(len(j) == 1 for j in jobs) and jobs[0] != jobs[1]  # one job per combination
    for lay in layouts:
        assert lay["status"] == "ok" and lay["samples"] == 4 and lay["workers"] == 1
        assert lay["samples_per_s"] == pytest.approx(4 / lay["wall_s"], rel=1e-3)
        assert lay["slurm"]["queue_wait_s"] >= 0 and lay["slurm"]["node_tasks"] == 1
        run_dir = Path(lay["run_dir"])
        run = json.loads((run_dir / "run.json").read_text())
        assert run["executor"] == "slurm" and run["status"] == "executed"
        assert [j["job_id"] for j in run["slurm"]["jobs"]] == lay["slurm"]["jobs"]
        assert run["layout"]["batch_size"] == lay["layout"]["batch_size"]
        # Every worker ran on a node task; the samples are the local run's bytes.
        assert [w["worker"] for w in lay["per_worker"]] == ["j0n0-w000"]
        aggregate(run_dir)
        assert hashes(run_dir) == {i: local_run[i] for i in range(4)}
        reproduce = (run_dir / "reproduce.sh").read_text()
        rerun = lay["run_command"].split(" --out ")[0]  # reproduce.sh takes its own --out
        assert "--executor slurm --nodes 1" in rerun and f'{rerun} --out "$out"' in reproduce
        assert f"sbatch --parsable --job-name=runner-{run_dir.name}" in reproduce
    # One comparison table: both layouts, each with its Slurm job, the best marked once.
    rows = bench_table(md)
    assert len(rows) == 2 and sum("(best)" in r for r in rows) == 1
    for row, lay in zip(rows, layouts, strict=True):
        assert f"| {lay['slurm']['jobs'][0]} |" in row
    assert "| Slurm job | queue wait s |" in md
    assert "stage latencies not measured" in md and report["stages"] == []


@pytest.mark.docker
def test_slurm_sweep_over_two_iree_builds(slurm_cluster, local_run, docker_client, build_tree,
                                          tmp_path, capsys):
    """--iree: each build is its own harness image, compiling and running its own modules
    on the node tasks (docker node executor); one row per build in the same table."""
    out = tmp_path / "bench"
    specs = f"wheels:3.13.0,build-dir:{build_tree}"
    assert main(["bench", "--profile", "cpu", "--executor", "slurm", "--devices", "0",
                 "--batch-size", "1", "--cpus-per-node", "1", "--count", "2", "--iree", specs,
                 "--out", str(out)]) == 0
    md = capsys.readouterr().out
    report = json.loads((out / "bench.json").read_text())
    arms = report["iree"]
    assert [a["spec"] for a in arms] == specs.split(",")
    assert len({a["image"] for a in arms}) == 2
    layouts = report["layouts"]
    assert [lay["iree"] for lay in layouts] == specs.split(",")
    for lay, arm in zip(layouts, arms, strict=True):
        assert lay["status"] == "ok" and lay["image"] == arm["image"]
        run_dir = Path(lay["run_dir"])
        run = json.loads((run_dir / "run.json").read_text())
        assert run["slurm"]["options"]["node_executor"] == "docker"
        assert run["slurm"]["options"]["image"] == arm["image"]
        assert run["image"]["id"] == arm["image_id"]
        # The node ran the image's containers, which compiled in that image.
        assert any(arm["image"] in cmd for cmd in run["worker_commands"].values())
        assert (out / "compile" / arm["image"].split(":", 1)[1] /
                "compile-bs1-vae1.yaml").is_file()
        aggregate(run_dir)
        assert hashes(run_dir) == {i: local_run[i] for i in range(2)}
    rows = bench_table(md)
    assert len(rows) == 2 and "| IREE |" in md
    assert [f"`{s}`" in row for s, row in zip(specs.split(","), rows, strict=True)] == [True] * 2

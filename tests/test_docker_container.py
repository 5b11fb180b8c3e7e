# ruff: noqa: F811  (pytest fixtures imported from docker_support are parameters here)
"""Per-worker containers: the `docker run` argv and SDK kwargs for hip, cuda and cpu workers
planned by runner.config.layout, and real containers started through the SDK and the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from docker_support import (  # noqa: F401  (pytest fixtures)
    docker_client,
    project_snapshot,
    wheels_image,
)

from runner.base.errors import RunnerError
from runner.config.layout import LayoutSpec, plan_workers
from runner.docker import container as C
from runner.docker.container import Mount, host_group, run_argv, run_kwargs, worker_container_spec

IMAGE = "iree-sdxl-runner:test"
TASK = ["python3", "-m", "runner.worker", "--task", "/abs/run/workers/w000.json"]


def _worker(backend: str, devices: str, index: int = 0, **layout):
    raw = {"devices": devices, "batch_size": 2, **layout}
    spec = LayoutSpec.from_dict(raw, backend, "test")
    return plan_workers(spec, available_cores=(0, 1, 2, 3)).workers[index]


@pytest.fixture
def dirs(tmp_path):
    run = tmp_path / "run"
    models = tmp_path / "models"
    run.mkdir()
    models.mkdir()
    return str(run), str(models)


def test_hip_worker_argv_is_exact(dirs):
    run, models = dirs
    worker = _worker("hip", "3", gpus=8)
    spec = worker_container_spec(IMAGE, worker, TASK, [Mount(models), Mount(run, False)],
                                 name="r1-w000", user="1000:1000")
    assert run_argv(spec) == [
        "docker", "run", "--detach", "--name", "r1-w000", "--network", "host",
        "--device", "/dev/kfd", "--device", "/dev/dri",
        "--group-add", host_group("video"), "--group-add", host_group("render"),
        "--security-opt", "seccomp=unconfined", "--ipc", "host", "--shm-size", "16G",
        "--user", "1000:1000",
        "--env", "ROCR_VISIBLE_DEVICES=3", "--env", "HIP_VISIBLE_DEVICES=0",
        "--mount", f"type=bind,source={models},target={models},readonly",
        "--mount", f"type=bind,source={run},target={run}",
        "--label", "org.iree-sdxl-runner.worker=w000",
        "--label", "org.iree-sdxl-runner.device-id=3",
        IMAGE, *TASK,
    ]
    kw = run_kwargs(spec)
    assert kw["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert kw["group_add"] == [host_group("video"), host_group("render")]
    assert kw["security_opt"] == ["seccomp=unconfined"]
    assert (kw["ipc_mode"], kw["shm_size"], kw["network_mode"]) == ("host", "16G", "host")
    assert kw["environment"] == {"ROCR_VISIBLE_DEVICES": "3", "HIP_VISIBLE_DEVICES": "0"}
    assert [(m["Source"], m["Target"], m["ReadOnly"]) for m in kw["mounts"]] == \
        [(models, models, True), (run, run, False)]
    assert "privileged" not in kw and "--privileged" not in run_argv(spec)
    assert "device_requests" not in kw and "cpuset_cpus" not in kw


def test_cuda_worker_sees_its_gpu_as_device_zero(dirs):
    run, _ = dirs
    worker = _worker("cuda", "4,5", index=1)
    assert worker.env == {"CUDA_VISIBLE_DEVICES": "5"}
    spec = worker_container_spec(IMAGE, worker, TASK, [(run, False)], user="0:0")
    argv = run_argv(spec, detach=False, remove=True)
    assert argv[:5] == ["docker", "run", "--rm", "--network", "host"]
    assert argv[argv.index("--gpus") + 1] == "device=5"
    assert "--env" in argv and argv[argv.index("--env") + 1] == "CUDA_VISIBLE_DEVICES=0"
    assert "--device" not in argv and "--ipc" not in argv and "--privileged" not in argv
    kw = run_kwargs(spec)
    (request,) = kw["device_requests"]
    assert request["DeviceIDs"] == ["5"] and request["Capabilities"] == [["gpu"]]


def test_cpu_worker_is_pinned_by_cpuset(dirs):
    run, models = dirs
    worker = _worker("cpu", "0,1", index=1, cores_per_device=2)
    assert worker.cpu_affinity == (2, 3)
    spec = worker_container_spec(IMAGE, worker, TASK, [(run, False), (models, True)],
                                 extra_env={"IREE_EXTRA": "1"}, user="0:0", workdir=run)
    argv = run_argv(spec)
    assert argv[argv.index("--cpuset-cpus") + 1] == "2,3"
    assert argv[argv.index("--workdir") + 1] == run
    assert "--env" in argv and "IREE_EXTRA=1" in argv
    assert not {"--device", "--gpus", "--ipc", "--group-add", "--privileged"} & set(argv)
    kw = run_kwargs(spec)
    assert kw["cpuset_cpus"] == "2,3" and kw["environment"] == {"IREE_EXTRA": "1"}
    assert kw["working_dir"] == run and kw["user"] == "0:0"


def test_numa_pinning_becomes_cpuset_mems(dirs):
    if not os.path.exists("/sys/devices/system/node/node0/cpulist"):
        pytest.skip("no NUMA information on this host")
    worker = _worker("hip", "0", gpus=1, numa=True)
    assert worker.numa_node == 0 and worker.command_prefix[0] == "numactl"
    spec = worker_container_spec(IMAGE, worker, TASK, [(dirs[0], False)])
    argv = run_argv(spec)
    assert argv[argv.index("--cpuset-mems") + 1] == "0"
    with open("/sys/devices/system/node/node0/cpulist") as f:
        assert argv[argv.index("--cpuset-cpus") + 1] == f.read().strip()
    assert "numactl" not in argv  # the engine pins; the image needs no numactl
    assert spec.user == f"{os.getuid()}:{os.getgid()}"


@pytest.mark.parametrize("mount,message", [
    (("relative/dir", True), "must be absolute"),
    (("/usr/lib", True), "hide the image"),
    (("/opt/venv", False), "hide the image"),
    (("/", True), "hide the image"),
    (("/definitely/not/here", True), "does not exist"),
    (("/tmp/a,b", True), "commas"),
])
def test_bad_mounts_are_rejected(mount, message):
    worker = _worker("cpu", "0")
    with pytest.raises(RunnerError, match=message):
        worker_container_spec(IMAGE, worker, TASK, [mount])


def test_extra_env_may_not_undo_device_confinement(dirs):
    worker = _worker("hip", "2", gpus=8)
    with pytest.raises(RunnerError, match="ROCR_VISIBLE_DEVICES"):
        worker_container_spec(IMAGE, worker, TASK, extra_env={"ROCR_VISIBLE_DEVICES": "0-7"})
    with pytest.raises(RunnerError, match="not a valid environment variable"):
        worker_container_spec(IMAGE, worker, TASK, extra_env={"A B": "1"})
    with pytest.raises(RunnerError, match="non-empty list"):
        worker_container_spec(IMAGE, worker, [])


# --------------------------------------------------------------------------- real engine

PROBE = """
import json, os, sys
run, ro = sys.argv[1], sys.argv[2]
try:
    open(os.path.join(ro, "x"), "w")
    ro_write = "allowed"
except OSError:
    ro_write = "refused"
record = {"affinity": sorted(os.sched_getaffinity(0)), "env": os.environ.get("IREE_EXTRA"),
          "uid": os.getuid(), "ro_write": ro_write, "model": open(os.path.join(ro, "m.txt")).read()}
with open(os.path.join(run, "out.json"), "w") as f:
    json.dump(record, f)
print("probe:" + json.dumps(record))
"""


def _host_cpu_worker():
    """A cpu worker pinned to this host's last usable core (the engine checks it exists)."""
    cores = tuple(sorted(os.sched_getaffinity(0)))
    layout = LayoutSpec.from_dict({"devices": str(len(cores) - 1), "batch_size": 1,
                                   "cores_per_device": 1}, "cpu", "test")
    worker = plan_workers(layout, available_cores=cores).workers[0]
    assert worker.cpu_affinity == (cores[-1],)
    return worker


@pytest.mark.docker
@pytest.mark.slow
def test_a_cpu_worker_container_runs_with_mounts_env_and_cpuset(docker_client, wheels_image,
                                                                dirs):
    run, models = dirs
    with open(os.path.join(models, "m.txt"), "w") as f:
        f.write("weights")
    worker = _host_cpu_worker()
    spec = worker_container_spec(
        wheels_image.tag, worker, ["python3", "-c", PROBE, run, models],
        [Mount(run, read_only=False), Mount(models, read_only=True)],
        extra_env={"IREE_EXTRA": "from-host"}, name=f"runner-test-{os.getpid()}")
    box = C.start(spec, client=docker_client)
    try:
        assert C.wait(box, timeout=120) == 0, C.logs(box)
        assert C.poll(box) == 0
        output = C.logs(box)
    finally:
        C.kill(box)
    record = json.loads(output.split("probe:", 1)[1])
    assert record["affinity"] == list(worker.cpu_affinity)
    assert record == {**record, "env": "from-host", "uid": os.getuid(), "ro_write": "refused",
                      "model": "weights"}
    # Written through the read-write mount at the same path, owned by the caller.
    with open(os.path.join(run, "out.json")) as f:
        assert json.load(f) == record
    assert os.stat(os.path.join(run, "out.json")).st_uid == os.getuid()
    with pytest.raises(Exception):  # noqa: B017 - removed: any SDK "not found" error
        docker_client.containers.get(box.id)

    # The argv form, run by the docker CLI, does the same thing.
    if shutil.which("docker"):
        os.remove(os.path.join(run, "out.json"))
        proc = subprocess.run(run_argv(spec, detach=False, remove=True), capture_output=True,
                              text=True, check=False, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.split("probe:", 1)[1]) == record


@pytest.mark.docker
@pytest.mark.slow
def test_wait_times_out_and_kill_removes(docker_client, wheels_image):
    spec = worker_container_spec(wheels_image.tag, _host_cpu_worker(), ["sleep", "60"])
    box = C.start(spec, client=docker_client)
    try:
        assert C.wait(box, timeout=1) is None
        assert C.poll(box) is None
    finally:
        C.kill(box)
    assert box.id not in [c.id for c in docker_client.containers.list(all=True)]


@pytest.mark.docker
@pytest.mark.slow
def test_starting_an_unbuilt_image_is_a_runner_error(docker_client):
    spec = worker_container_spec("iree-sdxl-runner:never-built", _host_cpu_worker(), ["true"])
    with pytest.raises(RunnerError, match="runner image build"):
        C.start(spec, client=docker_client)

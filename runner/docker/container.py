"""One docker container per worker: the SDK call that starts it and the `docker run` argv that
reproduces it, built from the same description so the two cannot drift apart.

Why one container per worker, not one per host with the workers inside (AMD's harness runs
one container per host and starts its processes in it):

- Failure isolation. A worker that segfaults in the HIP runtime, leaks until the OOM killer
  comes, or hangs is one container with its own exit code, its own log (`docker logs`) and
  its own kill; the other 63 keep going, and the run record says which one died and how. In a
  shared container a crash of the in-container launcher, or an OOM kill aimed at the cgroup,
  takes every worker down, and the per-worker logs are whatever the launcher chose to keep.
- Device visibility enforced by the engine, not by convention. `--cpuset-cpus` /
  `--cpuset-mems` (cpu workers, NUMA pinning) and `--gpus device=<id>` (CUDA) are cgroup and
  runtime limits the worker cannot widen; inside one shared container the same confinement
  rests on every process honouring its environment variables. (On ROCm, /dev/kfd and
  /dev/dri carry all GPUs, so there the env vars do the work either way, exactly as in AMD's
  harness.)
- The reproduction is exact per worker: reproduce.sh holds the one `docker run` line that
  ran worker w017, with its env and mounts, and rerunning that line reruns that worker alone.
- What it costs is small: a container start is about a second (scripts/bench_docker.py
  measures it against a bare process start), paid once per worker in parallel, against a
  run of minutes to an hour; memory is per process in both designs. Workers coordinate
  through files in the run directory, which every container bind-mounts at the same path,
  so the shared-queue design of the harness carries over unchanged.

Every host path is mounted at the same path inside, so paths in task files, logs and
manifests mean the same thing on both sides. `--privileged` is never used: the ROCm device
nodes, groups and seccomp setting below are what AMD documents for ROCm containers.
"""

from __future__ import annotations

import contextlib
import grp
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.base import shellscript
from runner.base.errors import BadInput, ToolFailed
from runner.config.layout import BACKENDS, Worker, format_device_ids
from runner.docker.engine import connect
from runner.docker.image import LABEL

ROCM_DEVICES = ("/dev/kfd", "/dev/dri")
ROCM_GROUPS = ("video", "render")
# With --ipc host the container uses the host's /dev/shm and the engine ignores --shm-size;
# it is kept so the line still gives the HIP runtime room if someone drops --ipc host.
ROCM_SHM_SIZE = "16G"
# Mount targets that would hide the image's own software or the system's.
_PROTECTED = ("/opt/venv", "/opt/iree", "/opt/runner", "/usr", "/bin", "/sbin", "/lib",
              "/lib64", "/etc", "/proc", "/sys", "/dev", "/boot", "/var/lib/docker")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}")
# What each backend uses to confine a worker to its device; the user may not override these.
_VISIBILITY = {"hip": ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"),
               "cuda": ("CUDA_VISIBLE_DEVICES",), "cpu": ()}


@dataclass(frozen=True)
class Mount:
    """A host path bind-mounted at the same path inside the container."""

    path: str
    read_only: bool = True


@dataclass(frozen=True)
class ContainerSpec:
    """Everything `docker run` gets for one worker, validated; see worker_container_spec."""

    image: str
    command: tuple[str, ...]
    backend: str
    device_id: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    cpuset_cpus: str | None = None
    cpuset_mems: str | None = None
    name: str | None = None
    workdir: str | None = None
    user: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    group_add: tuple[str, ...] = ()


def backend_of(worker: Worker) -> str:
    """hip / cuda / cpu, from the device URI the layout gave the worker."""
    scheme = worker.device_uri.split("://", 1)[0]
    if scheme in ("hip", "cuda"):
        return scheme
    if scheme.startswith("local"):
        return "cpu"
    raise BadInput(f"worker {worker.name}: no container mapping for device "
                   f"{worker.device_uri!r}", where="worker.device_uri",
                   fix="use the hip, cuda or cpu backend")


def worker_container_spec(
    image: str,
    worker: Worker,
    command: Sequence[str],
    mounts: Sequence[Mount | tuple[str, bool]] = (),
    *,
    backend: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    name: str | None = None,
    workdir: str | None = None,
    user: str | None = None,
    labels: Mapping[str, str] | None = None,
    planned: bool = False,
) -> ContainerSpec:
    """The container for one planned worker (`planned`: only to print it; its mounts may
    not exist yet).

    The worker's own environment (device visibility) is kept, with one change: a CUDA
    container sees only the GPU `--gpus device=<id>` gave it, renumbered 0, so
    CUDA_VISIBLE_DEVICES becomes 0 (the host ID would hide the only GPU there is). The
    layout's `numactl` prefix becomes --cpuset-mems/--cpuset-cpus: the engine enforces
    them, and the image need not carry numactl. `user` defaults to the caller's uid:gid so
    files written into the run directory belong to whoever started the run.
    """
    backend = backend or backend_of(worker)
    if backend not in BACKENDS:
        raise BadInput(f"unknown backend {backend!r}", where="backend",
                       fix=f"use one of {', '.join(BACKENDS)}")
    env = dict(worker.env)
    if backend == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = "0"
    for key, value in (extra_env or {}).items():
        if key in _VISIBILITY[backend]:
            raise BadInput(f"{key} is set per worker to confine it to its device",
                           where=f"env: {key}", fix=f"remove {key} from the extra env")
        env[key] = value
    cpus = format_device_ids(sorted(worker.cpu_affinity)) if worker.cpu_affinity else None
    mems = None
    if worker.numa_node is not None:
        mems = str(worker.numa_node)
        cpus = cpus or numa_node_cpus(worker.numa_node)
    all_labels = {LABEL + "worker": worker.name, LABEL + "device-id": str(worker.device_id)}
    all_labels.update(labels or {})
    return make_spec(
        image, command, backend, device_id=worker.device_id, env=env, mounts=mounts,
        cpuset_cpus=cpus, cpuset_mems=mems, name=name, workdir=workdir,
        user=user if user is not None else f"{os.getuid()}:{os.getgid()}", labels=all_labels,
        planned=planned)


def make_spec(image: str, command: Sequence[str], backend: str, *, device_id: int | None = None,
              env: Mapping[str, str] | None = None,
              mounts: Sequence[Mount | tuple[str, bool]] = (),
              cpuset_cpus: str | None = None, cpuset_mems: str | None = None,
              name: str | None = None, workdir: str | None = None, user: str | None = None,
              labels: Mapping[str, str] | None = None, planned: bool = False) -> ContainerSpec:
    """A validated ContainerSpec from plain values (worker_container_spec calls this).
    `planned`: a dry run's, only printed: a mount's host path need not exist yet (the run
    makes it), everything else is checked as for a container that starts."""
    if backend not in BACKENDS:
        raise BadInput(f"unknown backend {backend!r}", where="backend",
                       fix=f"use one of {', '.join(BACKENDS)}")
    if not command or not all(isinstance(a, str) for a in command):
        raise BadInput("the container command must be a non-empty list of strings",
                       where="command", fix="pass the command as an argv list")
    if backend in ("hip", "cuda") and (device_id is None or device_id < 0):
        raise BadInput(f"a {backend} container needs a device ID", where="device_id",
                       fix="pass the worker's device ID (`runner plan` shows them)")
    env = dict(env or {})
    for key, value in env.items():
        if not _ENV_KEY.fullmatch(key) or "\0" in value:
            raise BadInput(f"{key!r} is not a valid environment variable", where=f"env: {key}",
                           fix="use letters, digits and _ for names; no NUL in values")
    if name is not None and not _NAME.fullmatch(name):
        raise BadInput(f"{name!r} is not a valid container name", where="name",
                       fix="letters, digits, _ . - (starting with a letter or digit)")
    for cpuset, what in ((cpuset_cpus, "cpuset_cpus"), (cpuset_mems, "cpuset_mems")):
        if cpuset is not None and not re.fullmatch(r"[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*",
                                                   cpuset):
            raise BadInput(f"{cpuset!r} is not a cpuset list", where=what,
                           fix="write it like 0-3,8")
    return ContainerSpec(
        image=image, command=tuple(command), backend=backend, device_id=device_id, env=env,
        mounts=_mounts(mounts, must_exist=not planned), cpuset_cpus=cpuset_cpus,
        cpuset_mems=cpuset_mems, name=name,
        workdir=workdir, user=user, labels=dict(labels or {}),
        group_add=tuple(host_group(g) for g in ROCM_GROUPS) if backend == "hip" else ())


def _mounts(given: Sequence[Mount | tuple[str, bool]], must_exist: bool = True
            ) -> tuple[Mount, ...]:
    out: dict[str, Mount] = {}
    for m in given:
        mount = m if isinstance(m, Mount) else Mount(str(m[0]), bool(m[1]))
        path = os.path.normpath(str(mount.path))
        where = f"mount {mount.path}"
        if not os.path.isabs(path):
            raise BadInput("mount paths must be absolute (they are mounted at the same path "
                           "inside)", where=where, fix=f"use {os.path.abspath(path)}")
        if any(c in path for c in ",\n\0"):
            raise BadInput("mount paths may not contain commas or newlines", where=where,
                           fix="move the run directory to a plain path")
        if path == "/" or any(path == p or path.startswith(p + "/") for p in _PROTECTED):
            raise BadInput("mounting there would hide the image's own files", where=where,
                           fix="keep run directories, models and caches elsewhere")
        if must_exist and not os.path.exists(path):
            raise BadInput("the host path does not exist", where=where,
                           fix="create it first (docker would otherwise create it as root)")
        previous = out.get(path)
        if previous is not None and previous.read_only != mount.read_only:
            raise BadInput("mounted twice, read-only and read-write", where=where,
                           fix="mount it once")
        out[path] = Mount(path, mount.read_only)
    return tuple(out.values())


def host_group(name: str) -> str:
    """The host's numeric GID for `name`, else the name itself.

    ROCm device nodes are owned by the host's video/render groups, and a container needs
    those numeric IDs; a name is looked up in the *image's* /etc/group, where `render` is
    often missing (docker then refuses to start) or has another number.
    """
    try:
        return str(grp.getgrnam(name).gr_gid)
    except KeyError:
        return name


def numa_node_cpus(node: int) -> str:
    path = Path(f"/sys/devices/system/node/node{node}/cpulist")
    try:
        return path.read_text().strip()
    except OSError:
        raise BadInput(f"NUMA node {node} does not exist on this host", where=str(path),
                       fix="turn layout.numa off, or check `numactl --hardware`") from None


# --------------------------------------------------------------------------- the two forms

def run_kwargs(spec: ContainerSpec) -> dict[str, Any]:
    """Keyword arguments for docker-py's `client.containers.run(**kwargs)` (detached)."""
    from docker.types import DeviceRequest
    from docker.types import Mount as DockerMount

    kw: dict[str, Any] = {
        "image": spec.image,
        "command": list(spec.command),
        "detach": True,
        "network_mode": "host",
        "environment": dict(spec.env),
        "mounts": [DockerMount(target=m.path, source=m.path, type="bind",
                               read_only=m.read_only) for m in spec.mounts],
        "labels": dict(spec.labels),
    }
    if spec.name:
        kw["name"] = spec.name
    if spec.user:
        kw["user"] = spec.user
    if spec.workdir:
        kw["working_dir"] = spec.workdir
    if spec.backend == "hip":
        kw["devices"] = [f"{d}:{d}:rwm" for d in ROCM_DEVICES]
        kw["group_add"] = list(spec.group_add)
        kw["security_opt"] = ["seccomp=unconfined"]
        kw["ipc_mode"] = "host"
        kw["shm_size"] = ROCM_SHM_SIZE
    elif spec.backend == "cuda":
        kw["device_requests"] = [DeviceRequest(device_ids=[str(spec.device_id)],
                                               capabilities=[["gpu"]])]
    if spec.cpuset_cpus:
        kw["cpuset_cpus"] = spec.cpuset_cpus
    if spec.cpuset_mems:
        kw["cpuset_mems"] = spec.cpuset_mems
    return kw


def run_argv(spec: ContainerSpec, *, detach: bool = True, remove: bool = False) -> list[str]:
    """The `docker run` argv equivalent to run_kwargs(spec), flag for flag.

    For reproduce.sh, `detach=False, remove=True` gives the foreground form.
    """
    argv = ["docker", "run"]
    if detach:
        argv.append("--detach")
    if remove:
        argv.append("--rm")
    if spec.name:
        argv += ["--name", spec.name]
    argv += ["--network", "host"]
    if spec.backend == "hip":
        for d in ROCM_DEVICES:
            argv += ["--device", d]
        for g in spec.group_add:
            argv += ["--group-add", g]
        argv += ["--security-opt", "seccomp=unconfined", "--ipc", "host",
                 "--shm-size", ROCM_SHM_SIZE]
    elif spec.backend == "cuda":
        argv += ["--gpus", f"device={spec.device_id}"]
    if spec.cpuset_cpus:
        argv += ["--cpuset-cpus", spec.cpuset_cpus]
    if spec.cpuset_mems:
        argv += ["--cpuset-mems", spec.cpuset_mems]
    if spec.user:
        argv += ["--user", spec.user]
    if spec.workdir:
        argv += ["--workdir", spec.workdir]
    for key, value in spec.env.items():
        argv += ["--env", f"{key}={value}"]
    for m in spec.mounts:
        fields = ["type=bind", f"source={m.path}", f"target={m.path}"]
        if m.read_only:
            fields.append("readonly")
        argv += ["--mount", ",".join(_csv_field(f) for f in fields)]
    for key, value in spec.labels.items():
        argv += ["--label", f"{key}={value}"]
    argv.append(spec.image)
    argv += list(spec.command)
    return argv


def _csv_field(text: str) -> str:
    """docker reads `--mount` as one CSV record: a path with a comma or quote is quoted."""
    if any(c in text for c in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


def run_command_text(spec: ContainerSpec, **kw: bool) -> str:
    """run_argv as one shell-quoted line, for reproduce.sh (runner/base/shellscript.py)."""
    return shellscript.join(run_argv(spec, **kw))


# --------------------------------------------------------------------------- lifecycle

def start(spec: ContainerSpec, client: Any = None) -> Any:
    """Start the container detached; returns the docker-py Container."""
    from docker.errors import APIError, ImageNotFound

    client = client or connect()
    try:
        # Checked first because containers.run would otherwise try to pull the tag from a
        # registry: a worker must run the image that was built, never a namesake.
        client.images.get(spec.image)
    except ImageNotFound:
        raise BadInput(f"image {spec.image} is not in the docker engine", where="image",
                       fix="build it with `runner image build --iree ...`") from None
    try:
        return client.containers.run(**run_kwargs(spec))
    except APIError as e:
        raise ToolFailed(f"docker could not start {spec.name or spec.image}: "
                         f"{e.explanation or e}", where=spec.name or "container",
                         fix=f"try by hand: {run_command_text(spec)}") from e


def wait(container: Any, timeout: float | None = None) -> int | None:
    """The exit code, or None if the container is still running after `timeout` seconds."""
    import requests

    try:
        result = container.wait(timeout=timeout)
    except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
        return None
    return int(result.get("StatusCode", -1))


def poll(container: Any) -> int | None:
    """Non-blocking: the exit code if the container has finished, else None."""
    container.reload()
    state = container.attrs.get("State", {})
    if state.get("Status") in ("exited", "dead"):
        return int(state.get("ExitCode", -1))
    return None


def logs(container: Any, tail: int | None = None) -> str:
    """stdout and stderr, interleaved as written."""
    data = container.logs(stdout=True, stderr=True, tail=tail if tail is not None else "all")
    return data.decode(errors="replace")


def kill(container: Any, remove: bool = True) -> None:
    """SIGKILL the container if it runs, then (by default) remove it."""
    from docker.errors import APIError, NotFound

    try:
        container.reload()
        if container.status in ("running", "restarting", "paused"):
            container.kill()
    except NotFound:
        return
    except APIError as e:
        if "is not running" not in str(e):
            raise
    if remove:
        with contextlib.suppress(NotFound):
            container.remove(force=True)


def covering_mounts(paths: list[tuple[Path, bool]]) -> list[tuple[str, bool]]:
    """Each directory once, nested ones dropped (a read-write parent wins over a child).
    Paths are made absolute: a container does not share the caller's working directory."""
    out: dict[str, bool] = {}
    for path, read_only in sorted(((p.resolve(), ro) for p, ro in paths), key=lambda x: x[0]):
        parent = next((Path(m) for m in out if path.is_relative_to(m)), None)
        if parent is None:
            out[str(path)] = read_only
        elif not read_only:
            out[str(parent)] = False
    return list(out.items())

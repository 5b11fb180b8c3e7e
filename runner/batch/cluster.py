"""Slurm facts shared by the submitter (slurm.py), the node tasks (node.py) and `runner
status`: the options and their flags, node keys and state files, and the squeue/scontrol
queries. Standard library only, so the CLI can import it (for `runner run`'s flags and
`runner status`) without loading numpy or IREE.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runner.base.errors import BadInput, ToolFailed
from runner.base.fileio import atomic_write_json
from runner.rundir.directory import RunDir

# SlurmOptions field -> its flag (the argparse dest is the flag's name without dashes);
# the CLI's grammar (runner/cli/grammar.py, add_slurm) defines the flags.
# `image` is the shared --image: the docker node executor's image.
SLURM_FLAGS = {"nodes": "--nodes", "partition": "--slurm-partition", "time": "--slurm-time",
               "account": "--account", "cpus_per_node": "--cpus-per-node",
               "node_executor": "--node-executor", "image": "--image",
               "sbatch_args": "--sbatch-arg", "max_resubmits": "--max-resubmits"}

SLURM_DIR = "slurm"
NODES_DIR = "nodes"
# squeue states in which an array task may still run or come back (requeue, suspend).
LIVE_STATES = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_FED",
    "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "SUSPENDED", "STOPPED",
    "RESV_DEL_HOLD",
})
SLURM_COMMANDS = ("sbatch", "squeue", "scontrol", "scancel")


@dataclass(frozen=True)
class SlurmOptions:
    """What `--executor slurm` asks of the cluster; recorded in run.json for resume/status."""

    nodes: int = 1
    partition: str | None = None
    time: str | None = None
    account: str | None = None
    node_executor: str = "local"
    image: str | None = None
    cpus_per_node: int | None = None  # None: --exclusive, the whole node
    sbatch_args: tuple[str, ...] = ()
    max_resubmits: int = 3
    poll_seconds: float = 2.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["sbatch_args"] = list(self.sbatch_args)
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SlurmOptions:
        known = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        known["sbatch_args"] = tuple(known.get("sbatch_args", ()))
        return cls(**known)

    def validated(self) -> SlurmOptions:
        if self.nodes < 1:
            raise BadInput(f"--nodes must be at least 1, not {self.nodes}", where="--nodes",
                           fix="use --nodes 1 or more")
        if self.cpus_per_node is not None and self.cpus_per_node < 1:
            raise BadInput(f"--cpus-per-node must be at least 1, not {self.cpus_per_node}",
                           where="--cpus-per-node",
                           fix="use 1 or more, or leave it out for the whole node")
        if self.max_resubmits < 0:
            raise BadInput("--max-resubmits cannot be negative", where="--max-resubmits",
                           fix="use 0 (never resubmit) or more")
        if self.node_executor not in ("local", "docker"):
            raise BadInput(f"unknown node executor {self.node_executor!r}",
                           where="--node-executor", fix="use local or docker")
        if self.node_executor == "docker" and not self.image:
            raise BadInput("the docker node executor needs a harness image", where="--image",
                           fix="build one with `runner image build` and pass its tag; "
                           "every node must have it (or pull it)")
        if self.time is not None and not SLURM_TIME.fullmatch(self.time):
            raise BadInput(f"{self.time!r} is not a Slurm time limit",
                           where="--slurm-time",
                           fix="use sbatch --time's syntax: MM, MM:SS, HH:MM:SS, D-HH, "
                           "D-HH:MM, D-HH:MM:SS or UNLIMITED, e.g. 2:00:00")
        bad = [a for a in self.sbatch_args if not a.startswith("-")]
        if bad:
            raise BadInput(f"--sbatch-arg {bad[0]!r} is not an sbatch option",
                           where="--sbatch-arg", fix="pass options as --sbatch-arg=--gres=gpu:8")
        return self


# sbatch --time's forms (Slurm's man page): minutes, minutes:seconds, hours:minutes:seconds,
# days-hours, days-hours:minutes, days-hours:minutes:seconds; UNLIMITED / INFINITE.
SLURM_TIME = re.compile(r"\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|UNLIMITED|INFINITE", re.I)


def given_slurm_options(args: argparse.Namespace) -> dict[str, Any]:
    """The SlurmOptions fields the command line set (flags not given are left out)."""
    given = {field: getattr(args, flag.lstrip("-").replace("-", "_"), None)
             for field, flag in SLURM_FLAGS.items()}
    given["sbatch_args"] = tuple(given["sbatch_args"] or ()) or None
    return {k: v for k, v in given.items() if v is not None}


def slurm_options(args: argparse.Namespace, recorded: dict[str, Any] | None = None
                  ) -> SlurmOptions:
    """Options from the command line; flags not given fall back to `recorded` (resume)."""
    base = SlurmOptions.from_dict(recorded) if recorded else SlurmOptions()
    merged = {**base.to_dict(), **given_slurm_options(args)}
    return SlurmOptions.from_dict(merged).validated()


def slurm_flags(options: SlurmOptions) -> list[str]:
    """The `runner run` flags that ask for `options` (what a bench's per-combination
    reproduce.sh re-runs); the inverse of `slurm_options`."""
    out = ["--executor", "slurm"]
    defaults = SlurmOptions()
    for field, flag in SLURM_FLAGS.items():
        value = getattr(options, field)
        if field == "image" and options.node_executor == "local":
            continue  # only the docker node executor uses an image
        if field == "sbatch_args":
            out += [f"{flag}={a}" for a in value]
        elif value is not None and (value != getattr(defaults, field) or field == "nodes"):
            out += [flag, str(value)]
    return out


def check_slurm_commands() -> None:
    missing = [c for c in SLURM_COMMANDS if shutil.which(c) is None]
    if missing:
        raise ToolFailed(f"Slurm commands not found: {', '.join(missing)}",
                         where="--executor slurm",
                         fix="run on a login node of the cluster (or bring up a one-node test "
                         "cluster with scripts/slurm_setup.sh)")


def node_key(job_index: int, task: int) -> str:
    return f"j{job_index}n{task}"


def worker_prefix(key: str) -> str:
    return f"{key}-"


def node_of(worker: str) -> str | None:
    """The node key in a worker name (`j0n1-w000` -> `j0n1`); None for a local run's."""
    key, sep, _ = worker.partition("-")
    return key if sep and re.fullmatch(r"j\d+n\d+", key) else None


def node_state_path(run_dir: Path, key: str) -> Path:
    return Path(run_dir) / SLURM_DIR / NODES_DIR / f"{key}.json"


def node_log_path(run_dir: Path, key: str) -> Path:
    return RunDir(run_dir).log_path(f"node-{key}")


def read_node_state(run_dir: Path, key: str) -> dict[str, Any]:
    try:
        return json.loads(node_state_path(run_dir, key).read_text())
    except (OSError, ValueError):
        return {}


def write_node_state(run_dir: Path, key: str, state: dict[str, Any]) -> None:
    atomic_write_json(node_state_path(run_dir, key), state)


# --- talking to Slurm -------------------------------------------------------------------

def run_command(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def live_tasks(job_ids: list[str]) -> dict[str, dict[str, str]] | None:
    """`<job>_<task>` -> {state, nodes} for array tasks Slurm still holds in a live state;
    None when squeue itself failed (then nothing can be concluded this round)."""
    if not job_ids:
        return {}
    try:
        proc = run_command(["squeue", "-h", "-r", "-j", ",".join(job_ids), "-o", "%i|%T|%N"])
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        # Every id already purged from the controller: nothing of ours is live.
        return {} if "Invalid job id" in proc.stderr else None
    out = {}
    for line in proc.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[1] in LIVE_STATES:
            out[parts[0]] = {"state": parts[1], "nodes": parts[2]}
    return out


def job_record(slurm_id: str) -> dict[str, str]:
    """Final JobState/ExitCode/NodeList/Restarts of one array task, while the controller
    still remembers it (MinJobAge); {} after that."""
    try:
        proc = run_command(["scontrol", "show", "job", "-o", slurm_id])
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if proc.returncode != 0:
        return {}
    out = {}
    for key in ("JobState", "ExitCode", "NodeList", "Restarts", "Reason", "RunTime"):
        m = re.search(rf"\b{key}=(\S+)", proc.stdout)
        if m:
            out[key] = m.group(1)
    return out


def cancel(job_ids: list[str]) -> None:
    if job_ids:
        run_command(["scancel", *job_ids])


def slurm_version() -> str:
    try:
        return run_command(["sbatch", "--version"]).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def task_ids(slurm: dict[str, Any]) -> dict[str, str]:
    """Node key -> `<job>_<task>` for every array task a run's `slurm` record (in run.json)
    says it ever submitted."""
    return {node_key(job["index"], t): f"{job['job_id']}_{t}"
            for job in slurm.get("jobs", []) for t in range(job["tasks"])}

"""`runner run`: plan -> compile -> queue -> workers -> completeness check, resumable.

The run dir is the whole state: `run.json` (manifest), the queue, the sample store, the
workers' tasks, logs and stats. A killed run, or a killed worker, loses only in-flight
samples; `--resume` refills the queue with exactly the missing ones.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.batch.executors import DockerExecutor, LocalExecutor
from runner.batch.queue import WorkQueue
from runner.batch.worker import stats_path, write_task
from runner.compiled_model import CompiledModel, compile_model
from runner.errors import RunnerError
from runner.fileio import atomic_write_json, atomic_write_text
from runner.layout import LayoutSpec, Plan, plan_workers
from runner.mlperf_data import CAPTIONS_FILE, load_captions
from runner.profile import Profile, profile_from_raw
from runner.provenance import host_info, iree_provenance
from runner.store import SampleStore

MANIFEST = "run.json"
LOG_TAIL_LINES = 20


@dataclass
class RunOutcome:
    run_dir: Path
    requested: int
    done: int
    seconds: float
    deaths: list[dict[str, Any]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.done == self.requested


def read_manifest(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / MANIFEST
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as e:
        raise RunnerError("not a run dir (no run.json)", where=str(run_dir),
                          fix="pass the --out directory of an earlier `runner run`") from e
    except ValueError as e:
        raise RunnerError(f"corrupt run manifest: {e}", where=str(path)) from e


def validate_ids(ids: list[int], where: str, captions_path: Path | None = None) -> list[int]:
    if not ids:
        raise RunnerError("no samples requested", where=where, fix="use --count N or --ids FILE")
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise RunnerError(f"sample {dup} is requested twice", where=where)
    captions = load_captions(captions_path or CAPTIONS_FILE)
    bad = [i for i in ids if not 0 <= i < len(captions)]
    if bad:
        raise RunnerError(f"sample ids {bad[:5]} are outside the captions file "
                          f"{captions.path} (0..{len(captions) - 1})", where=where)
    return sorted(ids)


def read_ids_file(path: Path) -> list[int]:
    try:
        return [int(tok) for tok in path.read_text().split()]
    except OSError as e:
        raise RunnerError(f"cannot read ids file: {e}", where=str(path)) from e
    except ValueError as e:
        raise RunnerError(f"ids file must hold whitespace-separated integers: {e}",
                          where=str(path)) from e


def _log_tail(path: Path) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
    except OSError:
        return "(no log)"


class Progress:
    """Samples/s and ETA on stderr: a rewritten line on a terminal, a line every 10 s in logs."""

    def __init__(self, total: int, already: int):
        self.total, self.already = total, already
        self.start = time.monotonic()
        self.last_print = 0.0
        self.tty = sys.stderr.isatty()

    def update(self, done: int, workers: int, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.last_print < (1.0 if self.tty else 10.0):
            return
        self.last_print = now
        rate = (done - self.already) / max(now - self.start, 1e-9)
        eta = f"{(self.total - done) / rate:.0f}s" if rate > 0 else "?"
        line = (f"{done}/{self.total} samples  {rate:.2f} samples/s  "
                f"ETA {eta}  workers alive: {workers}")
        print(("\r" + line) if self.tty else line, end="\n" if final or not self.tty else "",
              file=sys.stderr, flush=True)


def start_workers(run_dir: Path, plan: Plan, compiled: CompiledModel, captions: str,
                  executor) -> tuple[dict[str, Any], dict[str, str]]:
    """Writes each worker's task file and starts it: (handles, exact commands) by worker name.

    Shared by a local run and by each node task of a Slurm run (runner/batch/node.py), which
    differ only in who fills the queue and who may write run.json.
    """
    handles: dict[str, Any] = {}
    commands: dict[str, str] = {}
    try:
        for worker in plan.workers:
            task = write_task(run_dir, worker.to_dict(), compiled, captions)
            stats_path(run_dir, worker.name).unlink(missing_ok=True)
            commands[worker.name] = executor.describe(worker, task)
            handles[worker.name] = executor.start(worker, task,
                                                  run_dir / "logs" / f"{worker.name}.log")
    except BaseException:
        for handle in handles.values():
            handle.kill()
        raise
    return handles, commands


def watch_workers(run_dir: Path, handles: dict[str, Any], requested: set[int],
                  progress: Progress | None = None) -> list[dict[str, Any]]:
    """Waits for every worker; hands a dead worker's batches to the survivors.

    Any exception (Ctrl-C here, SIGTERM on a Slurm node) kills the workers still alive
    before it propagates, so nothing keeps writing into the run dir behind the caller.
    """
    store, queue = SampleStore(run_dir), WorkQueue(run_dir)
    deaths: list[dict[str, Any]] = []
    alive = dict(handles)
    try:
        while alive:
            for name, handle in list(alive.items()):
                rc = handle.poll()
                if rc is None:
                    continue
                del alive[name]
                if rc != 0:
                    returned = queue.release(name)
                    tail = _log_tail(run_dir / "logs" / f"{name}.log")
                    deaths.append({"worker": name, "exit_code": rc, "requeued": returned,
                                   "log_tail": tail})
                    print(f"\nworker {name} died (exit {rc}); {len(returned)} batch(es) back "
                          f"in the queue for the others. Last log lines:\n{tail}",
                          file=sys.stderr, flush=True)
            if progress is not None:
                progress.update(len(store.done_ids() & requested), len(alive))
            time.sleep(0.2)
    except BaseException:
        for handle in alive.values():
            handle.kill()
        raise
    return deaths


def execute(run_dir: Path, plan: Plan, manifest: dict[str, Any], executor=None) -> RunOutcome:
    """Fills the queue, starts every worker, watches them until the queue is drained."""
    executor = executor or LocalExecutor()
    store, queue = SampleStore(run_dir), WorkQueue(run_dir)
    requested = set(manifest["sample_ids"])
    missing = requested - store.done_ids()
    queue.fill(missing, plan.layout.batch_size)
    compiled = CompiledModel.from_dict(manifest["compiled"])
    progress = Progress(len(requested), len(requested) - len(missing))
    start = time.monotonic()
    handles, commands = start_workers(run_dir, plan, compiled, manifest["captions"], executor)
    manifest["worker_commands"] = commands
    atomic_write_json(run_dir / MANIFEST, manifest)
    deaths = watch_workers(run_dir, handles, requested, progress)
    done = len(store.done_ids() & requested)
    progress.update(done, 0, final=True)
    return RunOutcome(run_dir, len(requested), done, time.monotonic() - start, deaths)


def _worker_stats(run_dir: Path, names: list[str]) -> dict[str, Any]:
    out = {}
    for name in names:
        path = stats_path(run_dir, name)
        if path.is_file():
            out[name] = json.loads(path.read_text())
    return out


def finish(run_dir: Path, plan: Plan, manifest: dict[str, Any], outcome: RunOutcome,
           worker_names: list[str] | None = None) -> None:
    """Records the attempt and the completeness check; `worker_names` defaults to the plan's
    (a Slurm run passes every node's workers, planned on the nodes)."""
    store = SampleStore(run_dir)
    requested = set(manifest["sample_ids"])
    done = store.done_ids()
    manifest.setdefault("attempts", []).append({
        "seconds": outcome.seconds, "deaths": outcome.deaths,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    names = [w.name for w in plan.workers] if worker_names is None else worker_names
    manifest["workers"] = _worker_stats(run_dir, names)
    manifest["status"] = "complete" if requested <= done else "incomplete"
    manifest["missing"] = sorted(requested - done)
    manifest["unexpected"] = sorted(done - requested)
    atomic_write_json(run_dir / MANIFEST, manifest)


def _image_info(executor) -> dict[str, Any] | None:
    if not isinstance(executor, DockerExecutor):
        return None
    from runner.docker.image import image_info

    return image_info(executor.image)


def make_executor(name: str, run_dir: Path, profile: Profile, image: str | None = None,
                  captions: Path | None = None):
    """`local` or `docker` (which needs the harness image tag)."""
    if name == "local":
        return LocalExecutor()
    if name != "docker":
        raise RunnerError(f"unknown executor {name!r}", where="--executor",
                          fix="use local or docker")
    if not image:
        raise RunnerError("the docker executor needs a harness image", where="--image",
                          fix="build one with `runner image build --from wheels:3.13.0` and "
                          "pass its tag")
    model = profile.model
    read_only = [model.base_dir, Path(model.resolve(model.tokenizer_dir)),
                 (captions or CAPTIONS_FILE).resolve().parent]
    read_only += [Path(model.resolve(sub.weights)).parent
                  for sub in model.submodels.values() if sub.weights and "://" not in sub.weights]
    return DockerExecutor(image, run_dir, read_only)


def _image_lines(image: dict[str, Any] | None) -> list[str]:
    """For a docker run: rebuild the harness image (a content-addressed tag, so an unchanged
    build is a cache hit) and check it is the very image the run used."""
    if not image:
        return []
    labels = image.get("labels", {})
    source = labels.get("org.iree-sdxl-runner.source", "?")
    base = labels.get("org.iree-sdxl-runner.base-image", "")
    build = ["runner", "image", "build", "--from", source, "--tag", image["ref"]]
    if base:
        build += ["--base-image", base]
    return [
        f"# Harness image {image['ref']} ({image['id']}); `--dry-run` prints its docker build.",
        shlex.join(build),
        f'test "$(docker image inspect --format {{{{.Id}}}} {shlex.quote(image["ref"])})" = '
        f'{shlex.quote(image["id"])} || echo "warning: image differs from the recorded one" >&2',
    ]


def _slurm_lines(slurm: dict[str, Any] | None) -> list[str]:
    """A Slurm run's exact sbatch commands and batch scripts (runner/batch/slurm.py)."""
    if not slurm or not slurm.get("jobs"):
        return []
    lines = ["", "# The Slurm jobs that command submitted for this run, exactly (one array task "
             "per node;", "# each node plans and starts its own workers, listed below):"]
    for job in slurm["jobs"]:
        lines.append(f"#   job {job.get('job_id', '?')} ({job.get('reason', '')}):")
        lines.append(f"#     {shlex.join(job['sbatch'])}")
        lines += [f"#     | {line}" for line in job.get("script_text", "").splitlines()]
    return lines


def write_reproduce(run_dir: Path, manifest: dict[str, Any]) -> Path:
    argv = manifest["argv"]
    out_at = argv.index("--out") if "--out" in argv else None
    rerun = [a for i, a in enumerate(argv) if out_at is None or i not in (out_at, out_at + 1)]
    lines = [
        "#!/usr/bin/env bash",
        f"# Reproduces run {run_dir.name}: profile {manifest['profile']}, "
        f"{len(manifest['sample_ids'])} samples, IREE "
        f"{manifest['iree']['iree.runtime'].get('version', '?')}.",
        "# Usage: reproduce.sh [OUT_DIR]   (default: <this run dir>-reproduced)",
        "set -euo pipefail",
        f'out="${{1:-{shlex.quote(str(run_dir.resolve()))}-reproduced}}"',
        *_image_lines(manifest.get("image")),
        f'runner {shlex.join(rerun)} --out "$out"',
        *_slurm_lines(manifest.get("slurm")),
        "",
        "# The worker processes this run started (after the driver filled the queue):",
        *[f"#   {cmd}" for cmd in manifest.get("worker_commands", {}).values()],
    ]
    path = run_dir / "reproduce.sh"
    atomic_write_text(path, "\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


def new_run(profile: Profile, plan: Plan, sample_ids: list[int], run_dir: Path,
            argv: list[str], *, executor_name: str, image: dict[str, Any] | None,
            captions: Path | None = None, compile_fn=compile_model) -> dict[str, Any]:
    """Compiles, creates the run dir and writes its manifest; runs nothing.

    `compile_fn(profile, batch, vae_batch)` is `compile_model` on this host, or a compile
    inside a harness image (`runner validate`), whose IREE is then the one recorded."""
    if (run_dir / MANIFEST).exists():
        raise RunnerError("this directory already holds a run", where=str(run_dir),
                          fix=f"use `runner run --resume {run_dir}` or another --out")
    layout = plan.layout
    compiled = compile_fn(profile, layout.batch_size, layout.vae_batch_size)
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = {
        "kind": "run", "status": "running", "argv": argv, "profile": profile.name,
        "profile_path": str(profile.path), "profile_config": profile.to_dict(),
        "layout": layout.to_dict(), "plan": plan.to_dict(), "sample_ids": sample_ids,
        "captions": str((captions or CAPTIONS_FILE).resolve()),
        "compiled": compiled.to_dict(), "host": host_info(),
        "iree": (image or {}).get("provenance") or iree_provenance(),
        "executor": executor_name, "image": image,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    atomic_write_json(run_dir / MANIFEST, manifest)
    atomic_write_text(run_dir / "sample_ids.txt", "\n".join(map(str, sample_ids)) + "\n")
    write_reproduce(run_dir, manifest)
    return manifest


def start_run(profile: Profile, plan: Plan, sample_ids: list[int], run_dir: Path,
              argv: list[str], executor=None, captions: Path | None = None,
              compile_fn=None) -> RunOutcome:
    """A new run to the end. Modules come from `compile_fn`, by default from the compiler
    that goes with the executor (the harness image's own, for docker)."""
    executor = executor or LocalExecutor()
    manifest = new_run(profile, plan, sample_ids, run_dir, argv, executor_name=executor.name,
                       image=_image_info(executor), captions=captions,
                       compile_fn=compile_fn or executor.compiler(run_dir))
    outcome = execute(run_dir, plan, manifest, executor)
    finish(run_dir, plan, manifest, outcome)
    write_reproduce(run_dir, manifest)
    return outcome


def recorded_profile(run_dir: Path) -> Profile:
    """The profile and layout a run was made with, from its manifest."""
    manifest = read_manifest(run_dir)
    profile = profile_from_raw(manifest["profile_config"], Path(manifest["profile_path"]))
    layout = LayoutSpec.from_dict(manifest["layout"], profile.target.backend,
                                  f"{run_dir / MANIFEST}: layout")
    return dataclasses.replace(profile, layout=layout)


def prepare_resume(run_dir: Path, requested: Profile | None = None, compile_fn=compile_model
                   ) -> tuple[dict[str, Any], Profile]:
    """The manifest (compiled modules re-checked, status running) and recorded profile.

    Results are not bit-identical across layouts or compilers, so a resume that would
    change any of them is refused rather than silently mixing images.
    """
    manifest = read_manifest(run_dir)
    profile = recorded_profile(run_dir)
    if requested is not None and (requested.to_dict() != profile.to_dict()
                                  or requested.layout != profile.layout):
        raise RunnerError(
            f"run was made with profile {profile.name} and layout "
            f"{profile.layout.to_dict()}; resuming with {requested.name} / "
            f"{requested.layout.to_dict()} would mix results", where=str(run_dir / MANIFEST),
            fix="resume without --profile/--set/layout flags, or start a new --out")
    layout = profile.layout
    compiled = compile_fn(profile, layout.batch_size, layout.vae_batch_size)
    recorded_keys = [c["key"] for c in manifest["compiled"]["compiled"]]
    if [c.key for c in compiled.compiled] != recorded_keys:
        raise RunnerError("the compiled modules differ from the ones this run started with "
                          "(another iree-compile or changed flags/MLIR)",
                          where=str(run_dir / MANIFEST),
                          fix="resume with the IREE the run started with, or start a new --out")
    manifest["compiled"] = compiled.to_dict()
    manifest["status"] = "running"
    return manifest, profile


def resume_run(run_dir: Path, requested: Profile | None = None, executor=None) -> RunOutcome:
    """Completes a run with the profile, layout and compiled modules it was made with."""
    manifest, profile = prepare_resume(run_dir, requested,
                                       (executor or LocalExecutor()).compiler(run_dir))
    plan = plan_for(profile)
    outcome = execute(run_dir, plan, manifest, executor)
    finish(run_dir, plan, manifest, outcome)
    write_reproduce(run_dir, manifest)
    return outcome


def plan_for(profile: Profile) -> Plan:
    return plan_workers(profile.layout, where=str(profile.path))

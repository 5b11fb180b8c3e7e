"""`runner gpu-check prepare` and `run`: the two halves of the check, as a library.

`prepare` runs `runner` commands that compile into the carry (each printed as it runs), then
writes the carry's manifest, which holds the plan `run` follows. `run` reads the carry,
installs the carried wheels where this Python lacks the IREE runtime (or LoadGen,
ml_dtypes, numpy, yaml, regex), and runs the plan's steps inside the budget, rewriting
gpu_check.json after every step (a machine taken back mid-run leaves the steps that
finished). A signal stops the running step's command and everything it started; the summary
of what finished is written and the signal goes on to the CLI, which exits 128 + its number.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.base import gpu_info, shellscript
from runner.base.errors import BadInput, StepFailed, ToolFailed
from runner.base.fileio import atomic_write_json, atomic_write_text
from runner.base.signals import exit_code, signal_name
from runner.base.steps import StepStatus
from runner.gpucheck import plan, steps, summary
from runner.gpucheck.device import runs_profile
from runner.gpucheck.plan import CARRY_KIND, CARRY_MANIFEST, REPORT, RESULTS_SUMMARY, Step, shown
from runner.gpucheck.preflight import CheckPreflight, gpu_check_preflight
from runner.inputs.jsonfile import read_json
from runner.preflight.check import Preflight

Say = Callable[[str], None]


def say(line: str) -> None:
    """Progress on stderr (stdout holds a dry run's commands)."""
    print(f"gpu-check: {line}", file=sys.stderr, flush=True)


def children_env(extra: dict[str, str], site: Path | None = None) -> dict[str, str]:
    """What each child `runner` command is given besides this environment: this runner
    first on PYTHONPATH (and the carried wheels' site where they were installed)."""
    paths = [plan.runner_root(), *([str(site)] if site else []),
             *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    env = {**extra, "PYTHONPATH": os.pathsep.join(dict.fromkeys(p for p in paths if p))}
    if site is not None:
        env["PATH"] = os.pathsep.join([str(site / "bin"), os.environ.get("PATH", "")])
    return env


# ---------------------------------------------------------------------------------- prepare


@dataclass(frozen=True)
class PrepareRequest:
    profile: str
    carry: Path
    batch_sizes: list[int] | None
    python: str
    wheels: bool
    dry_run: bool
    tiny_count: int = plan.TINY_COUNT


def prepare(request: PrepareRequest) -> int:
    out = sys.stdout  # a dry run's commands
    carry = request.carry.absolute()
    todo, manifest = plan.prepare_plan(request.profile, carry, request.batch_sizes,
                                       request.python, request.wheels, request.tiny_count)
    env = children_env({})
    if request.dry_run:
        for step in todo:
            print(f"# {step.name}\n{shown(step.argv, env)}", file=out)
        print(f"# then write {shellscript.quote(str(carry / plan.SHORT_USER_CONF))}, "
              f"{shellscript.quote(str(carry / CARRY_MANIFEST))} (the plan) and "
              f"{shellscript.quote(str(carry / plan.NOTES))}", file=out)
        return 0
    carry.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    done = []
    for i, step in enumerate(todo, 1):
        say(f"[{i}/{len(todo)}] {step.name}: {shown(step.argv)}")
        t0 = time.monotonic()
        code = _to_stderr(step.argv, {**os.environ, **env})
        if code != 0:
            raise StepFailed(f"step {step.name!r} exited {code}", where=shown(step.argv),
                             fix="see its output above; the carry keeps what finished, and "
                             "the same prepare again reuses the compile cache")
        done.append({"step": step.name, "command": shown(step.argv),
                     "seconds": round(time.monotonic() - t0, 1)})
    exports = carry / "cache" / "exports"
    atomic_write_text(carry / plan.SHORT_USER_CONF, plan.user_conf_text(manifest))
    manifest.update(
        compiled=done, created=summary.now(), seconds=round(time.monotonic() - started, 1),
        seeded_exports=sorted(d.name for d in exports.glob("*")
                              if (d / "weights.spec.json").is_file()),
        wheels=sorted(p.name for p in (carry / "wheels").glob("*.whl")),
        bytes=sum(p.stat().st_size for p in carry.rglob("*") if p.is_file()))
    atomic_write_json(carry / CARRY_MANIFEST, manifest)
    atomic_write_text(carry / plan.NOTES, plan.notes_text(manifest))
    say(f"carry ready: {carry} ({manifest['bytes'] / 1e6:.1f} MB); on the GPU machine: "
        f"runner gpu-check run --carry {shellscript.quote(str(carry))} --out results")
    return 0


def _to_stderr(argv: list[str], env: dict[str, str]) -> int:
    """Runs a prepare step with its output on this process's stderr (stdout holds a dry
    run's commands); where stderr is no file (the CLI called in-process), its output is
    copied there when it ends."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation among them
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                              env=env, check=False)
        sys.stderr.write(proc.stdout + proc.stderr)
        return proc.returncode
    return subprocess.run(argv, stdout=fd, env=env, check=False).returncode


# -------------------------------------------------------------------------------------- run


def read_manifest(carry_arg: str) -> tuple[Path, dict]:
    carry = Path(carry_arg).absolute()
    fix = "give --carry the directory `runner gpu-check prepare --out DIR` wrote (copied whole)"
    if not carry.is_dir():
        raise BadInput("no such directory", where=f"--carry {carry}", fix=fix)
    if not (carry / CARRY_MANIFEST).is_file():
        raise BadInput(f"not a GPU check carry: it has no {CARRY_MANIFEST}",
                       where=f"--carry {carry}", fix=fix)
    manifest = read_json(carry / CARRY_MANIFEST, where=f"--carry {carry / CARRY_MANIFEST}",
                         what="GPU check manifest")
    if manifest.get("kind") != CARRY_KIND or not isinstance(manifest.get("steps"), list):
        raise BadInput(f"{CARRY_MANIFEST} is not one `runner gpu-check prepare` wrote (kind "
                       f"{manifest.get('kind')!r}, no plan)", where=f"--carry {carry}",
                       fix=fix + "; a carry of scripts/gpu_check.sh: prepare it again")
    return carry, manifest


@dataclass(frozen=True)
class RunRequest:
    carry: str
    results: Path
    budget: float
    dry_run: bool
    resumed: bool  # the results hold an interrupted check: keep its steps that passed
    share_gpus: bool = False  # start beside other GPU processes (the preflight's refusal)


def _device(step: Step, manifest: dict, record: dict[str, Any]) -> None:
    """The device step, in this process: the GPU's description and whether it runs the
    profile's code (runner.gpucheck.device)."""
    t0 = time.monotonic()
    try:
        info = gpu_info.query()
    except ToolFailed as e:
        step.status, step.note = steps.FAILED, str(e)
        record["gpu"] = {"tool_error": str(e)}
        return
    verdict = runs_profile(manifest["backend"], manifest["chip"], info)
    step.command = shown(list(info.command)) if info.command else ""
    step.seconds = round(time.monotonic() - t0, 2)
    step.status = steps.FAILED if verdict.ok is False else steps.PASSED
    step.note = verdict.note
    record["gpu"] = {**info.to_dict(), "verdict": verdict.note, "runs_profile": verdict.ok}
    record["device"] = (info.line() if info.gpus else
                        f"cpu: {platform.processor() or platform.machine()} ({info.note})")


def run(request: RunRequest) -> int:
    """The check; 0 when every step passed or told what it found (a batch that did not
    fit, a profiler this IREE lacks), 1 when one failed or was skipped for the budget."""
    out = sys.stdout  # a dry run's commands
    carry, manifest = read_manifest(request.carry)
    results = request.results.absolute()
    missing = plan.missing_deps()
    site = carry / "site" if missing else None
    env = children_env({"RUNNER_CACHE_DIR": str(carry / "cache")}, site)
    todo = plan.plan_run(carry, manifest, results, site, request.share_gpus)
    checked = _preflight(CheckPreflight(carry, manifest, todo, env, results, site,
                                        request.share_gpus), request.dry_run)
    if request.dry_run:
        for step in todo:
            text = (f"{shown(gpu_info.nvidia_argv(gpu_info.NVIDIA_FIELDS))}\n# else\n"
                    f"{shown(list(gpu_info.ROCM))}\n# else\n{shown(list(gpu_info.AMD))}"
                    if step.kind == plan.DEVICE
                    else shown(step.argv, env))
            print(f"# {step.name}\n{text}", file=out)
        print(f"# then write {shellscript.quote(str(results / RESULTS_SUMMARY))} and "
              f"{shellscript.quote(str(results / REPORT))}", file=out)
        return 0
    old = _old(results) if request.resumed else {}
    previous = {s["name"]: s for s in old.get("steps", []) if s.get("status") in steps.ACCEPTED}
    results.mkdir(parents=True, exist_ok=True)
    runner = steps.StepRunner(request.budget, results / "logs", env, say)
    record: dict[str, Any] = {
        "kind": plan.RESULTS_KIND, "carry": str(carry), "profile": manifest["profile"],
        "manifest": manifest, "budget_s": request.budget, "started": summary.now(),
        "status": StepStatus.RUNNING, "steps": [],
        "preflight": checked.to_dict(),
        "runtime": {"missing_here": missing, "site": str(site) if site else None,
                    "iree_runtime": plan.runtime_version()},
        **{k: v for k, v in old.items() if k in ("gpu", "device") and "device" in previous}}
    summary.write(results, record, final=False)
    try:
        _steps(todo, previous, runner, record, results)
    except KeyboardInterrupt as e:  # the step's command is stopped; a second signal while
        # the summary is written is noted, not raised (the CLI's handler)
        record["status"] = f"interrupted: {signal_name(e)}"
        record["exit_code"] = exit_code(e)
        summary.write(results, record, final=True)
        say(f"stopped by {signal_name(e)}; what finished is in {results / REPORT}")
        raise
    ok = all(s.status in steps.ACCEPTED for s in todo)
    record["status"] = "passed" if ok else "failed"
    summary.write(results, record, final=True)
    say(f"{record['status']}: {results / REPORT}")
    return 0 if ok else 1


def _preflight(request: CheckPreflight, dry_run: bool) -> Preflight:
    """Run before any step: a failure exits 2 with every check's line (on stdout in a dry
    run, whose output it is, as `# ` comments when all passed; on stderr otherwise)."""
    return gpu_check_preflight(request).shown(dry_run, say)


def _steps(todo: list[Step], previous: dict[str, dict], runner: steps.StepRunner,
           record: dict[str, Any], results: Path) -> None:
    manifest = record["manifest"]
    fitted = False  # a larger batch ran: the smaller ones of the ladder are not needed
    for step in todo:
        kept = previous.get(step.name)
        if kept and all(Path(p).exists() for p in kept.get("outputs", [])):
            step.status, step.note = kept["status"], "kept from the run resumed"
            step.params = kept.get("params", step.params)
            record["steps"].append(kept | {"note": step.note})
            fitted = fitted or (step.kind == plan.LADDER and step.status == steps.PASSED)
            say(f"{step.name}: kept (passed before)")
            continue
        if step.kind == plan.LADDER and fitted:
            step.status, step.note = steps.NOT_NEEDED, "a larger batch ran"
            record["steps"].append(step)
            continue
        if step.workdir and Path(step.workdir).is_dir():  # a failed try's
            shutil.rmtree(step.workdir)
        record["steps"].append(step)
        if step.kind == plan.DEVICE:
            _device(step, manifest, record)
        else:
            say(f"{step.name}: {shown(step.argv)}")
            step.status = StepStatus.RUNNING
            summary.write(results, record, final=False)
            runner.run(step)
        fitted = fitted or (step.kind == plan.LADDER and step.status == steps.PASSED)
        say(f"{step.name}: {step.status} ({step.seconds:.1f}s)"
            + (f": {step.note}" if step.note and step.status != steps.PASSED else ""))
        summary.write(results, record, final=False)


def _old(results: Path) -> dict:
    """The summary of the check being resumed ({} where it wrote none)."""
    if not (results / RESULTS_SUMMARY).is_file():
        return {}
    return read_json(results / RESULTS_SUMMARY, where=str(results / RESULTS_SUMMARY),
                     what="GPU check summary")

"""The GPU check: one prepared script for a lent GPU machine with no network and no compiler.

`prepare` (on a machine with iree-compile) compiles everything the check runs into a carry
directory: the profile's modules for each VAE precision (fp32, fp16) and batch size, with the
VAE decoding one image per call; the tiny model for the profile's backend; the tiny model's
images made on this CPU (the reference the GPU's images are compared with); and, unless
`--no-wheels`, the IREE runtime wheel (with the worker's pure-Python dependencies) for the GPU
machine's Python. `run` (on the GPU machine, from the checkout and the carry) writes a results
directory: what the GPU is, the seeded weights written from their spec, tiny on the GPU against
the CPU's images, and `runner bench` per (VAE precision, batch size), then gpu_check.json and
gpu_check.md. Both are a thin layer over `runner` commands, each printed exactly as it runs.

The machine is lent for minutes, so `run` keeps to a budget (a step that would start with
less than MIN_START_S left is skipped, one still running when it ends is stopped), writes its
summary after every step (a kill loses nothing finished), can resume, and on SIGINT/SIGTERM/
SIGHUP stops the running command (and everything it started), writes what finished and exits
128 + the signal. docs/gpu-check.md describes both commands.

    scripts/gpu_check.sh prepare --profile h100-seeded --out carry
    scripts/gpu_check.sh run --carry carry --out results
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as `python3 scripts/gpu_check.py` without the launcher
    sys.path.insert(0, str(ROOT))

from runner.base import gpu_holders, shellscript  # noqa: E402
from runner.base.errors import RunnerError  # noqa: E402
from runner.base.fileio import atomic_write_json, atomic_write_text  # noqa: E402
from runner.base.mdtable import md_table  # noqa: E402
from runner.base.procs import ProcessGuard, become_subreaper  # noqa: E402
from runner.base.signals import exit_code, raised_as_interrupted, signal_name  # noqa: E402
from runner.inputs.cliargs import SECONDS, count_list  # noqa: E402
from runner.inputs.jsonfile import read_json  # noqa: E402

MANIFEST = "gpu_check.json"  # in the carry: what prepare made
SUMMARY = "gpu_check.json"  # in the results: every step, and what they measured
REPORT = "gpu_check.md"
CARRY_KIND = "gpu_check_carry"
RESULTS_KIND = "gpu_check_results"
VAE_DTYPES = ("fp32", "fp16")
SDXL_BATCH_SIZES = (1, 8)  # an export made on demand has every size; these two are the check's
TINY_COUNT = 32  # the tiny images compared: the tiny profile's accuracy samples 0-31
BENCH_STAGES = ("clip", "unet_step", "vae")  # one UNet step: 20 of them make the pipeline
MIN_START_S = 30.0  # a step is not started with less budget than this left
STOP_GRACE_S = 10.0  # SIGTERM, then SIGKILL after this long
# Where the worker's dependencies may be missing on a bare GPU machine: module -> distribution.
WORKER_DEPS = {"iree.runtime": "iree-base-runtime", "numpy": "numpy", "yaml": "pyyaml",
               "regex": "regex"}
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
PASSED, FAILED, NOT_NEEDED, SKIPPED_BUDGET = "passed", "failed", "not needed", "skipped: budget"


def say(line: str) -> None:
    """Progress on stderr (stdout holds a dry run's commands)."""
    print(f"gpu_check: {line}", file=sys.stderr, flush=True)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def runner_argv(*args: str) -> list[str]:
    """A child `runner` command in this Python (the launcher put the checkout on PYTHONPATH)."""
    return [sys.executable, "-m", "runner", *args]


def shown(argv: Sequence[str], env: dict[str, str] | None = None) -> str:
    """A command as a shell would take it, with the variables it is given, on one line
    whatever the paths hold: what the summary records and a dry run prints, so either can be
    pasted into a shell."""
    prefix = " ".join(f"{k}={shellscript.quote(v)}" for k, v in (env or {}).items())
    return (prefix + " " if prefix else "") + shellscript.join(argv)


def runtime_version() -> str:
    try:
        return importlib.metadata.version("iree-base-runtime")
    except importlib.metadata.PackageNotFoundError:
        return ""


def tiny_sets(backend: str, chip: str) -> list[str]:
    """`--set`s that compile and run the tiny model for the profile's device (none on a CPU)."""
    if backend == "cpu":
        return []
    return ["--set", f"target.backend={backend}", "--set", f"target.chip={chip}"]


# ---------------------------------------------------------------------------------- prepare


@dataclass
class PrepareStep:
    name: str
    argv: list[str]
    note: str = ""


def prepare_plan(args: argparse.Namespace, carry: Path) -> tuple[list[PrepareStep], dict]:
    """The commands `prepare` runs and the manifest it writes (less what only running tells)."""
    from runner.bench.stages import stage_roles
    from runner.config.profile import load_profile

    profile = load_profile(args.profile)
    model = profile.model
    sizes = list(args.batch_sizes or (model.batch_sizes or SDXL_BATCH_SIZES))
    if model.batch_sizes and (bad := [b for b in sizes if b not in model.batch_sizes]):
        raise RunnerError(f"model {model.name} has no batch size {bad[0]} (it has "
                          f"{list(model.batch_sizes)})", where="--batch-sizes",
                          fix="give sizes the model has, e.g. --batch-sizes "
                          + ",".join(map(str, model.batch_sizes)))
    cache = carry / "cache"
    steps = [PrepareStep(f"compile {v} bs{b}", runner_argv(
        "compile", "--profile", args.profile, "--set", f"model.vae_dtype={v}",
        "--set", f"layout.batch_size={b}", "--set", "layout.vae_batch_size=1",
        "--out", str(cache))) for v in VAE_DTYPES for b in sizes]
    sets = tiny_sets(profile.target.backend, profile.target.chip)
    steps.append(PrepareStep("compile tiny", runner_argv("compile", "--profile", "tiny", *sets,
                                                         "--out", str(cache))))
    tiny_cpu = carry / "tiny-cpu"
    steps.append(PrepareStep("tiny on this CPU", runner_argv(
        "run", "--resume", str(tiny_cpu)) if (tiny_cpu / "run.json").is_file() else runner_argv(
        "run", "--profile", "tiny", "--count", str(TINY_COUNT), "--no-score",
        "--out", str(tiny_cpu))))
    version = runtime_version()
    if not args.no_wheels:
        pins = [f"iree-base-runtime=={version}" if version else "iree-base-runtime"]
        for module, dist in WORKER_DEPS.items():
            if module != "iree.runtime":
                with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                    pins.append(f"{dist}=={importlib.metadata.version(dist)}")
        platforms = [a for p in WHEEL_PLATFORMS for a in ("--platform", p)]
        steps.append(PrepareStep("wheels", [
            sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps",
            "--python-version", args.python, *platforms, "-d", str(carry / "wheels"), *pins]))
    stages = [s for s, _ in stage_roles(model.functions) if s in BENCH_STAGES]
    manifest = {
        "kind": CARRY_KIND, "profile": args.profile, "model": model.name,
        "backend": profile.target.backend, "chip": profile.target.chip,
        "batch_sizes": sizes, "vae_dtypes": list(VAE_DTYPES), "stages": stages,
        "tiny_sets": sets, "tiny_count": TINY_COUNT, "iree_runtime": version,
        "python": ".".join(map(str, sys.version_info[:3])),
        "wheels_python": None if args.no_wheels else args.python,
    }
    return steps, manifest


def cmd_prepare(args: argparse.Namespace) -> int:
    carry = Path(args.out).absolute()
    steps, manifest = prepare_plan(args, carry)
    if args.dry_run:
        for step in steps:
            print(f"# {step.name}\n{shown(step.argv)}")
        print(f"# then write {shellscript.quote(str(carry / MANIFEST))}")
        return 0
    if (carry / MANIFEST).is_file():
        old = read_json(carry / MANIFEST, what="GPU check manifest")
        if old.get("profile") != args.profile:
            raise RunnerError(f"this carry was prepared for profile {old.get('profile')!r}",
                              where=f"--out {carry}", fix="give another --out for "
                              f"--profile {args.profile}")
    carry.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    done = []
    for i, step in enumerate(steps, 1):
        say(f"[{i}/{len(steps)}] {step.name}: {shown(step.argv)}")
        t0 = time.monotonic()
        code = subprocess.run(step.argv, stdout=sys.stderr, check=False).returncode
        if code != 0:
            raise RunnerError(f"step {step.name!r} exited {code}", where=shown(step.argv),
                              fix="see its output above; the carry keeps what finished, and "
                              "prepare again reuses the compile cache")
        done.append({"step": step.name, "command": shown(step.argv),
                     "seconds": round(time.monotonic() - t0, 1)})
    exports = carry / "cache" / "exports"
    manifest.update(
        compiled=done, created=now(), seconds=round(time.monotonic() - started, 1),
        seeded_exports=sorted(d.name for d in exports.glob("*")
                              if (d / "weights.spec.json").is_file()),
        wheels=sorted(p.name for p in (carry / "wheels").glob("*.whl")),
        bytes=sum(p.stat().st_size for p in carry.rglob("*") if p.is_file()))
    atomic_write_json(carry / MANIFEST, manifest)
    say(f"carry ready: {carry} ({manifest['bytes'] / 1e6:.1f} MB); on the GPU machine: "
        f"scripts/gpu_check.sh run --carry {shellscript.quote(str(carry))} --out results")
    return 0


# -------------------------------------------------------------------------------------- run


@dataclass
class Step:
    """One command of the check and what became of it (a row of gpu_check.json)."""

    name: str
    argv: list[str]
    outputs: list[str] = field(default_factory=list)
    capture: str = ""  # a file that gets the command's stdout alone (the device's name)
    workdir: str = ""  # the directory it writes: a failed try's is removed before the next
    status: str = "pending"
    exit_code: int | None = None
    seconds: float = 0.0
    command: str = ""
    log: str = ""
    note: str = ""
    gpu_holders: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "argv"}


class StepRunner:
    """Runs steps one at a time inside a budget of seconds from its creation.

    A step is started only with `min_start` seconds of budget left (else: skipped: budget),
    and one still running when the budget ends is stopped: SIGTERM to it, SIGKILL to it and
    whatever it started after `grace`, then waited for, so that no process of the check
    outlives the step and holds the GPU while the next one measures."""

    def __init__(self, budget: float, logs: Path, env: dict[str, str],
                 min_start: float = MIN_START_S, grace: float = STOP_GRACE_S):
        self.budget, self.logs, self.env = budget, logs, env
        self.min_start, self.grace = min_start, grace
        self.started = time.monotonic()

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.started)

    def run(self, step: Step) -> Step:
        if self.left() < self.min_start:
            step.status = SKIPPED_BUDGET
            step.note = (f"{max(self.left(), 0):.0f}s of the budget left, under "
                         f"{self.min_start:.0f}s")
            return step
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{step.name}.log"
        step.log, step.command = str(log), shown(step.argv, self.env)
        before = self._holders()
        guard = ProcessGuard()
        t0 = time.monotonic()
        proc: subprocess.Popen | None = None
        try:
            with open(log, "wb") as out, contextlib.ExitStack() as stack:
                stdout = stack.enter_context(open(step.capture, "wb")) if step.capture else out
                proc = subprocess.Popen(step.argv, stdout=stdout, stderr=out,
                                        stdin=subprocess.DEVNULL, env=self.full_env())
                try:
                    step.exit_code = proc.wait(timeout=max(self.left(), 0.01))
                    step.status = PASSED if step.exit_code == 0 else FAILED
                except subprocess.TimeoutExpired:
                    step.status, step.note = FAILED, (f"stopped: the budget of "
                                                      f"{self.budget:.0f}s ran out")
                    step.exit_code = self._stop(proc, guard)
        except OSError as e:  # the program is not there, or the log cannot be written
            step.status, step.note = FAILED, f"could not start: {e}"
        except BaseException:  # a signal (Interrupted): stop the child before leaving
            step.status = "interrupted"
            if proc is not None:
                step.exit_code = self._stop(proc, guard)
            raise
        finally:
            step.seconds = round(time.monotonic() - t0, 2)
            step.gpu_holders = self._holders_after(before)
        if step.status == FAILED and not step.note:
            step.note = f"exited {step.exit_code}: see {log.name}"
        return step

    def _stop(self, proc: subprocess.Popen, guard: ProcessGuard) -> int | None:
        """SIGTERM to the step's command (a `runner` stops its own workers on it), SIGKILL
        after the grace; then whatever it started and left behind (adopted by this process,
        a subreaper), the same way. Its exit status, as Popen gives it (-15: SIGTERM)."""
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            proc.wait(timeout=self.grace)
        except subprocess.TimeoutExpired:
            say(f"pid {proc.pid} still running {self.grace:.0f}s after SIGTERM: SIGKILL")
            proc.kill()
            proc.wait()
        guard.stop(self.grace, say)
        return proc.returncode

    def full_env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    @staticmethod
    def _holders() -> gpu_holders.Snapshot | str:
        try:
            return gpu_holders.snapshot()
        except gpu_holders.ToolFailed as e:
            return f"no snapshot: {e}"

    @classmethod
    def _holders_after(cls, before: gpu_holders.Snapshot | str) -> dict:
        if isinstance(before, str):
            return {"tool": None, "note": before, "leaks": []}
        try:
            found = gpu_holders.check(before)
        except gpu_holders.ToolFailed as e:
            return {"tool": before.tool, "note": f"no check: {e}", "leaks": []}
        return {"tool": found.tool, "note": " ".join(found.lines()),
                "leaks": [asdict(p) for p in found.leaks]}


def read_manifest(carry_arg: str) -> tuple[Path, dict]:
    carry = Path(carry_arg).absolute()
    fix = ("give --carry the directory `scripts/gpu_check.sh prepare --out DIR` wrote "
           "(copied whole)")
    if not carry.is_dir():
        raise RunnerError("no such directory", where=f"--carry {carry}", fix=fix)
    if not (carry / MANIFEST).is_file():
        raise RunnerError(f"not a GPU check carry: it has no {MANIFEST}",
                          where=f"--carry {carry}", fix=fix)
    manifest = read_json(carry / MANIFEST, where=f"--carry {carry / MANIFEST}",
                         what="GPU check manifest")
    if manifest.get("kind") != CARRY_KIND or not manifest.get("batch_sizes"):
        raise RunnerError(f"{MANIFEST} is not one `prepare` wrote (kind "
                          f"{manifest.get('kind')!r})", where=f"--carry {carry}", fix=fix)
    return carry, manifest


def parse_budget(text: str) -> float:
    try:
        return SECONDS(text)
    except argparse.ArgumentTypeError as e:
        raise RunnerError(str(e), where="--budget", fix="give the seconds the check may take, "
                          "e.g. --budget 480 for a machine lent for 10 minutes") from None


def missing_deps() -> list[str]:
    """The worker's dependencies this Python cannot import (distribution names)."""
    out = []
    for module, dist in WORKER_DEPS.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(dist)
    return out


def device_tool() -> str:
    """What tells the device's name: nvidia-smi, rocm-smi, or none (a CPU)."""
    return next((t for t in ("nvidia-smi", "rocm-smi") if shutil.which(t)), "none (cpu)")


def plan_run(carry: Path, manifest: dict, results: Path, site: Path | None) -> list[Step]:
    """Every step of the check, in order (the budget decides how many run)."""
    steps = []
    if site is not None:
        wheels = carry / "wheels"
        steps.append(Step("runtime", [sys.executable, "-m", "pip", "install", "--no-index",
                                      "--no-deps", "--find-links", str(wheels), "--target",
                                      str(site), *missing_deps()], [str(site)]))
    if device_tool() == "nvidia-smi":
        device = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                  "--format=csv,noheader"]
    elif device_tool() == "rocm-smi":
        device = ["rocm-smi", "--showproductname"]
    else:
        device = [sys.executable, "-c", "import platform; print('cpu:', platform.processor() "
                  "or platform.machine())"]
    steps.append(Step("device", device, [str(results / "device.txt")],
                      capture=str(results / "device.txt")))
    for name in manifest.get("seeded_exports", []):
        steps.append(Step(f"weights {name}", runner_argv(
            "export", "weights", "--from", str(carry / "cache" / "exports" / name))))
    sets = list(manifest.get("tiny_sets", []))
    count = str(manifest.get("tiny_count", TINY_COUNT))
    steps.append(Step("tiny on the device", runner_argv(
        "run", "--profile", "tiny", *sets, "--count", count, "--no-score",
        "--out", str(results / "tiny-device")), [str(results / "tiny-device" / "run.json")],
        workdir=str(results / "tiny-device")))
    steps.append(Step("tiny compare", runner_argv(
        "compare", str(carry / "tiny-cpu"), str(results / "tiny-device"),
        "--out", str(results / "tiny-compare")), [str(results / "tiny-compare" / "compare.json")],
        workdir=str(results / "tiny-compare")))
    stages = [a for s in manifest.get("stages", BENCH_STAGES) for a in ("--stage", s)]
    for v in manifest.get("vae_dtypes", VAE_DTYPES):
        for b in manifest["batch_sizes"]:
            out = results / f"bench-{v}-bs{b}"
            steps.append(Step(f"bench {v} bs{b}", runner_argv(
                "bench", "--profile", manifest["profile"], "--set", f"model.vae_dtype={v}",
                "--devices", "0", "--cpd", "1", "--batch-size", str(b), "--vae-batch-size", "1",
                "--count", str(max(2, b)), *stages, "--repetitions", "2", "--dispatches", "1",
                "--out", str(out)), [str(out / "bench.json"), str(out / "bench.md")],
                workdir=str(out)))
    return steps


def cmd_run(args: argparse.Namespace) -> int:
    budget = parse_budget(args.budget)
    if bool(args.out) == bool(args.resume):
        raise RunnerError("give one of --out RESULTS (a new check) and --resume RESULTS (go "
                          "on with an interrupted one)", where="run",
                          fix="e.g. run --carry carry --out results")
    results = Path(args.out or args.resume).absolute()
    summary_path = results / SUMMARY
    previous: dict[str, dict] = {}
    carry_flag = args.carry
    if args.resume:  # --resume RESULTS: what passed there is kept, the rest runs
        if not summary_path.is_file():
            raise RunnerError("holds no GPU check's results to resume",
                              where=f"--resume {results}",
                              fix="start one with `run --carry CARRY --out RESULTS`")
        old = read_json(summary_path, what="GPU check summary")
        previous = {s["name"]: s for s in old.get("steps", []) if s.get("status") == PASSED}
        carry_flag = carry_flag or old.get("carry")
    elif summary_path.is_file():
        raise RunnerError("holds a GPU check's results", where=f"--out {results}",
                          fix=f"`run --resume {shellscript.quote(str(results))}` keeps its "
                          "finished steps; or give another --out")
    if not carry_flag:
        raise RunnerError("which carry?", where="--carry",
                          fix="pass --carry CARRY, the directory `prepare` wrote")
    carry, manifest = read_manifest(carry_flag)
    site = carry / "site" if missing_deps() else None
    env = {"RUNNER_CACHE_DIR": str(carry / "cache")}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT), str(site), *filter(None, [os.environ.get("PYTHONPATH", "")])])
        env["PATH"] = os.pathsep.join([str(site / "bin"), os.environ.get("PATH", "")])
    steps = plan_run(carry, manifest, results, site)
    if args.dry_run:
        for step in steps:
            print(f"# {step.name}\n{shown(step.argv, env if step.name != 'runtime' else {})}")
        print(f"# then write {shellscript.quote(str(summary_path))} and "
              f"{shellscript.quote(str(results / REPORT))}")
        return 0
    results.mkdir(parents=True, exist_ok=True)
    become_subreaper()
    runner = StepRunner(budget, results / "logs", env)
    summary: dict[str, Any] = {
        "kind": RESULTS_KIND, "carry": str(carry), "profile": manifest["profile"],
        "manifest": manifest, "budget_s": budget, "started": now(), "status": "running",
        "device_tool": device_tool(), "steps": [], "published": published(),
        "runtime": {"missing_here": missing_deps(), "site": str(site) if site else None,
                    "iree_runtime": runtime_version()}}
    write(results, summary, final=False)
    # A signal raises KeyboardInterrupt (Interrupted) in the step running, which stops its
    # command; a second one while the summary is written is noted, not raised.
    with raised_as_interrupted(" (writing the summary)"):
        try:
            for step in steps:
                kept = previous.get(step.name)
                if kept and all(Path(p).exists() for p in kept.get("outputs", [])):
                    kept["note"] = "kept from the run resumed"
                    summary["steps"].append(kept)
                    say(f"{step.name}: kept (passed before)")
                    continue
                if step.workdir and Path(step.workdir).is_dir():  # a failed try's
                    shutil.rmtree(step.workdir)
                say(f"{step.name}: {shown(step.argv)}")
                summary["steps"].append(step)
                step.status = "running"
                write(results, summary, final=False)
                runner.run(step)
                say(f"{step.name}: {step.status} ({step.seconds:.1f}s)"
                    + (f": {step.note}" if step.note and step.status != PASSED else ""))
                write(results, summary, final=False)
        except KeyboardInterrupt as e:
            summary["status"] = f"interrupted: {signal_name(e)}"
            summary["exit_code"] = exit_code(e)
            write(results, summary, final=True)
            say(f"stopped by {signal_name(e)}; what finished is in {results / REPORT}")
            return exit_code(e)
    ok = all(s["status"] in (PASSED, NOT_NEEDED) for s in map(as_dict, summary["steps"]))
    summary["status"] = "passed" if ok else "failed"
    summary["exit_code"] = 0 if ok else 1
    write(results, summary, final=True)
    say(f"{summary['status']}: {results / REPORT}")
    return summary["exit_code"]


def as_dict(step: Step | dict) -> dict:
    return step.to_dict() if isinstance(step, Step) else step


# ---------------------------------------------------------------------------------- summary


def published() -> dict:
    """MLPerf's published numbers the check's results are read beside (not measured)."""
    path = ROOT / "docs" / "measurements.json"
    try:
        record = read_json(path, what="measurements file")["records"]["published"]
    except (RunnerError, KeyError, TypeError):
        return {}
    return {"source": record.get("source", ""), "values": record.get("result", {})}


def _load(path: Path) -> dict | None:
    try:
        return read_json(path, what="result file")
    except RunnerError:
        return None


def measured(results: Path, manifest: dict) -> tuple[dict, list[dict]]:
    """The tiny verdict and one row per (VAE precision, batch size), from the files the steps
    wrote (compare.json, bench.json)."""
    tiny: dict[str, Any] = {"verdict": "not run"}
    cmp = _load(results / "tiny-compare" / "compare.json")
    if cmp is not None:
        s = cmp.get("summary", {})
        expected = manifest.get("tiny_count", TINY_COUNT)
        within = (s.get("common") == expected and s.get("max_abs") is not None
                  and s["max_abs"] <= 1 and not cmp.get("only_a") and not cmp.get("only_b"))
        tiny = {"verdict": "within 1 LSB" if within else
                f"differs: max |d| {s.get('max_abs')} over {s.get('common')} of {expected}",
                "common": s.get("common"), "identical": s.get("identical"),
                "max_abs": s.get("max_abs"), "min_psnr": s.get("min_psnr")}
    rows = []
    for v in manifest.get("vae_dtypes", VAE_DTYPES):
        for b in manifest["batch_sizes"]:
            bench = _load(results / f"bench-{v}-bs{b}" / "bench.json")
            if bench is None:
                continue
            row: dict[str, Any] = {"vae_dtype": v, "batch_size": b,
                                   "images_per_s": (bench.get("best") or {}).get("samples_per_s"),
                                   "stage_ms": {}, "dispatch_share": {}, "top_kinds": {}}
            for stage in bench.get("stages", []):
                name = stage.get("stage")
                row["stage_ms"][name] = (stage.get("latency_ms") or {}).get("median_ms")
                profile = stage.get("dispatch_profile") or {}
                if profile.get("status") == "ok":
                    row["dispatch_share"][name] = profile.get("dispatch_share_of_wall")
                    kinds = sorted(profile.get("kinds", []), key=lambda k: -k.get("share", 0))
                    row["top_kinds"][name] = [[k.get("kind"), k.get("share")] for k in kinds[:3]]
            rows.append(row)
    return tiny, rows


def vae_ratios(rows: list[dict]) -> dict[str, float]:
    """The VAE stage's median fp16 / fp32 per batch size."""
    vae = {(r["vae_dtype"], r["batch_size"]): r["stage_ms"].get("vae") for r in rows}
    out = {}
    for (dtype, b), ms in vae.items():
        base = vae.get(("fp32", b))
        if dtype == "fp16" and ms and base:
            out[f"bs{b}"] = round(ms / base, 4)
    return out


def write(results: Path, summary: dict, final: bool) -> None:
    """gpu_check.json after every step (atomic: a kill leaves the last whole one), and at the
    end, with what the steps measured, gpu_check.md."""
    summary = dict(summary, steps=[as_dict(s) for s in summary["steps"]], written=now())
    device_file = results / "device.txt"
    if device_file.is_file():
        summary["device"] = device_file.read_text(errors="replace").strip()
    summary["tiny"], summary["bench"] = measured(results, summary["manifest"])
    summary["vae_fp16_over_fp32"] = vae_ratios(summary["bench"])
    atomic_write_json(results / SUMMARY, summary)
    if final:
        atomic_write_text(results / REPORT, report(summary))


def _ms(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else "-"


def _holders_cell(found: dict) -> str:
    if found.get("tool") is None:
        return "-"
    leaks = found.get("leaks") or []
    return "none" if not leaks else ", ".join(f"pid {p['pid']}" for p in leaks)


def report(summary: dict) -> str:
    m = summary["manifest"]
    lines = [f"# GPU check: {m['profile']} ({m.get('model', '')})", "",
             f"- device: {summary.get('device', 'unknown')}",
             f"- status: {summary['status']} (budget {summary['budget_s']:.0f}s)",
             f"- IREE runtime {m.get('iree_runtime') or '?'}, compiled for {m['backend']} "
             f"{m['chip']}",
             f"- tiny on the device vs the CPU's images: {summary['tiny']['verdict']}", "",
             "## Throughput and stage latencies (measured)", ""]
    stages = list(m.get("stages", BENCH_STAGES))
    lines += md_table(["VAE", "batch", "images/s", *(f"{s} ms" for s in stages),
                       *(f"{s} dispatch share" for s in stages)],
                      [[r["vae_dtype"], r["batch_size"], _ms(r["images_per_s"]),
                        *(_ms(r["stage_ms"].get(s)) for s in stages),
                        *(f"{100 * r['dispatch_share'][s]:.0f}%"
                          if isinstance(r["dispatch_share"].get(s), (int, float)) else "-"
                          for s in stages)] for r in summary["bench"]] or [["-"] * 3])
    lines += ["", "Stage ms: the median of `runner bench`'s repetitions; dispatch share: "
              "dispatch time over the profiled call's wall time.", ""]
    ratios = summary.get("vae_fp16_over_fp32") or {}
    lines += ["## VAE decode, fp16 over fp32", ""]
    lines += [f"- {b}: {r:.3f}" for b, r in ratios.items()] or ["- not measured"]
    lines += ["", "## Top dispatch kinds (share of dispatch time)", ""]
    lines += md_table(["VAE", "batch", "stage", "kinds"],
                      [[r["vae_dtype"], r["batch_size"], s,
                        ", ".join(f"{k} {100 * (sh or 0):.0f}%" for k, sh in kinds)]
                       for r in summary["bench"] for s, kinds in r["top_kinds"].items()])
    pub = summary.get("published") or {}
    if pub.get("values"):
        lines += ["", "## MLPerf anchors (published, not measured)", "",
                  f"Source: {pub.get('source', '')}", ""]
        lines += md_table(["published value", "number"],
                          [[k, v] for k, v in pub["values"].items()])
    holders = [s.get("gpu_holders") or {} for s in summary["steps"]]
    skipped = next((h["note"] for h in holders if h.get("tool") is None and h.get("note")), "")
    lines += ["", "## Steps", ""] + ([f"GPU holders: {skipped}", ""] if skipped else [])
    lines += md_table(["step", "status", "exit", "seconds", "GPU holders left", "note"],
                      [[s["name"], s["status"], s.get("exit_code"), s.get("seconds"),
                        _holders_cell(h), s.get("note", "")]
                       for s, h in zip(summary["steps"], holders, strict=True)])
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/gpu_check.sh", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("prepare", help="compile everything into a carry (needs iree-compile)")
    p.add_argument("--profile", required=True, help="the profile benchmarked, e.g. h100-seeded "
                   "(cpu and tiny run the check on this CPU)")
    p.add_argument("--out", required=True, metavar="CARRY", help="the carry directory")
    p.add_argument("--batch-sizes", type=count_list, metavar="N,N",
                   help="default: 1,8 for an exported SDXL; the model's own for tiny")
    p.add_argument("--python", default="3.12", metavar="X.Y",
                   help="the GPU machine's Python, for the wheels (default: 3.12)")
    p.add_argument("--no-wheels", action="store_true",
                   help="carry no wheels (the GPU machine has the IREE runtime)")
    p.add_argument("--dry-run", action="store_true",
                   help="print every command; run nothing, write nothing")
    p.set_defaults(func=cmd_prepare)
    r = sub.add_parser("run", help="run the check from a carry (no compiler, no network)")
    r.add_argument("--carry", help="the directory `prepare` wrote (default with --resume: "
                   "the one the results recorded)")
    r.add_argument("--out", metavar="RESULTS", help="the results directory, new or empty")
    r.add_argument("--budget", default="480", metavar="SECONDS",
                   help="seconds the whole check may take (default: 480)")
    r.add_argument("--resume", metavar="RESULTS",
                   help="RESULTS holds an interrupted check: finish it, keeping the steps "
                   "that passed (instead of --out)")
    r.add_argument("--dry-run", action="store_true",
                   help="print every command; run nothing, write nothing")
    r.set_defaults(func=cmd_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except RunnerError as e:
        message = str(e)
        print(f"error: {message}" if "fix:" in message else f"error: {message}\nfix: see above",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # a signal before the run's own handling (prepare)
        print(f"\nstopped by {signal_name(e)}", file=sys.stderr)
        return exit_code(e)


if __name__ == "__main__":
    with raised_as_interrupted(restore=False):
        code = main()
    raise SystemExit(code)

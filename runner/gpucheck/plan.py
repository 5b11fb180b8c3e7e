"""The GPU check's plan: what `prepare` compiles, and the steps `run` takes, in order.

The machine is lent for minutes, so the steps are ordered by the value of what they
measure: the GPU's description first (a number is nothing without it), the seeded weights
(every bench needs them), throughput and stage latencies at batch size 1 for each VAE
precision, then the largest batch that fits (largest first: the first that runs ends the
ladder), a short MLPerf Offline performance test (a number in MLPerf's own format, read
beside published ones), the tiny model's images against the CPU's, and last the
per-dispatch profile (a profiler IREE's GPU drivers may lack; its absence is recorded, not a
failure).

`prepare` writes the plan into the carry (`gpu_check.json`, `steps`): `run` takes it from
there, so what runs on the GPU machine is what was compiled for it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import runner
from runner.base import shellscript

CARRY_MANIFEST = "gpu_check.json"  # in the carry: what prepare made, and the plan
RESULTS_SUMMARY = "gpu_check.json"  # in the results: every step, and what they measured
REPORT = "gpu_check.md"
SHORT_USER_CONF = "mlperf-short.conf"  # in the carry: the short MLPerf test's LoadGen settings
NOTES = "README.txt"  # in the carry: how to run it on the GPU machine
CARRY_KIND = "gpu_check_carry"
RESULTS_KIND = "gpu_check_results"
VAE_DTYPES = ("fp32", "fp16")
SDXL_BATCH_SIZES = (1, 8)  # an export made on demand has every size; these two are the check's
TINY_COUNT = 32  # the tiny images compared by default: the tiny profile's accuracy samples 0-31
BENCH_STAGES = ("clip", "unet_step", "vae")  # one UNet step: 20 of them make the pipeline
# The short MLPerf Offline test: enough samples for a rate, far short of a valid result
# (MLPerf's own: 5000 queries, 600 s). On a CPU the same test, smaller.
MLPERF_SHORT = {"gpu": (64, 30), "cpu": (4, 1)}  # (min_query_count, min_duration s)
# Where the check's dependencies may be missing on a bare GPU machine: module -> distribution.
# (iree.runtime imports ml_dtypes: without it the runtime cannot be imported.)
CHECK_DEPS = {"iree.runtime": "iree-base-runtime", "ml_dtypes": "ml-dtypes", "numpy": "numpy",
              "yaml": "pyyaml", "regex": "regex", "mlperf_loadgen": "mlcommons-loadgen"}
# The carry's wheels: those, and the rest of what `pip install iree-sdxl-runner[mlperf]`
# needs, so the runner's own wheel installs from the carry alone.
CARRIED_DISTS = (*CHECK_DEPS.values(), "shtab")
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
# Step kinds, in the order `run` takes them (see the module docstring).
DEVICE, WEIGHTS, BENCH, MLPERF, LADDER, TINY, TINY_COMPARE, DISPATCHES = (
    "device", "weights", "bench", "mlperf", "largest batch", "tiny", "tiny compare",
    "dispatches")


def runner_argv(*args: str) -> list[str]:
    """A child `runner` command in this Python (children_env puts this runner first)."""
    return [sys.executable, "-m", "runner", *args]


def runner_root() -> str:
    """The directory this `runner` package is imported from: the children run the same
    runner (a checkout, an editable install or a wheel alike)."""
    return str(Path(runner.__file__).resolve().parent.parent)


def shown(argv: list[str], env: dict[str, str] | None = None) -> str:
    """A command as a shell takes it, with the variables it is given, on one line whatever
    the paths hold: what the summary records and a dry run prints, so either can be pasted
    into a shell."""
    prefix = " ".join(f"{k}={shellscript.quote(v)}" for k, v in (env or {}).items())
    return (prefix + " " if prefix else "") + shellscript.join(argv)


def runtime_version() -> str:
    try:
        return importlib.metadata.version("iree-base-runtime")
    except importlib.metadata.PackageNotFoundError:
        return ""


def missing_deps() -> list[str]:
    """The check's dependencies this Python cannot import (distribution names)."""
    out = []
    for module, dist in CHECK_DEPS.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(dist)
    return out


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


def plan_steps(sizes: list[int], vae_dtypes: list[str], main_dtype: str) -> list[dict]:
    """The run's steps as the carry records them (kind and parameters), in order."""
    first = min(sizes)  # 1 unless --batch-sizes leaves it out
    steps: list[dict[str, Any]] = [{"name": "device", "kind": DEVICE}]
    steps += [{"name": f"bench {v} bs{first}", "kind": BENCH, "vae_dtype": v,
               "batch_size": first} for v in vae_dtypes]
    steps += [{"name": f"bench {main_dtype} bs{b}", "kind": LADDER, "vae_dtype": main_dtype,
               "batch_size": b} for b in sorted((b for b in sizes if b > first), reverse=True)]
    steps.append({"name": "mlperf offline", "kind": MLPERF, "vae_dtype": main_dtype,
                  "batch_size": first})
    steps += [{"name": "tiny on the device", "kind": TINY},
              {"name": "tiny compare", "kind": TINY_COMPARE},
              {"name": "dispatches", "kind": DISPATCHES, "vae_dtype": main_dtype,
               "batch_size": first}]
    return steps


def _tiny_cpu_step(tiny_cpu: Path, tiny_count: int) -> PrepareStep:
    """The tiny model run on this CPU, the reference the device's images are checked
    against; resumed where an earlier prepare left its run (of the same count)."""
    from runner.batch.run import validate_ids

    validate_ids(list(range(tiny_count)), "--tiny-count")
    resumed = (tiny_cpu / "run.json").is_file()
    if resumed:
        _same_tiny_count(tiny_cpu, tiny_count)
    return PrepareStep("tiny on this CPU", runner_argv(
        "run", "--resume", str(tiny_cpu)) if resumed else runner_argv(
        "run", "--profile", "tiny", "--count", str(tiny_count), "--no-score",
        "--out", str(tiny_cpu)))


def _wheel_steps(wheels: Path, python: str, version: str | None) -> list[PrepareStep]:
    """Downloading the wheels a worker needs, pinned to the versions here (the runtime to
    this one, so the GPU machine runs what compiled), and building the runner's own."""
    pins = [f"iree-base-runtime=={version}" if version else "iree-base-runtime"]
    for dist in CARRIED_DISTS[1:]:
        try:
            pins.append(f"{dist}=={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            pins.append(dist)
    platforms = [a for p in WHEEL_PLATFORMS for a in ("--platform", p)]
    return [PrepareStep("wheels", [
                sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps",
                "--python-version", python, *platforms, "-d", str(wheels), *pins]),
            PrepareStep("runner wheel", [
                sys.executable, "-m", "runner.gpucheck.wheel", "--out", str(wheels)])]


def prepare_plan(profile_name: str, carry: Path, batch_sizes: list[int] | None,
                 python: str, wheels: bool, tiny_count: int = TINY_COUNT
                 ) -> tuple[list[PrepareStep], dict]:
    """The commands `prepare` runs and the manifest it writes (less what only running tells)."""
    from runner.base.errors import BadInput
    from runner.bench.stages import stage_roles
    from runner.config.model_config import SHORT_DTYPES
    from runner.config.profile import load_profile

    profile = load_profile(profile_name)
    model = profile.model
    sizes = list(batch_sizes or (model.batch_sizes or SDXL_BATCH_SIZES))
    if model.batch_sizes and (bad := [b for b in sizes if b not in model.batch_sizes]):
        raise BadInput(f"model {model.name} has no batch size {bad[0]} (it has "
                       f"{list(model.batch_sizes)})", where="--batch-sizes",
                       fix="give sizes the model has, e.g. --batch-sizes "
                       + ",".join(map(str, model.batch_sizes)))
    cache = carry / "cache"
    steps = [PrepareStep(f"compile {v} bs{b}", runner_argv(
        "compile", "--profile", profile_name, "--set", f"model.vae_dtype={v}",
        "--set", f"layout.batch_size={b}", "--set", "layout.vae_batch_size=1",
        "--out", str(cache))) for v in VAE_DTYPES for b in sorted(set(sizes))]
    sets = tiny_sets(profile.target.backend, profile.target.chip)
    steps.append(PrepareStep("compile tiny", runner_argv("compile", "--profile", "tiny", *sets,
                                                         "--out", str(cache))))
    steps.append(_tiny_cpu_step(carry / "tiny-cpu", tiny_count))
    version = runtime_version()
    if wheels:
        steps += _wheel_steps(carry / "wheels", python, version)
    main_dtype = SHORT_DTYPES.get(model.vae_dtype, "fp32")
    queries, seconds = MLPERF_SHORT["cpu" if profile.target.backend == "cpu" else "gpu"]
    manifest = {
        "kind": CARRY_KIND, "profile": profile_name, "model": model.name,
        "image_size": model.image_size,  # which published rates compare (runner.gpucheck.summary)
        "backend": profile.target.backend, "chip": profile.target.chip,
        "batch_sizes": sorted(set(sizes)), "vae_dtypes": list(VAE_DTYPES),
        "stages": [s for s, _ in stage_roles(model.functions) if s in BENCH_STAGES],
        "tiny_sets": sets, "tiny_count": tiny_count, "iree_runtime": version,
        "python": ".".join(map(str, sys.version_info[:3])),
        "wheels_python": python if wheels else None,
        "mlperf": {"min_query_count": queries, "min_duration_s": seconds,
                   "user_conf": SHORT_USER_CONF},
        "steps": plan_steps(sorted(set(sizes)), list(VAE_DTYPES), main_dtype)}
    return steps, manifest


def _same_tiny_count(tiny_cpu: Path, tiny_count: int) -> None:
    """A carry's CPU reference (prepared before, into the same --out) is resumed, not made
    again: it must hold the samples asked for, or the GPU's images would be compared with
    another set."""
    from runner.base.errors import BadInput
    from runner.inputs.jsonfile import read_json

    ids = read_json(tiny_cpu / "run.json", where=str(tiny_cpu / "run.json"),
                    what="the tiny run's record").get("sample_ids")
    if isinstance(ids, list) and ids != list(range(tiny_count)):
        raise BadInput(f"the carry's tiny-cpu run holds {len(ids)} samples, not the "
                       f"{tiny_count} asked", where="--tiny-count",
                       fix=f"give --tiny-count {len(ids)}, or prepare into a new --out")


def user_conf_text(manifest: dict) -> str:
    """The short MLPerf test's user.conf (every scenario: only Offline runs)."""
    m = manifest["mlperf"]
    return (f"stable-diffusion-xl.*.min_query_count = {m['min_query_count']}\n"
            f"stable-diffusion-xl.*.min_duration = {int(m['min_duration_s'] * 1000)}\n")


def notes_text(manifest: dict) -> str:
    """The carry's README: what the GPU machine needs and the command that runs the check."""
    wheels = manifest.get("wheels") or []
    python = manifest.get("wheels_python")
    return "\n".join([
        f"GPU check carry: profile {manifest['profile']} ({manifest['backend']} "
        f"{manifest['chip']}), batch sizes {manifest['batch_sizes']}, IREE runtime "
        f"{manifest.get('iree_runtime') or '?'}; made {manifest.get('created', '?')}.",
        "",
        "On the GPU machine (no compiler, no network needed):",
        *([f"  1. (a Python {python}, a venv is best) python3 -m pip install --no-index "
           "--find-links THIS_DIRECTORY/wheels 'iree-sdxl-runner[mlperf]'",
           "  2. runner gpu-check run --carry THIS_DIRECTORY --out results",
           "",
           f"wheels/ holds {len(wheels)} wheels for Python {python}: the runner's own (pure "
           "Python), the IREE runtime, LoadGen and their dependencies."]
          if wheels else [
           "  1. the runner installed: pip install iree-sdxl-runner",
           "  2. runner gpu-check run --carry THIS_DIRECTORY --out results",
           "",
           "No wheels: the GPU machine's Python needs the runner, the IREE runtime "
           f"{manifest.get('iree_runtime') or ''} and mlcommons-loadgen installed."]),
        "The plan `run` follows is gpu_check.json (`steps`); docs/gpu-check.md describes it.",
        ""])


# -------------------------------------------------------------------------------------- run


@dataclass
class Step:
    """One step of the check and what became of it (a row of gpu_check.json)."""

    name: str
    kind: str
    argv: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    workdir: str = ""  # the directory it writes: a failed try's is removed before the next
    params: dict[str, Any] = field(default_factory=dict)  # vae_dtype, batch_size
    status: str = "pending"
    exit_code: int | None = None
    seconds: float = 0.0
    command: str = ""
    log: str = ""
    note: str = ""
    gpu_holders: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "argv"}


def _bench(manifest: dict, out: Path, vae: str, batch: int, dispatches: bool) -> list[str]:
    """A bench step's command. The dispatch step runs no layout (`--no-throughput`): the
    bench step of the same precision and batch measured its throughput, and a layout run
    would load the model into a worker once more out of the check's budget."""
    stages = [a for s in manifest.get("stages", BENCH_STAGES) for a in ("--stage", s)]
    runs = ["--no-throughput"] if dispatches else ["--count", str(max(2, batch))]
    return runner_argv(
        "bench", "--profile", manifest["profile"], "--set", f"model.vae_dtype={vae}",
        "--devices", "0", "--cpd", "1", "--batch-size", str(batch), "--vae-batch-size", "1",
        *runs, *stages, "--repetitions", "2", *(["--dispatches", "1"] if dispatches else []),
        "--out", str(out))


def plan_run(carry: Path, manifest: dict, results: Path, site: Path | None,
             share_gpus: bool = False) -> list[Step]:
    """Every step of the check, in the carry's order (the budget decides how many run).
    `share_gpus`: each run on the GPU starts beside other GPU processes, as the check does."""
    steps = _plan_run(carry, manifest, results, site)
    if share_gpus:
        for step in steps:
            if step.kind in (BENCH, LADDER, DISPATCHES, MLPERF, TINY):
                step.argv.append("--share-gpus")
    return steps


def _plan_run(carry: Path, manifest: dict, results: Path, site: Path | None) -> list[Step]:
    steps = []
    if site is not None:
        steps.append(Step("runtime", "runtime", [
            sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--find-links",
            str(carry / "wheels"), "--target", str(site), *missing_deps()], [str(site)]))
    for name in manifest.get("seeded_exports", []):
        steps.append(Step(f"weights {name}", WEIGHTS, runner_argv(
            "export", "weights", "--from", str(carry / "cache" / "exports" / name))))
    for planned in manifest["steps"]:
        kind, name = planned["kind"], planned["name"]
        params = {k: planned[k] for k in ("vae_dtype", "batch_size") if k in planned}
        if kind == DEVICE:
            steps.insert(0, Step(name, kind, outputs=[str(results / RESULTS_SUMMARY)]))
        elif kind in (BENCH, LADDER, DISPATCHES):
            out = results / name.replace(" ", "-")
            steps.append(Step(name, kind, _bench(manifest, out, params["vae_dtype"],
                                                 params["batch_size"], kind == DISPATCHES),
                              [str(out / "bench.json")], str(out), params))
        elif kind == MLPERF:
            out = results / "mlperf-offline"
            m = manifest["mlperf"]
            steps.append(Step(name, kind, runner_argv(
                "mlperf", "--profile", manifest["profile"], "--set",
                f"model.vae_dtype={params['vae_dtype']}", "--devices", "0", "--cpd", "1",
                "--batch-size", str(params["batch_size"]), "--vae-batch-size", "1",
                "--scenario", "offline", "--mode", "performance",
                "--count", str(m["min_query_count"]),
                "--user-conf", str(carry / m["user_conf"]), "--out", str(out)),
                [str(out / "results.json")], str(out), params))
        elif kind == TINY:
            out = results / "tiny-device"
            steps.append(Step(name, kind, runner_argv(
                "run", "--profile", "tiny", *manifest.get("tiny_sets", []), "--count",
                str(manifest.get("tiny_count", TINY_COUNT)), "--no-score", "--out", str(out)),
                [str(out / "run.json")], str(out)))
        elif kind == TINY_COMPARE:
            out = results / "tiny-compare"
            steps.append(Step(name, kind, runner_argv(
                "compare", str(carry / "tiny-cpu"), str(results / "tiny-device"),
                "--out", str(out)), [str(out / "compare.json")], str(out)))
    return steps

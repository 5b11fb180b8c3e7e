"""Per-stage latency: each pipeline function benchmarked alone by `iree-benchmark-module`.

The inputs are real: one pipeline pass (MLPerf caption 0, the fixed latent) runs in this
process with every benchmarked function recorded on its first call, and the recorded
arguments are saved as `.npy` files that `--input=@file.npy` reads back. So the unet step
sees the embeddings the clip stage really produced, and the vae the latent the unet did.
The benchmark runs exactly as a worker sees its device: the plan's first worker's visibility
environment, runtime flags (on CPU, its `--task_topology_cpu_ids` core set), NUMA binding and
CPU affinity (`taskset`: without it the tool's own calling thread runs on any core, and a CPU
stage measured 1.7x faster than the same worker's calls). The report sets the worker's
in-run ms/call beside each stage's, so a gap between the harness and IREE's own speed shows.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from runner.base.conditions import Conditions, Watch
from runner.base.errors import BadInput, RunnerError
from runner.base.fileio import sha256_file
from runner.base.steps import StepStatus
from runner.bench import benchmark_module as bm
from runner.bench import dispatch_profile as dp
from runner.bench import dispatch_replay
from runner.config.layout import Worker
from runner.model.compiled_model import CompiledModel
from runner.model.tensors import write_tensor

if TYPE_CHECKING:
    from runner.config.model_config import ModelConfig

# (stage, pipeline role) in pipeline order; stage names are the ones StageTimes uses.
STAGES = (
    ("clip", "encode_prompts"),
    ("unet_step", "run_forward"),
    ("unet", "produce_image_latents"),
    ("vae", "decode"),
)
REPLAY_DIR = "replay"  # under a stage's directory: the replay and its executables
# How many arguments SdxlPipeline passes each function. Only a dry run reads this (nothing
# is recorded then), to name the input files a real run would write.
ARITY = {"encode_prompts": 4, "run_forward": 6, "produce_image_latents": 4, "decode": 1}


@dataclass(frozen=True)
class StagePlan:
    stage: str
    role: str
    function: str  # `<submodel>.<function>`
    batch_size: int
    command: bm.BenchCommand
    raw_out: Path
    view: str = ""  # the worker's device view the command runs in (Worker.view_text)
    profile: dp.ProfilePlan | None = None  # the dispatch-profiled pass (--dispatches)
    # what runs the replay's timings: the worker's NUMA binding, not its taskset
    # (runner.bench.dispatch_replay says why)
    host_prefix: tuple[str, ...] = ()


@dataclass(frozen=True)
class StageResult:
    stage: str
    function: str
    batch_size: int
    latency: bm.Latency | None
    command: str
    error: str = ""
    view: str = ""
    in_run_ms: float | None = None  # the same worker's mean ms/call inside its layout's run
    dispatches: dict | None = None  # its dispatch profile (runner.bench.dispatch_profile)
    # its dispatches timed alone from a HAL replay (runner.bench.dispatch_replay)
    dispatch_times: dict | None = None
    conditions: Conditions | None = None  # what else the machine did while it was timed

    @property
    def in_run_ratio(self) -> float | None:
        """In-run ms/call over the stage's: 1.0 is the harness at IREE's own speed."""
        if self.in_run_ms is None or self.latency is None or self.latency.mean_ms <= 0:
            return None
        return self.in_run_ms / self.latency.mean_ms

    def to_dict(self) -> dict:
        ratio = self.in_run_ratio
        return {"stage": self.stage, "function": self.function, "batch_size": self.batch_size,
                "latency_ms": self.latency.to_dict() if self.latency else None,
                "in_run_ms_per_call": None if self.in_run_ms is None
                else round(self.in_run_ms, 6),
                "in_run_over_stage": None if ratio is None else round(ratio, 4),
                "device_view": self.view, "command": self.command, "error": self.error,
                "dispatch_profile": self.dispatches, "dispatch_times": self.dispatch_times,
                "conditions": self.conditions.to_dict() if self.conditions else None}


@dataclass(frozen=True)
class BenchSettings:
    """How long to measure: Google Benchmark's repetitions, min time per repetition, warmup."""

    repetitions: int = 5
    min_time: str | None = None  # e.g. "0.2s" or "10x"; None: Google Benchmark's 0.5s
    warmup: float | None = None
    extra_flags: tuple[str, ...] = ()
    timeout: float | None = 600.0
    dispatch_calls: int = 0  # > 0: a dispatch-profiled pass of this many calls per stage

    def flags(self, base: Sequence[str] = ()) -> list[str]:
        return bm.with_overrides([*base, *self.extra_flags], self.repetitions, self.min_time,
                                 self.warmup)


@dataclass
class _Recorder:
    """Calls through to the real IREE function, keeping a copy of its first arguments."""

    fn: object
    role: str
    sink: dict[str, tuple[np.ndarray, ...]] = field(default_factory=dict)

    def __call__(self, *args: np.ndarray) -> tuple[np.ndarray, ...]:
        if self.role not in self.sink:
            self.sink[self.role] = tuple(np.array(a, copy=True) for a in args)
        return self.fn(*args)  # type: ignore[operator]


def stage_roles(functions: Mapping[str, tuple[str, str]]) -> list[tuple[str, str]]:
    return [(stage, role) for stage, role in STAGES if role in functions]


def capture_inputs(compiled: CompiledModel, out_dir: Path) -> dict[str, tuple[Path, ...]]:
    """One pipeline pass; writes `<out_dir>/<stage>/input<i>.npy` for every stage."""
    from runner.config.mlperf_data import load_captions
    from runner.model.pipeline.loader import open_pipeline

    sink: dict[str, tuple[np.ndarray, ...]] = {}
    with open_pipeline(compiled) as pipeline:
        roles = stage_roles(pipeline.config.functions)
        for _, role in roles:
            pipeline.fns[role] = _Recorder(pipeline.fns[role], role, sink)  # type: ignore[assignment]
        embeds, pooled = pipeline.encode([load_captions()[0]] * compiled.batch_size)
        if "run_forward" in pipeline.fns and "run_initialize" in pipeline.fns:
            sample, time_ids = pipeline.initialize()
            pipeline.step(sample, embeds, pooled, time_ids, 0)
        pipeline.decode(pipeline.denoise(embeds, pooled))
    out: dict[str, tuple[Path, ...]] = {}
    for stage, role in roles:
        if role not in sink:
            raise BadInput(f"the pipeline pass never called {role}",
                           where=f"{compiled.model_config}: functions.{role}",
                           fix=f"name the function the pipeline calls for {role} in the "
                           "model config, or drop --stage for it")
        out[role] = tuple(write_tensor(out_dir / stage / f"input{i}.npy", a)
                          for i, a in enumerate(sink[role]))
    return out


def plan_stages(compiled: CompiledModel, out_dir: Path, settings: BenchSettings, *,
                worker: Worker | None = None,
                inputs: Mapping[str, Sequence[Path]] | None = None,
                only: Sequence[str] = (), config: ModelConfig | None = None
                ) -> list[StagePlan]:
    """The benchmark command of every stage (or those in `only`), in `worker`'s device view
    (None: this process's); `inputs` None (a dry run) names the files a real run records.
    `config`: the model's config where its file is not written yet (a dry run of a model
    not exported yet: the config its export will write); by default the compiled model's."""
    from runner.config.model_config import ModelConfig

    config = config or ModelConfig.load(Path(compiled.model_config))
    modules = {m.name: m for m in compiled.modules}
    plans = []
    roles = stage_roles(config.functions)
    unknown = sorted(set(only) - {stage for stage, _ in roles})
    if unknown:
        raise BadInput(f"unknown stage(s) {unknown} for model {config.name}",
                       where="--stage", fix=f"use {', '.join(s for s, _ in roles)}")
    for stage, role in roles:
        if only and stage not in only:
            continue
        submodel, fn = config.functions[role]
        files = modules[submodel]
        where = f"{config.path}: functions.{role}"
        # Dry run, nothing compiled to inspect: a pipeline-module function needs every module.
        fallback = None if role == "produce_image_latents" else 1
        vmfbs = bm.modules_for(files.vmfbs, fn, where, fallback)
        paths = (inputs or {}).get(role) or [out_dir / stage / f"input{i}.npy"
                                             for i in range(ARITY[role])]
        cmd = bm.command(device=compiled.driver, modules=vmfbs, function=fn,
                         inputs=[f"@{p}" for p in paths],
                         parameters=[files.weights] if files.weights else (),
                         flags=settings.flags(), env=worker.env if worker else None,
                         runtime_flags=(*compiled.runtime_flags,
                                        *(worker.runtime_flags if worker else ())),
                         prefix=worker.view_prefix() if worker else ())
        profile = (dp.plan_profile(cmd, out_dir / stage, settings.dispatch_calls,
                                   compiled.driver)
                   if settings.dispatch_calls else None)
        plans.append(StagePlan(stage, role, f"{submodel}.{fn}", compiled.batch_size, cmd,
                               out_dir / stage / "benchmark.json",
                               worker.view_text() if worker else "", profile,
                               worker.command_prefix if worker else ()))
    return plans


def run_stages(plans: Sequence[StagePlan], settings: BenchSettings, label: str = "",
               attempt: Any = None) -> list[StageResult]:
    """Each plan's benchmark. `attempt` (the bench's out dir record) keeps the stages an
    interrupted bench measured (their raw JSON still there as written), and records each
    one measured now."""
    results = []
    for p in plans:
        kept = _kept(p, attempt)
        if kept is not None:
            latency, dispatches, times = kept
            print(f"bench{label}: {p.stage} ({p.function}, batch {p.batch_size}): kept from "
                  f"an earlier attempt, {latency.mean_ms:.3f} ms mean", file=sys.stderr,
                  flush=True)
            results.append(StageResult(p.stage, p.function, p.batch_size, latency,
                                       p.command.text(), view=p.view, dispatches=dispatches,
                                       dispatch_times=times))
            continue
        print(f"bench{label}: {p.stage} ({p.function}, batch {p.batch_size}) ...",
              file=sys.stderr, flush=True)
        start = time.perf_counter()
        watch = Watch().start()
        try:
            latency = bm.run_benchmark(p.command, p.raw_out, settings.timeout)
        except RunnerError as e:
            results.append(StageResult(p.stage, p.function, p.batch_size, None,
                                       p.command.text(), str(e), p.view))
            print(f"  failed: {e}", file=sys.stderr, flush=True)
            if attempt is not None:
                attempt.record_part(_stage_key(p), StepStatus.FAILED,
                                    time.perf_counter() - start, {"error": str(e)})
            continue
        conditions = watch.stop()
        print(f"  {latency.mean_ms:.3f} ms mean over {latency.repetitions} repetitions; "
              f"{conditions.line()}", file=sys.stderr, flush=True)
        dispatches = _profile(p, latency.mean_ms, settings)
        times = _replay_times(p, latency.mean_ms, settings, dispatches)
        results.append(StageResult(p.stage, p.function, p.batch_size, latency,
                                   p.command.text(), view=p.view, dispatches=dispatches,
                                   dispatch_times=times, conditions=conditions))
        if attempt is not None:
            attempt.record_part(_stage_key(p), StepStatus.FINISHED, time.perf_counter() - start,
                                {"sha256": sha256_file(p.raw_out), "dispatches": dispatches,
                                 "dispatch_times": times})
    return results


def _stage_key(plan: StagePlan) -> str:
    return f"stage:{plan.command.text()}"


def _kept(plan: StagePlan, attempt: Any
          ) -> tuple[bm.Latency, dict | None, dict | None] | None:
    """The latency an interrupted attempt measured for this very command, from the raw
    JSON it wrote (unchanged since), and the dispatch profile it took after it; None:
    measure both."""
    if attempt is None or not attempt.resumed:
        return None
    recorded = attempt.kept(_stage_key(plan), lambda detail: plan.raw_out.is_file() and (
        sha256_file(plan.raw_out) == detail.get("sha256")))
    if recorded is None:
        return None
    return (bm.parse_benchmark_json(plan.raw_out.read_text(), str(plan.raw_out)),
            recorded.get("dispatches"), recorded.get("dispatch_times"))


def _profile(p: StagePlan, unprofiled_ms: float, settings: BenchSettings) -> dict | None:
    if p.profile is None:
        return None
    print(f"  profiling dispatches ({p.profile.mode}, {p.profile.calls} calls) ...",
          file=sys.stderr, flush=True)
    out = dp.capture(p.profile, f"{p.stage} ({p.function}, batch {p.batch_size})",
                     unprofiled_ms, settings.timeout)
    if out["status"] == "ok":
        top = out["kinds"][0]
        print(f"  {out['dispatches_per_call']:g} dispatches/call, "
              f"{out['per_call_ms']['dispatch_sum']:.3f} ms/call in dispatches of "
              f"{out['per_call_ms']['wall']:.3f} wall; most in {top['kind']} "
              f"({100 * top['share']:.1f}%)", file=sys.stderr, flush=True)
    else:
        print(f"  no dispatch profile: {out['note'].splitlines()[0]}", file=sys.stderr,
              flush=True)
    return out


def _replay_times(p: StagePlan, unprofiled_ms: float, settings: BenchSettings,
                  profile: dict | None = None) -> dict | None:
    """The same stage's dispatches timed alone from a HAL replay of one call (the
    mechanism that needs no HAL profiler: runner.bench.dispatch_replay); the stage's HAL
    profile, where there is one, sizes their batches."""
    if p.profile is None:
        return None
    print("  timing each dispatch alone (HAL replay + iree-benchmark-executable) ...",
          file=sys.stderr, flush=True)
    out = dispatch_replay.measure_replay(p.command, p.profile.directory / REPLAY_DIR,
                                         unprofiled_ms, settings.timeout, p.host_prefix,
                                         dispatch_replay.profiled_us(profile))
    if out["status"] == "ok":
        print(f"  {out['dispatches_per_call']:g} dispatches/call, "
              f"{out['per_call_ms']['dispatch_sum']:.3f} ms/call alone, "
              f"{100 * out['explained']:.0f}% of the unprofiled {unprofiled_ms:.3f} ms",
              file=sys.stderr, flush=True)
    else:
        print(f"  no dispatch times: {out['note'].splitlines()[0]}", file=sys.stderr,
              flush=True)
    return out


def profile_stages(compiled: CompiledModel, out_dir: Path, calls: int) -> dict[str, dict]:
    """Every stage's dispatch profile alone (no timed pass), on inputs recorded from one
    pipeline pass: stage -> its profile (with a note where this IREE has no profiler,
    in which case nothing is recorded or run)."""
    settings = BenchSettings(repetitions=1, dispatch_calls=calls)
    inputs = None if dp.unavailable() else capture_inputs(compiled, out_dir)
    out = {}
    for p in plan_stages(compiled, out_dir, settings, inputs=inputs):
        assert p.profile is not None
        print(f"profiling {p.stage} ({p.function}) ...", file=sys.stderr, flush=True)
        out[p.stage] = dp.capture(p.profile, f"{p.stage} ({p.function}, batch "
                                  f"{p.batch_size})", timeout=settings.timeout)
    return out

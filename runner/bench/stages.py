"""Per-stage latency: each pipeline function benchmarked alone by `iree-benchmark-module`.

The inputs are real: one pipeline pass (MLPerf caption 0, the fixed latent) runs in this
process with every benchmarked function recorded on its first call, and the recorded
arguments are saved as `.npy` files that `--input=@file.npy` reads back. So the unet step
sees the embeddings the clip stage really produced, and the vae the latent the unet did.
The benchmark runs as a worker would see its device: the plan's first worker's visibility
environment and runtime flags (on CPU, its `--task_topology_cpu_ids` core set).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from runner.bench import benchmark_module as bm
from runner.compiled_model import CompiledModel
from runner.errors import RunnerError
from runner.tensors import write_tensor

# (stage, pipeline role) in pipeline order; stage names are the ones StageTimes uses.
STAGES = (
    ("clip", "encode_prompts"),
    ("unet_step", "run_forward"),
    ("unet", "produce_image_latents"),
    ("vae", "decode"),
)
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


@dataclass(frozen=True)
class StageResult:
    stage: str
    function: str
    batch_size: int
    latency: bm.Latency | None
    command: str
    error: str = ""

    def to_dict(self) -> dict:
        return {"stage": self.stage, "function": self.function, "batch_size": self.batch_size,
                "latency_ms": self.latency.to_dict() if self.latency else None,
                "command": self.command, "error": self.error}


@dataclass(frozen=True)
class BenchSettings:
    """How long to measure: Google Benchmark's repetitions, min time per repetition, warmup."""

    repetitions: int = 5
    min_time: str | None = None  # e.g. "0.2s" or "10x"; None: Google Benchmark's 0.5s
    warmup: float | None = None
    extra_flags: tuple[str, ...] = ()
    timeout: float | None = 600.0

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
    from runner.mlperf_data import load_captions
    from runner.pipeline.loader import open_pipeline

    session, pipeline = open_pipeline(compiled)
    sink: dict[str, tuple[np.ndarray, ...]] = {}
    roles = stage_roles(pipeline.config.functions)
    try:
        for _, role in roles:
            pipeline.fns[role] = _Recorder(pipeline.fns[role], role, sink)  # type: ignore[assignment]
        embeds, pooled = pipeline.encode([load_captions()[0]] * compiled.batch_size)
        if "run_forward" in pipeline.fns and "run_initialize" in pipeline.fns:
            sample, time_ids = pipeline.initialize()
            pipeline.step(sample, embeds, pooled, time_ids, 0)
        pipeline.decode(pipeline.denoise(embeds, pooled))
    finally:
        session.close()
    out: dict[str, tuple[Path, ...]] = {}
    for stage, role in roles:
        if role not in sink:
            raise RunnerError(f"the pipeline pass never called {role}",
                              where=f"{compiled.model_config}: functions.{role}")
        out[role] = tuple(write_tensor(out_dir / stage / f"input{i}.npy", a)
                          for i, a in enumerate(sink[role]))
    return out


def plan_stages(compiled: CompiledModel, out_dir: Path, settings: BenchSettings, *,
                env: Mapping[str, str] | None = None, runtime_flags: Sequence[str] = (),
                inputs: Mapping[str, Sequence[Path]] | None = None,
                only: Sequence[str] = ()) -> list[StagePlan]:
    """The benchmark command of every stage (or those in `only`); `inputs` None (a dry
    run) names the files a real run records."""
    from runner.model_config import ModelConfig

    config = ModelConfig.load(Path(compiled.model_config))
    modules = {m.name: m for m in compiled.modules}
    plans = []
    roles = stage_roles(config.functions)
    unknown = sorted(set(only) - {stage for stage, _ in roles})
    if unknown:
        raise RunnerError(f"unknown stage(s) {unknown} for model {config.name}",
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
                         flags=settings.flags(), env=env,
                         runtime_flags=(*compiled.runtime_flags, *runtime_flags))
        plans.append(StagePlan(stage, role, f"{submodel}.{fn}", compiled.batch_size, cmd,
                               out_dir / stage / "benchmark.json"))
    return plans


def run_stages(plans: Sequence[StagePlan], settings: BenchSettings, label: str = ""
               ) -> list[StageResult]:
    results = []
    for p in plans:
        print(f"bench{label}: {p.stage} ({p.function}, batch {p.batch_size}) ...",
              file=sys.stderr, flush=True)
        try:
            latency = bm.run(p.command, p.raw_out, settings.timeout)
        except RunnerError as e:
            results.append(StageResult(p.stage, p.function, p.batch_size, None,
                                       p.command.text(), str(e)))
            print(f"  failed: {e}", file=sys.stderr, flush=True)
            continue
        print(f"  {latency.mean_ms:.3f} ms mean over {latency.repetitions} repetitions",
              file=sys.stderr, flush=True)
        results.append(StageResult(p.stage, p.function, p.batch_size, latency,
                                   p.command.text()))
    return results

"""What `runner bench` measured: its options (`BenchOptions`), the tuning-spec A/B
(`ABResult`) and the whole report (`BenchReport`, written as bench.json); `bench` fills it,
`report` renders it as bench.md. Benchmark goldens are `runner bench goldens`' own report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.accuracy.samples import format_ids
from runner.batch.cluster import SlurmOptions
from runner.bench import stages as st
from runner.bench import sweep
from runner.bench import throughput as tp
from runner.bench.dispatch_diff import compare_stages
from runner.bench.dispatch_profile import PROFILE_FIELDS
from runner.bench.dispatch_replay import TIMES_FIELDS


@dataclass(frozen=True)
class BenchOptions:
    sample_ids: tuple[int, ...] = tuple(range(32))  # per layout run
    devices: tuple[str | None, ...] = (None,)
    cpds: tuple[int | None, ...] = (None,)
    batch_sizes: tuple[int | None, ...] = (None,)
    vae_batch_sizes: tuple[int | None, ...] = (None,)
    throughput: bool = True
    stages: bool = True
    stage_filter: tuple[str, ...] = ()  # e.g. ("clip", "vae"); empty: every stage
    settings: st.BenchSettings = field(default_factory=st.BenchSettings)
    ab_tuning_spec: Path | None = None
    dump_tuning_specs: bool = False
    dry_run: bool = False
    run_argv: tuple[str, ...] = ("run",)  # `runner run` flags each layout's reproduce.sh uses
    argv: tuple[str, ...] = ()  # the bench command line, recorded
    executor: str = "local"  # local | docker | slurm: where the layout runs go
    iree: tuple[str, ...] = ()  # IREE builds to compare (image source specs)
    image: str | None = None  # or one prebuilt harness image
    slurm: SlurmOptions | None = None  # with executor slurm

    @property
    def host_only(self) -> bool:
        """Stage latencies and tuning specs use this host's IREE and devices: they mean
        nothing for another build's image or for a Slurm node's devices."""
        return self.executor == "local" and not self.iree and not self.image


@dataclass
class ABResult:
    spec: str
    without: list[st.StageResult] = field(default_factory=list)
    with_spec: list[st.StageResult] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        """One row per (batch, stage): both means and the relative change."""
        base = {(r.batch_size, r.stage): r for r in self.without}
        rows = []
        for r in self.with_spec:
            a = base.get((r.batch_size, r.stage))
            a_ms = a.latency.mean_ms if a and a.latency else None
            b_ms = r.latency.mean_ms if r.latency else None
            change = (b_ms / a_ms - 1.0) if a_ms and b_ms is not None else None
            rows.append({"batch_size": r.batch_size, "stage": r.stage, "function": r.function,
                         "without_ms": a_ms, "with_ms": b_ms, "change": change})
        return rows

    def dispatch_changes(self) -> dict[str, dict[str, Any]]:
        """Per `bs<k>/<stage>` profiled in both arms: which dispatches the spec moved."""
        def profiles(results: list[st.StageResult]) -> dict[str, dict]:
            return {f"bs{r.batch_size}/{r.stage}": r.dispatches for r in results
                    if r.dispatches is not None}

        before, after = profiles(self.without), profiles(self.with_spec)
        return compare_stages(before, after) if before or after else {}

    def to_dict(self) -> dict:
        return {"spec": self.spec, "without": [r.to_dict() for r in self.without],
                "with": [r.to_dict() for r in self.with_spec], "comparison": self.rows(),
                "dispatch_changes": self.dispatch_changes()}


@dataclass
class BenchReport:
    profile: str
    model: str
    options: BenchOptions
    out: Path | None
    versions: dict[str, Any] = field(default_factory=dict)
    layouts: list[tp.LayoutResult] = field(default_factory=list)
    stages: list[st.StageResult] = field(default_factory=list)
    ab: ABResult | None = None
    tuning_specs: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)  # dry run: everything it would run
    arms: list[sweep.IreeArm] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # The model's precisions (`dtype`, `vae_dtype`): the VAE's is most of an image's time.
    precision: dict[str, str] = field(default_factory=dict)

    @property
    def best(self) -> tp.LayoutResult | None:
        return next((r for r in self.layouts if r.best), None)

    @property
    def exit_code(self) -> int:
        bad = (any(r.status in ("error", "incomplete") for r in self.layouts)
               or any(r.error or (r.dispatches or {}).get("status") == "error"
                      or (r.dispatch_times or {}).get("status") == "error"
                      for r in self.stages)
               or (self.ab is not None and any(r.error for r in
                                               (*self.ab.without, *self.ab.with_spec))))
        return 1 if bad else 0

    def to_dict(self) -> dict:
        o = self.options
        best = self.best
        return {
            "kind": "bench", "profile": self.profile, "model": self.model,
            "model_precision": self.precision,
            "argv": list(o.argv), "dry_run": o.dry_run, "seconds": round(self.seconds, 3),
            "versions": self.versions, "executor": o.executor,
            "slurm": o.slurm.to_dict() if o.slurm else None,
            "iree": [a.to_dict() for a in self.arms], "notes": self.notes,
            "settings": {"count": len(o.sample_ids), "samples": format_ids(o.sample_ids),
                         "repetitions": o.settings.repetitions,
                         "min_time": o.settings.min_time, "warmup": o.settings.warmup,
                         "benchmark_flags": list(o.settings.extra_flags),
                         "dispatch_calls": o.settings.dispatch_calls},
            "layouts": [r.to_dict() for r in self.layouts],
            "best": {"label": best.label, "samples_per_s": round(best.samples_per_s, 4)}
            if best else None,
            "stages": [r.to_dict() for r in self.stages],
            "ab_tuning_spec": self.ab.to_dict() if self.ab else None,
            "tuning_specs_dumped": self.tuning_specs,
            "exit_code": self.exit_code,
            **({"dispatch_profile_fields": PROFILE_FIELDS, "dispatch_times_fields": TIMES_FIELDS}
               if o.settings.dispatch_calls else {}),
        }

"""MLPerf Offline-style throughput of layouts: each one a real run into its own dir.

Offline throughput is samples / wall seconds of the whole run (workers started -> last one
exited, `RunOutcome.seconds`). The workers' own stats (`workers/<w>.stats.json`: per-batch
start and end, stage times) split that wall time: a worker is *busy* inside its batches,
so per-worker throughput is samples / busy seconds, and the harness's overhead is the share
of worker-seconds not spent busy, `1 - sum(busy) / (workers x wall)`: process start, module
load, queue claims, waiting on the tail. Time to first sample is when the first batch
finished (samples are written a batch at a time) after the run started.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.accuracy.samples import format_ids
from runner.base.errors import RunnerError
from runner.batch.run import RunOutcome, plan_for
from runner.batch.worker import stats_path
from runner.config.layout import Plan, format_device_ids
from runner.config.profile import Profile
from runner.model.compiled_model import missing_batch_sizes

HOST_IREE = "host"  # the IREE installed where the bench runs (no image)

@dataclass(frozen=True)
class LayoutCase:
    """One point of a sweep: a profile with its layout, or the reason it cannot run here."""

    label: str
    requested: dict[str, Any]
    profile: Profile | None = None
    plan: Plan | None = None
    skip_reason: str = ""

    @property
    def dirname(self) -> str:
        return self.label.replace(" ", "_").replace(",", "+").replace("=", "")

    def run_argv(self, base: list[str], sample_ids: list[int], out: Path) -> list[str]:
        """The `runner run` line that makes the same run (what its reproduce.sh re-runs)."""
        layout = self.profile.layout if self.profile else None
        if layout is None:
            return []
        first_n = sample_ids == list(range(len(sample_ids)))
        samples = (["--count", str(len(sample_ids))] if first_n
                   else ["--samples", format_ids(sample_ids)])
        return [*base, "--devices", format_device_ids(layout.devices), "--cpd",
                str(layout.cpd), "--batch-size", str(layout.batch_size), "--vae-batch-size",
                str(layout.vae_batch_size), *samples, "--out", str(out)]


def _label(profile: Profile) -> str:
    lay = profile.layout
    vae = f" vae{lay.vae_batch_size}" if lay.vae_batch_size != lay.batch_size else ""
    return f"devices={format_device_ids(lay.devices)} cpd={lay.cpd} bs={lay.batch_size}{vae}"


def layout_cases(profile: Profile, devices: list[str | None], cpds: list[int | None],
                 batch_sizes: list[int | None], vae_batch_sizes: list[int | None] | None = None
                 ) -> list[LayoutCase]:
    """Every combination, in order, identical effective layouts once."""
    cases: list[LayoutCase] = []
    seen: set[str] = set()
    for dev, cpd, bs, vae in itertools.product(devices, cpds, batch_sizes,
                                               vae_batch_sizes or [None]):
        requested = {k: v for k, v in (("devices", dev), ("cpd", cpd), ("batch_size", bs),
                                       ("vae_batch_size", vae)) if v is not None}
        text = " ".join(f"{k}={v}" for k, v in requested.items()) or "profile layout"
        try:
            layout = profile.layout.with_overrides(devices=dev, cpd=cpd, batch_size=bs,
                                                   vae_batch_size=vae)
        except RunnerError as e:
            cases.append(LayoutCase(text, requested, skip_reason=str(e)))
            continue
        case_profile = dataclasses.replace(profile, layout=layout)
        label = _label(case_profile)
        if label in seen:
            continue
        seen.add(label)
        try:  # a model from the export cache exports a missing batch size when it runs
            missing_batch_sizes(profile.model, layout.batch_size, layout.vae_batch_size)
        except RunnerError as e:
            cases.append(LayoutCase(label, requested, case_profile,
                                    skip_reason=f"model {profile.model.name}: {e.message}"))
            continue
        try:
            plan = plan_for(case_profile)
        except RunnerError as e:
            cases.append(LayoutCase(label, requested, case_profile,
                                    skip_reason=f"layout does not fit this machine: {e}"))
            continue
        cases.append(LayoutCase(label, requested, case_profile, plan))
    return cases


@dataclass
class WorkerThroughput:
    worker: str
    device: str
    samples: int
    busy_s: float
    load_s: float
    first_start_s: float | None  # after the run started
    first_end_s: float | None
    last_end_s: float | None
    stage_ms: dict[str, float] = field(default_factory=dict)  # in-run mean per call

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.busy_s if self.busy_s > 0 else 0.0

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> WorkerThroughput:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["samples_per_s"] = round(self.samples_per_s, 4)
        out["stage_ms"] = {k: round(v, 4) for k, v in self.stage_ms.items()}
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}


@dataclass
class LayoutResult:
    label: str
    requested: dict[str, Any]
    status: str  # ok | skipped | incomplete | error | planned
    reason: str = ""
    layout: dict[str, Any] = field(default_factory=dict)
    workers: int = 0
    samples: int = 0
    wall_s: float = 0.0
    run_dir: str = ""
    run_command: str = ""
    per_worker: list[WorkerThroughput] = field(default_factory=list)
    best: bool = False
    iree: str = HOST_IREE  # the IREE build: `host`, or the image's source spec
    image: str = ""  # harness image tag when the workers ran in containers
    slurm: dict[str, Any] = field(default_factory=dict)  # jobs, hosts, queue wait

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def busy_s(self) -> float:
        return sum(w.busy_s for w in self.per_worker)

    @property
    def overhead(self) -> float | None:
        """Share of worker-seconds not spent inside batches."""
        if not self.per_worker or self.wall_s <= 0:
            return None
        return 1.0 - self.busy_s / (self.workers * self.wall_s)

    @property
    def time_to_first_sample_s(self) -> float | None:
        ends = [w.first_end_s for w in self.per_worker if w.first_end_s is not None]
        return min(ends) if ends else None

    @property
    def startup_s(self) -> float | None:
        """Mean time from the run's start to a worker's first batch (spawn + module load)."""
        starts = [w.first_start_s for w in self.per_worker if w.first_start_s is not None]
        return sum(starts) / len(starts) if starts else None

    @property
    def tail_s(self) -> float | None:
        """Mean time a worker sat finished while the run went on (uneven last batches)."""
        ends = [w.last_end_s for w in self.per_worker if w.last_end_s is not None]
        return sum(self.wall_s - e for e in ends) / len(ends) if ends else None

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> LayoutResult:
        """A row `to_dict` wrote (an interrupted bench's finished layout, kept)."""
        names = {f.name for f in dataclasses.fields(cls)} - {"per_worker"}
        result = cls(**{k: v for k, v in raw.items() if k in names})
        result.per_worker = [WorkerThroughput.from_dict(w) for w in raw.get("per_worker", [])]
        return result

    def to_dict(self) -> dict:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 4)

        return {
            "label": self.label, "requested": self.requested, "status": self.status,
            "reason": self.reason, "layout": self.layout, "workers": self.workers,
            "samples": self.samples, "wall_s": r(self.wall_s),
            "samples_per_s": r(self.samples_per_s), "best": self.best,
            "overhead": {"fraction": r(self.overhead), "startup_s": r(self.startup_s),
                         "tail_s": r(self.tail_s),
                         "time_to_first_sample_s": r(self.time_to_first_sample_s),
                         "worker_busy_s": r(self.busy_s)},
            "per_worker": [w.to_dict() for w in self.per_worker],
            "run_dir": self.run_dir, "run_command": self.run_command,
            "iree": self.iree, "image": self.image, "slurm": self.slurm,
        }


def worker_stats(run_dir: Path, names: list[str], run_start: float) -> list[WorkerThroughput]:
    """From the workers' own stats files (a Slurm run's workers were planned on the nodes,
    so names rather than the submitter's plan)."""
    out = []
    for name in names:
        path = stats_path(run_dir, name)
        if not path.is_file():  # a worker that never finished a batch wrote no stats
            out.append(WorkerThroughput(name, "", 0, 0.0, 0.0, None, None, None))
            continue
        stats = json.loads(path.read_text())
        batches = stats.get("batches", [])
        stage_ms = {s: 1e3 * v["seconds"] / v["calls"]
                    for s, v in (stats.get("stage_times") or {}).items() if v.get("calls")}
        out.append(WorkerThroughput(
            worker=name, device=stats.get("device", ""),
            samples=int(stats.get("samples", 0)),
            busy_s=sum(b["end"] - b["start"] for b in batches),
            load_s=float(stats.get("load_seconds", 0.0)),
            first_start_s=min(b["start"] for b in batches) - run_start if batches else None,
            first_end_s=min(b["end"] for b in batches) - run_start if batches else None,
            last_end_s=max(b["end"] for b in batches) - run_start if batches else None,
            stage_ms=stage_ms))
    return out


def layout_result(case: LayoutCase, run_dir: Path, argv: list[str], iree: str = HOST_IREE,
                  image: str = "") -> LayoutResult:
    """The result row of a case before it runs: skipped (with why) or an error until the
    run says otherwise."""
    result = LayoutResult(case.label, case.requested, "error", iree=iree, image=image)
    if case.profile is not None:
        result.layout = case.profile.layout.to_dict()
    if case.plan is None:
        result.status, result.reason = "skipped", case.skip_reason
        return result
    result.workers = len(case.plan.workers)
    result.run_dir = str(run_dir)
    result.run_command = shlex.join(["runner", *argv])
    return result


def record_outcome(result: LayoutResult, outcome: RunOutcome, workers: list[str],
                   run_start: float) -> LayoutResult:
    """Fills a result from a finished run: `run_start` (epoch seconds) is when its
    workers (or node tasks) started, `outcome.seconds` its wall time from there."""
    result.wall_s = outcome.seconds
    result.samples = outcome.done
    result.workers = len(workers)
    result.per_worker = worker_stats(Path(result.run_dir), workers, run_start)
    if outcome.complete:
        result.status = "ok"
    else:
        result.status = "incomplete"
        result.reason = (f"{outcome.done}/{outcome.requested} samples; "
                         f"{len(outcome.deaths)} worker death(s)")
    return result


def mark_best(results: list[LayoutResult]) -> LayoutResult | None:
    done = [r for r in results if r.status == "ok"]
    if not done:
        return None
    best = max(done, key=lambda r: r.samples_per_s)
    best.best = True
    return best

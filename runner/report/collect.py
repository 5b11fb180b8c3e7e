"""One `RunReport` from a run dir: everything the four report files show, read once.

All file reading (manifest, worker stats, accuracy.json, sample thumbnails, a comparison)
happens here; the renderers only format. A run dir without `accuracy.json` is reported as
not scored rather than refused: `runner run` writes its reports before anyone has scored.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from runner.accuracy.compare import ImageDiff, compare_runs
from runner.accuracy.samples import format_ids, open_source
from runner.accuracy.verdict import JSON_NAME, RangeCheck
from runner.base.errors import BadInput, RunnerError, ToolFailed
from runner.batch.worker import TASKS_DIR
from runner.config.mlperf_data import CAPTIONS_FILE, load_captions, load_review_ids
from runner.config.model_config import precision_text
from runner.inputs.yamlfile import read_yaml
from runner.report.thumbs import thumbnail_png
from runner.rundir.directory import REPRODUCE, RunDir
from runner.rundir.manifest import RunManifest
from runner.rundir.store import SampleStore

PASS, FAIL, NOT_SCORED, SUBSET = "PASS", "FAIL", "NOT SCORED", "SUBSET"
GALLERY_MAX = 12
WORST_DEFAULT = 8
NO_CAPTION = "(caption unavailable)"


@dataclass(frozen=True)
class Check:
    """One verdict line: a JUnit testcase, a row of the summary's checks table."""

    name: str  # stable id, e.g. `fid_range`, `worker_survived[w001]`
    title: str
    status: str  # pass | fail | skip
    message: str  # one line, with the numbers
    details: str = ""  # e.g. a dead worker's log tail
    seconds: float = 0.0  # what producing the checked thing took: JUnit's testcase time


@dataclass(frozen=True)
class Scores:
    """What `runner score` left in accuracy.json (runner/accuracy/verdict.py)."""

    fid: RangeCheck | None  # None: not scored (`--metrics clip`)
    clip: RangeCheck | None  # None: not scored (`--metrics fid`)
    n: int
    sample_ids: str
    ranges_samples: str
    labels: tuple[str, ...]  # why the numbers are not comparable with MLPerf's ranges
    subset: bool
    require_full: bool  # a subset is then a failure, not "not judged"
    backbones: str
    backbones_mode: str
    profile: str
    mlperf_line: str
    seconds: float | None
    device: str
    clip_per_sample: Mapping[int, float] = field(default_factory=dict)
    versions: Mapping[str, str] = field(default_factory=dict)

    @property
    def checks(self) -> tuple[RangeCheck, ...]:
        """The scored metrics' checks, in MLPerf's order."""
        return tuple(c for c in (self.fid, self.clip) if c is not None)

    @property
    def not_scored(self) -> tuple[str, ...]:
        return tuple(m for m, c in (("FID", self.fid), ("CLIP", self.clip)) if c is None)

    def not_scored_note(self, metric: str) -> str:
        """Why `metric` has no score: the run asked for the other one only."""
        asked = ",".join(c.metric.lower() for c in self.checks)
        return (f"{metric} not scored: only {' and '.join(c.metric for c in self.checks)} "
                f"was asked for (--metrics {asked})")

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def state(self) -> str:
        """pass | fail | subset, as runner.accuracy.verdict.Verdict.state decides it."""
        if self.subset:
            return "fail" if self.require_full else "subset"
        return "pass" if self.passed else "fail"

    @property
    def seeded(self) -> bool:
        return self.backbones_mode == "seeded"


@dataclass(frozen=True)
class BatchSpan:
    """When one batch of a worker ran (its timeline bar), not the queue's batch of work."""

    start: float  # epoch seconds
    end: float
    samples: int

    @property
    def rate(self) -> float:
        return self.samples / (self.end - self.start) if self.end > self.start else 0.0


@dataclass(frozen=True)
class WorkerReport:
    name: str
    device: str
    samples: int
    busy_s: float  # inside batches
    load_s: float
    batches: tuple[BatchSpan, ...]
    stage_ms: Mapping[str, float] = field(default_factory=dict)

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.busy_s if self.busy_s > 0 else 0.0


@dataclass(frozen=True)
class Death:
    worker: str  # a worker name, or `node <key>` for a Slurm node task
    exit_code: int | None
    requeued: int
    log_tail: str
    attempt: int  # 1-based


@dataclass(frozen=True)
class Timing:
    started_at: str | None
    finished_at: str | None
    attempts: int
    wall_s: float | None  # the last attempt: workers started -> last one exited
    total_s: float  # every attempt
    samples: int  # produced in the last attempt

    @property
    def samples_per_s(self) -> float | None:
        return self.samples / self.wall_s if self.wall_s else None


@dataclass(frozen=True)
class Sample:
    qsl_idx: int
    caption: str
    worker: str
    device: str
    clip: float | None
    thumb: bytes | None  # PNG; None when the file could not be read
    problem: str = ""


@dataclass(frozen=True)
class WorstPair:
    diff: ImageDiff
    caption: str
    thumb_here: bytes | None
    thumb_there: bytes | None


@dataclass(frozen=True)
class ComparisonReport:
    against: str
    summary: Mapping[str, Any]
    only_here: str
    only_there: str
    worst: tuple[WorstPair, ...]


@dataclass(frozen=True)
class RunReport:
    run_dir: Path
    name: str
    profile: str
    model: str
    precision: str  # `fp16, VAE fp32` (model_config.precision_text)
    model_record: Mapping[str, Any]  # run.json's `model`: name, source, dtype, vae_dtype...
    status: str  # as run.json records it: complete | incomplete | running
    requested: int
    done: int
    missing: tuple[int, ...]
    unexpected: tuple[int, ...]
    layout: Mapping[str, Any]
    plan_notes: tuple[str, ...]
    plan_workers: tuple[Mapping[str, Any], ...]
    executor: str
    iree: Mapping[str, Any]
    image: Mapping[str, Any] | None
    host: Mapping[str, Any]
    slurm: Mapping[str, Any] | None
    compiled: tuple[Mapping[str, Any], ...]
    timing: Timing
    workers: tuple[WorkerReport, ...]
    deaths: tuple[Death, ...]
    scores: Scores | None
    score_note: str  # why there are no scores
    checks: tuple[Check, ...]
    gallery: tuple[Sample, ...]
    gallery_kind: str  # review | first
    comparison: ComparisonReport | None
    reproduce: str
    argv: tuple[str, ...]

    @property
    def verdict(self) -> str:
        if any(c.status == "fail" for c in self.checks):
            return FAIL
        if self.scores is None:
            return NOT_SCORED
        return SUBSET if self.scores.subset else PASS

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def labels(self) -> tuple[str, ...]:
        return self.scores.labels if self.scores else ()

    @property
    def runtime_version(self) -> str:
        return str((self.iree.get("iree.runtime") or {}).get("version", "?"))


def label_parts(label: str) -> tuple[str, str]:
    """`seeded random backbones: not comparable ...` -> (`Seeded random backbones`, the rest),
    so a page can put the kind of caveat in bold."""
    head, sep, rest = label.partition(":")
    if not sep:
        return "", label
    return head[:1].upper() + head[1:], rest.strip()


def score_text(value: float | None) -> str:
    """Scores and bounds at the precision MLPerf's ranges are written with."""
    if value is None:
        return "-"
    return f"{value:.8g}"


def margin_text(check: RangeCheck) -> str:
    if check.value < check.low:
        return f"{check.low - check.value:.3g} below the lower bound"
    if check.value > check.high:
        return f"{check.value - check.high:.3g} above the upper bound"
    if check.margin_low <= check.margin_high:
        return f"margin {check.margin_low:.3g} to the lower bound"
    return f"margin {check.margin_high:.3g} to the upper bound"


# -- reading -----------------------------------------------------------------------------------


def _model(manifest: RunManifest) -> dict[str, Any]:
    """The model's name and precisions: run.json's record, else (a run made before it was
    recorded) its model config's, else what the profile names."""
    if manifest.model:
        return manifest.model
    fallback = {"name": str(manifest.profile_config.get("model", "?")), "dtype": "?",
                "vae_dtype": "float32"}
    path = manifest.compiled.get("model_config")
    if not path:
        return fallback
    try:
        raw = read_yaml(Path(path), what="model config")
    except RunnerError:
        return fallback
    if not isinstance(raw, dict):
        return fallback
    return {"name": str(raw.get("name", fallback["name"])),
            "dtype": str(raw.get("dtype", "?")),
            "vae_dtype": str(raw.get("vae_dtype") or "float32")}


def _range(entry: Any, metric: str, where: str) -> RangeCheck:
    try:
        low, high = (float(v) for v in entry["range"])
        return RangeCheck(metric, float(entry["score"]), low, high)
    except (KeyError, TypeError, ValueError) as e:
        raise BadInput(f"no usable {metric} score/range: {e!r}", where=where,
                       fix="score the run again with `runner score`") from e


def read_scores(run_dir: Path) -> tuple[Scores | None, str]:
    """(scores, why not): accuracy.json as `runner score` writes it, or the reason it is not
    there or not usable. Pass/fail is recomputed from the numbers, so a record whose ranges
    were edited is judged by what it says now."""
    path = Path(run_dir) / JSON_NAME
    if not path.is_file():
        return None, f"no {JSON_NAME}: `runner score {run_dir}` writes it"
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        left_out = set(data.get("not_scored") or ())
        fid, clip = (None if key in left_out and data.get(key) is None
                     else _range(data.get(key), key.upper(), f"{path}: {key}")
                     for key in ("fid", "clip"))
        if fid is None and clip is None:
            raise ValueError("neither metric was scored")
    except (OSError, ValueError, RunnerError) as e:
        return None, f"{path} is unreadable ({e})"
    backbones = data.get("backbones") or {}
    per_sample = {}
    for k, v in (data.get("clip_per_sample") or {}).items():
        try:
            per_sample[int(k)] = float(v)
        except (TypeError, ValueError):
            continue
    seconds = data.get("seconds")
    return Scores(
        fid=fid, clip=clip, n=int(data.get("n", 0)), sample_ids=str(data.get("sample_ids", "")),
        ranges_samples=str(data.get("ranges_samples", "")),
        labels=tuple(str(x) for x in data.get("labels", [])), subset=bool(data.get("subset")),
        require_full=bool(data.get("require_full")),
        backbones=str(backbones.get("label", "?")), backbones_mode=str(backbones.get("mode", "?")),
        profile=str(data.get("profile", "?")), mlperf_line=str(data.get("mlperf_line", "")),
        seconds=float(seconds) if isinstance(seconds, (int, float)) else None,
        device=str(data.get("device", "?")), clip_per_sample=per_sample,
        versions={str(k): str(v) for k, v in (data.get("versions") or {}).items()},
    ), ""


def _stats(run_dir: Path, manifest: RunManifest) -> dict[str, dict[str, Any]]:
    """Worker stats as run.json's `finish` recorded them, else straight from the files (a run
    still going, or one whose driver was killed)."""
    if manifest.workers:
        return manifest.workers
    out = {}
    for path in sorted((Path(run_dir) / TASKS_DIR).glob("*.stats.json")):
        try:
            out[path.name.removesuffix(".stats.json")] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return out


def _worker(name: str, stats: dict[str, Any]) -> WorkerReport:
    batches = tuple(BatchSpan(float(b["start"]), float(b["end"]), int(b.get("samples", 0)))
                    for b in stats.get("batches", []) if "start" in b and "end" in b)
    stage_ms = {s: 1e3 * v["seconds"] / v["calls"]
                for s, v in (stats.get("stage_times") or {}).items()
                if isinstance(v, dict) and v.get("calls")}
    return WorkerReport(name, str(stats.get("device", "?")), int(stats.get("samples", 0)),
                        sum(b.end - b.start for b in batches),
                        float(stats.get("load_seconds", 0.0)), batches, stage_ms)


def _deaths(manifest: RunManifest) -> list[Death]:
    out = []
    for n, attempt in enumerate(manifest.attempts, start=1):
        for d in attempt.deaths:
            name = d.get("worker") or f"node {d.get('node', '?')}"
            code = d.get("exit_code")
            out.append(Death(str(name), code if isinstance(code, int) else None,
                             len(d.get("requeued") or []), str(d.get("log_tail", "")), n))
    return out


def _timing(manifest: RunManifest, workers: list[WorkerReport], done: int) -> Timing:
    attempts = manifest.attempts
    last = attempts[-1] if attempts else None
    samples = sum(w.samples for w in workers)
    if not workers and len(attempts) == 1:
        samples = done
    return Timing(manifest.started_at, last.finished_at if last else None, len(attempts),
                  last.seconds if last else None,
                  sum(a.seconds or 0.0 for a in attempts), samples)


def _captions(manifest: RunManifest):
    for path in (manifest.captions, CAPTIONS_FILE):
        if path:
            try:
                return load_captions(Path(path))
            except RunnerError:
                continue
    return None


def _caption(captions, qsl_idx: int) -> str:
    if captions is None or not 0 <= qsl_idx < len(captions):
        return NO_CAPTION
    return captions[qsl_idx]


def _gallery(run_dir: Path, done: set[int], captions, scores: Scores | None
             ) -> tuple[list[Sample], str]:
    """MLPerf's review ids the run holds; without any, its first samples."""
    review = [i for i in load_review_ids() if i in done]
    ids, kind = (review, "review") if review else (sorted(done)[:GALLERY_MAX], "first")
    store = SampleStore(run_dir)
    out = []
    for qsl_idx in ids:
        clip = scores.clip_per_sample.get(qsl_idx) if scores else None
        try:
            record = store.record(qsl_idx)
            thumb = thumbnail_png(store.load(qsl_idx))
            out.append(Sample(qsl_idx, _caption(captions, qsl_idx), record.worker,
                              record.device, clip, thumb))
        except (RunnerError, OSError, KeyError, ValueError) as e:
            out.append(Sample(qsl_idx, _caption(captions, qsl_idx), "?", "?", clip, None,
                              problem=str(e).splitlines()[0]))
    return out, kind


def _load_images(location: Path, ids: set[int], shape) -> dict[int, np.ndarray]:
    """The other run's images for the worst ids: a sample store is random access; a
    generate dir or an accuracy log is read through, keeping only these ids."""
    source = open_source(location)
    if source.kind == "store":
        store = SampleStore(source.run_dir)
        return {i: store.load(i) for i in ids}
    return {i: img for i, img in source.iter_samples(shape) if i in ids}


def _comparison(run_dir: Path, against: Path, worst: int, captions) -> ComparisonReport:
    store = SampleStore(run_dir)
    done = sorted(store.done_ids())
    shape = tuple(store.load(done[0], verify=False).shape) if done else None
    try:
        comparison = compare_runs(run_dir, against, shape)
    except ImportError as e:
        raise ToolFailed(f"--against needs torch and torchmetrics: {e}", where="--against",
                         fix="pip install -e '.[metrics]'") from e
    diffs = [d for d in comparison.worst(worst) if d.max_abs > 0]  # identical: nothing to see
    ids = {d.qsl_idx for d in diffs}
    there = _load_images(Path(against), ids, shape)
    pairs = tuple(WorstPair(d, _caption(captions, d.qsl_idx),
                            thumbnail_png(store.load(d.qsl_idx)),
                            thumbnail_png(there[d.qsl_idx]) if d.qsl_idx in there else None)
                  for d in diffs)
    return ComparisonReport(str(against), comparison.summary(), format_ids(comparison.only_a),
                            format_ids(comparison.only_b), pairs)


# -- checks ------------------------------------------------------------------------------------


def _completeness(run_dir: Path, requested: int, missing: list[int], unexpected: list[int]
                  ) -> Check:
    title = "all requested samples present"
    failed = SampleStore(run_dir).failures(missing)
    if failed:
        why = failed[min(failed)]
        return Check("completeness", title, "fail",
                     f"{len(failed)} of {requested} samples failed (first: sample "
                     f"{why.qsl_idx}: {why.error}); fix: {why.fix}")
    if missing:
        first = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        return Check("completeness", title, "fail",
                     f"{len(missing)} of {requested} requested samples are missing "
                     f"(first: {first}); `runner run --resume {run_dir}` completes them")
    if unexpected:
        return Check("completeness", title, "fail",
                     f"{len(unexpected)} samples in the store were not requested "
                     f"(first: {', '.join(map(str, unexpected[:8]))})")
    return Check("completeness", title, "pass",
                 f"{requested}/{requested} requested samples present")


def _range_check(metric: str, check: RangeCheck | None, scores: Scores | None, note: str
                 ) -> Check:
    name, title = f"{metric.lower()}_range", f"{metric} within the profile's range"
    if check is None:
        why = scores.not_scored_note(metric) if scores else f"not scored: {note}"
        return Check(name, title, "skip", why)
    where = "in" if check.passed else "outside"
    message = (f"{metric} {score_text(check.value)} {where} [{score_text(check.low)}, "
               f"{score_text(check.high)}]: {margin_text(check)}")
    notes = "\n".join(f"note: {label}" for label in (scores.labels if scores else ()))
    if scores is not None and scores.subset:
        # The ranges hold for another sample set: shown, never judged (see accuracy.verdict).
        return Check(name, title, "skip", f"subset of {scores.n}, not judged: {message}", notes)
    return Check(name, title, "pass" if check.passed else "fail", message, notes)


def _full_set(scores: Scores | None) -> tuple[Check, ...]:
    """With --require-full, a subset is a failure of its own, named as such."""
    if scores is None or not scores.require_full:
        return ()
    title = "the full sample set was scored (--require-full)"
    if scores.subset:
        return (Check("full_set", title, "fail",
                      f"only {scores.n} samples ({scores.sample_ids}) were scored; the "
                      f"ranges hold for {scores.ranges_samples}"),)
    return (Check("full_set", title, "pass", f"{scores.n} samples: the ranges' set"),)


def _timed(checks: tuple[Check, ...], timing: Timing, scores: Scores | None,
           workers: dict[str, WorkerReport]) -> tuple[Check, ...]:
    """Each check's time: the run's for completeness, scoring's for the score checks, a
    worker's load + batch time for its survival."""
    def seconds(c: Check) -> float:
        if c.name == "completeness":
            return timing.total_s
        if c.name.startswith("worker_survived["):
            w = workers.get(c.name.removeprefix("worker_survived[").removesuffix("]"))
            return w.load_s + w.busy_s if w else 0.0
        return (scores.seconds or 0.0) if scores else 0.0
    return tuple(replace(c, seconds=seconds(c)) for c in checks)


def _survival(names: list[str], deaths: list[Death], workers: dict[str, WorkerReport]
              ) -> list[Check]:
    out = []
    for name in names:
        mine = [d for d in deaths if d.worker == name]
        title = f"worker {name} survived"
        if mine:
            text = "; ".join(
                f"died (exit {'?' if d.exit_code is None else d.exit_code}) in attempt "
                f"{d.attempt}, {d.requeued} batch(es) handed to the survivors" for d in mine)
            out.append(Check(f"worker_survived[{name}]", title, "fail", f"{name} {text}",
                             "\n\n".join(d.log_tail for d in mine)))
        else:
            w = workers.get(name)
            done = f"{w.samples} samples at {w.samples_per_s:.3f} samples/s" if w else \
                "no batch finished"
            out.append(Check(f"worker_survived[{name}]", title, "pass", f"{name}: {done}"))
    return out


# -- entry point -------------------------------------------------------------------------------


def _every_worker(manifest: RunManifest, stats: dict[str, dict[str, Any]], deaths: list[Death]
                  ) -> tuple[list[str], dict[str, WorkerReport]]:
    """The run's worker names (planned ones first, then any that reported or died), and a
    report of each by name, sorted: one with zeros for a worker killed before its first
    batch, which wrote no stats, so that no worker goes missing from the report."""
    plan = manifest.plan
    workers = {name: _worker(name, s) for name, s in sorted(stats.items())}
    names = [] if manifest.executor == "slurm" else [
        str(w["name"]) for w in plan.get("workers", []) if "name" in w]
    for name in [*workers, *(d.worker for d in deaths)]:
        if name not in names:
            names.append(name)
    planned = {str(w.get("name")): w for w in plan.get("workers", [])}
    for name in names:
        if name not in workers and not name.startswith("node "):
            w = planned.get(name, {})
            device = f"{w['device_uri']}#{w['device_id']}" if "device_uri" in w else "?"
            workers[name] = WorkerReport(name, device, 0, 0.0, 0.0, ())
    return names, {name: workers[name] for name in sorted(workers)}


def collect(run_dir: Path, against: Path | None = None, worst: int = WORST_DEFAULT
            ) -> RunReport:
    run_dir = Path(run_dir)
    manifest = RunDir(run_dir).load()
    model = _model(manifest)
    requested_ids = [int(i) for i in manifest.sample_ids]
    on_disk = SampleStore(run_dir).done_ids()
    done = set(requested_ids) & on_disk
    missing = sorted(set(requested_ids) - on_disk)
    unexpected = sorted(on_disk - set(requested_ids))
    plan = manifest.plan
    stats = _stats(run_dir, manifest)
    deaths = _deaths(manifest)
    names, workers = _every_worker(manifest, stats, deaths)
    scores, note = read_scores(run_dir)
    captions = _captions(manifest)
    gallery, kind = _gallery(run_dir, done, captions, scores)
    timing = _timing(manifest, list(workers.values()), len(done))
    checks = _timed((_completeness(run_dir, len(requested_ids), missing, unexpected),
                     _range_check("FID", scores.fid if scores else None, scores, note),
                     _range_check("CLIP", scores.clip if scores else None, scores, note),
                     *_full_set(scores),
                     *_survival(names, deaths, workers)), timing, scores, workers)
    comparison = (_comparison(run_dir, Path(against), worst, captions)
                  if against is not None else None)
    reproduce = run_dir / REPRODUCE
    compiled = tuple(
        {"mlir": Path(c.get("mlir", "?")).name, "vmfb_sha256": c.get("vmfb_sha256", "?"),
         "cached": bool(c.get("cached")), "seconds": c.get("seconds")}
        for c in manifest.compiled.get("compiled", []))
    slurm = manifest.slurm
    return RunReport(
        run_dir=run_dir, name=run_dir.resolve().name, profile=manifest.profile,
        model=str(model.get("name", "?")),
        precision=precision_text(str(model.get("dtype", "?")),
                                 str(model.get("vae_dtype") or "float32")),
        model_record=model, status=manifest.status,
        requested=len(requested_ids), done=len(done), missing=tuple(missing),
        unexpected=tuple(unexpected), layout=manifest.layout,
        plan_notes=tuple(str(n) for n in plan.get("notes", [])),
        plan_workers=tuple(plan.get("workers", [])),
        executor=manifest.executor, iree=manifest.iree,
        image=manifest.image, host=manifest.host,
        slurm={"version": slurm.get("version"), "jobs": len(slurm.get("jobs", [])),
               "nodes": len(slurm.get("nodes", {}))} if isinstance(slurm, dict) else None,
        compiled=compiled, timing=timing,
        workers=tuple(workers.values()), deaths=tuple(deaths), scores=scores, score_note=note,
        checks=checks, gallery=tuple(gallery), gallery_kind=kind, comparison=comparison,
        reproduce=reproduce.read_text(errors="replace") if reproduce.is_file() else "",
        argv=tuple(str(a) for a in manifest.argv))


def json_finite(value: float | None) -> float | None:
    """JSON has no inf/nan: identical images have PSNR inf, written as null."""
    return None if value is None or not math.isfinite(value) else value

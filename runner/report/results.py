"""`results.json`: the report for machines. Numbers unrounded; names as in the other files."""

from __future__ import annotations

from typing import Any

from runner.accuracy.verdict import RangeCheck
from runner.report.collect import ComparisonReport, RunReport, Scores, WorkerReport, json_finite

SCHEMA = "iree-sdxl-runner/report/1"


def _range(check: RangeCheck | None) -> dict[str, Any] | None:
    """None for a metric not scored (`not_scored` names it)."""
    if check is None:
        return None
    return {**check.to_dict(), "margin": min(check.margin_low, check.margin_high)}


def _finite(obj: Any) -> Any:
    """JSON has no inf/nan (identical images have PSNR inf): those become null."""
    if isinstance(obj, float):
        return json_finite(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _scores(s: Scores) -> dict[str, Any]:
    """The scores with their ranges, and all that makes them comparable or not: how many
    samples, which backbones and versions, the labels that set them apart from MLPerf's."""
    return {
        "verdict": s.state,
        "fid": _range(s.fid), "clip": _range(s.clip),
        "not_scored": [m.lower() for m in s.not_scored],
        "n": s.n, "sample_ids": s.sample_ids, "ranges_samples": s.ranges_samples,
        "subset": s.subset, "comparable_with_mlperf": not s.labels,
        "labels": list(s.labels), "backbones": s.backbones,
        "backbones_mode": s.backbones_mode, "profile": s.profile,
        "mlperf_line": s.mlperf_line, "seconds": s.seconds, "device": s.device,
        "versions": dict(s.versions)}


def _worker(w: WorkerReport) -> dict[str, Any]:
    """One worker's throughput and time per stage, and each of its batches' start and end:
    what a reader needs to see where its time went."""
    return {"worker": w.name, "device": w.device, "samples": w.samples,
            "busy_s": w.busy_s, "load_s": w.load_s,
            "samples_per_s": w.samples_per_s, "stage_ms": dict(w.stage_ms),
            "batches": [{"start": b.start, "end": b.end, "samples": b.samples}
                        for b in w.batches]}


def _comparison(c: ComparisonReport) -> dict[str, Any]:
    """The comparison with another run: its summary, the samples only one side has, and
    the worst-differing samples."""
    return {"against": c.against, "summary": dict(c.summary), "only_here": c.only_here,
            "only_there": c.only_there, "worst": [p.diff.to_dict() for p in c.worst]}


def results(report: RunReport) -> dict[str, Any]:
    r, s, t = report, report.scores, report.timing
    compiler, runtime = r.iree.get("iree.compiler") or {}, r.iree.get("iree.runtime") or {}
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "run_dir": str(r.run_dir.resolve()),
        "name": r.name,
        "profile": r.profile,
        "model": r.model,
        "model_precision": {"dtype": r.model_record.get("dtype"),
                            "vae_dtype": r.model_record.get("vae_dtype") or "float32"},
        "verdict": r.verdict,
        "failures": [c.message for c in r.failures],
        "checks": [{"name": c.name, "title": c.title, "status": c.status,
                    "message": c.message, "details": c.details} for c in r.checks],
        "samples": {"requested": r.requested, "done": r.done, "missing": list(r.missing),
                    "unexpected": list(r.unexpected), "status": r.status},
        "scores": None if s is None else _scores(s),
        "not_scored_reason": r.score_note or None,
        "versions": {
            "iree_compiler": {k: compiler.get(k) for k in ("version", "commit", "file")},
            "iree_runtime": {k: runtime.get(k) for k in ("version", "commit", "file")},
            "iree_compile": r.iree.get("iree-compile"),
            "python": r.host.get("python"),
        },
        "host": dict(r.host),
        "executor": r.executor,
        "image": None if not r.image else {
            "ref": r.image.get("ref"), "id": r.image.get("id"),
            "labels": r.image.get("labels", {}), "provenance": r.image.get("provenance")},
        "slurm": dict(r.slurm) if r.slurm else None,
        "layout": dict(r.layout),
        "plan": {"workers": len(r.plan_workers), "notes": list(r.plan_notes),
                 "worker_names": [w.get("name") for w in r.plan_workers]},
        "compiled": [dict(c) for c in r.compiled],
        "timings": {"started_at": t.started_at, "finished_at": t.finished_at,
                    "attempts": t.attempts, "wall_s": t.wall_s, "total_s": t.total_s,
                    "samples_last_attempt": t.samples, "samples_per_s": t.samples_per_s,
                    "scoring_s": s.seconds if s else None},
        "workers": [_worker(w) for w in r.workers],
        "deaths": [{"worker": d.worker, "exit_code": d.exit_code, "requeued": d.requeued,
                    "attempt": d.attempt, "log_tail": d.log_tail} for d in r.deaths],
        "gallery": {"kind": r.gallery_kind, "ids": [g.qsl_idx for g in r.gallery]},
        "comparison": None if r.comparison is None else _comparison(r.comparison),
        "reproduce": r.reproduce,
        "argv": list(r.argv),
    }
    return _finite(out)

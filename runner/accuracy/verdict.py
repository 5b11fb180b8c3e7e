"""Pass or fail against the profile's ranges, and the two files a verdict leaves in the run dir.

Ranges are MLPerf's: two-sided and inclusive, compared as floats with no rounding, so a score
exactly on a bound passes and one ulp outside fails. `accuracy.txt` carries MLPerf's result
line (the form AMD's harness writes and the submission checker's `'FID_SCORE':\\s+'?([\\d.]+)`
reads) with full float precision; `accuracy.json` carries everything needed to audit it.

A run may score one metric (`--metrics fid|clip`): the verdict then judges that one only,
and every report names the metric that was not scored. The MLPerf line keeps MLPerf's form,
the printed result dict, with the one key that was computed: MLPerf's submission checker
requires both keys, so it rejects such a result as incomplete, which it is for MLPerf.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.accuracy.score import AccuracyResult
from runner.base.errors import EXIT_FAILED, EXIT_OK, BadInput
from runner.base.fileio import atomic_write_json, atomic_write_text
from runner.base.outcome import Outcome
from runner.config.profile import METRICS, Accuracy

JSON_NAME = "accuracy.json"
TXT_NAME = "accuracy.txt"


def subset_label(n: int) -> str:
    return f"subset of {n}: not judged against the full-set ranges"


@dataclass(frozen=True)
class RangeCheck:
    metric: str  # "FID" | "CLIP"
    value: float
    low: float
    high: float

    @property
    def passed(self) -> bool:
        return self.low <= self.value <= self.high

    @property
    def margin_low(self) -> float:
        """How far above the lower bound (negative: below it)."""
        return self.value - self.low

    @property
    def margin_high(self) -> float:
        """How far below the upper bound (negative: above it)."""
        return self.high - self.value

    def to_dict(self) -> dict[str, Any]:
        return {"score": self.value, "range": [self.low, self.high], "pass": self.passed,
                "margin_low": self.margin_low, "margin_high": self.margin_high}

    def line(self, judged: bool = True) -> str:
        """The score against its range; `judged=False` (a subset: the range holds for
        another sample set) shows the margins but no PASS or FAIL."""
        state = ("PASS" if self.passed else "FAIL") if judged else "not judged"
        return (f"{self.metric:<4} {self.value:.8f}  range [{self.low:.8f}, {self.high:.8f}]  "
                f"{state}  (above low by {self.margin_low:+.8f}, below high by "
                f"{self.margin_high:+.8f})")


@dataclass(frozen=True)
class Verdict:
    """Pass or fail against the ranges; or, for fewer samples than the ranges were set for
    (`subset_of`), not judged at all: a smoke test of 4 prompts says nothing about ranges
    calibrated on 5000, so it completes with exit 0 unless `require_full` makes it a failure.
    """

    checks: tuple[RangeCheck, ...]  # the scored metrics, in MLPerf's order
    labels: tuple[str, ...]  # why the scores are not MLPerf-comparable, if they are not
    subset_of: int | None = None  # samples scored, when they are not the ranges' set
    require_full: bool = False
    not_scored: tuple[str, ...] = ()  # metrics left out (`--metrics`): "FID" / "CLIP"

    @property
    def state(self) -> Outcome:
        if self.subset_of is not None:
            return Outcome.FAIL if self.require_full else Outcome.SUBSET
        return Outcome.PASS if all(c.passed for c in self.checks) else Outcome.FAIL

    @property
    def passed(self) -> bool:
        return self.state == Outcome.PASS

    @property
    def exit_code(self) -> int:
        return EXIT_FAILED if self.state == Outcome.FAIL else EXIT_OK

    def check(self, metric: str) -> RangeCheck | None:
        """The check of "FID" or "CLIP"; None when that metric was not scored."""
        return next((c for c in self.checks if c.metric == metric), None)

    def lines(self) -> list[str]:
        out = [c.line(judged=self.subset_of is None) for c in self.checks]
        if self.state == Outcome.SUBSET:
            out.append("verdict: SUBSET (not judged; --require-full makes this a failure)")
        else:
            out.append(f"verdict: {self.state.upper()}")
        if self.subset_of is not None and self.require_full:
            out.append(f"note: --require-full: only {self.subset_of} samples were scored")
        out.extend(f"note: {label}" for label in self.labels)
        return out


def not_scored_label(left_out: tuple[str, ...], scored: tuple[str, ...]) -> str:
    """The caveat every report shows for a one-metric score (a label, like the seeded
    backbones' one: MLPerf's result needs both metrics)."""
    return (f"{' and '.join(m.upper() for m in left_out)} not scored (--metrics "
            f"{','.join(scored)}): the verdict judges {' and '.join(m.upper() for m in scored)}"
            " only; an MLPerf result needs both")


def require_ranges(accuracy: Accuracy, where: str, metrics: tuple[str, ...] = METRICS
                   ) -> dict[str, tuple[float, float]]:
    """The ranges of the metrics to score; each must be there."""
    missing = [m for m in metrics if accuracy.range_of(m) is None]
    if missing:
        raise BadInput(f"the profile has no accuracy range for {' and '.join(missing)} "
                       "to judge against",
                       where=f"{where}: " + " / ".join(f"accuracy.{m}" for m in missing),
                       fix="add `fid: [low, high]` and `clip: [low, high]` (`runner "
                           "calibrate` writes them from a known-good run), or score the "
                           "other metric only with --metrics")
    return {m: r for m in metrics if (r := accuracy.range_of(m)) is not None}


def judge(fid: float | None, clip: float | None, accuracy: Accuracy,
          labels: tuple[str, ...] = (), where: str = "profile", subset_of: int | None = None,
          require_full: bool = False) -> Verdict:
    """A score of None is a metric not scored: no check, and named in `not_scored`.
    `subset_of`: the number of samples scored when they are not the ranges' set; the
    subset label is added here so every caller words it the same."""
    scores = {"fid": fid, "clip": clip}
    scored = tuple(m for m in METRICS if scores[m] is not None)
    if not scored:
        raise BadInput("no metric was scored", fix="score fid, clip or both")
    ranges = require_ranges(accuracy, where, scored)
    left_out = tuple(m for m in METRICS if m not in scored)
    if left_out:
        labels = (*labels, not_scored_label(left_out, scored))
    if subset_of is not None:
        labels = (*labels, subset_label(subset_of))
    checks = tuple(RangeCheck(m.upper(), float(v), *ranges[m])
                   for m, v in scores.items() if v is not None)
    return Verdict(checks, tuple(labels), subset_of, require_full,
                   tuple(m.upper() for m in left_out))


def mlperf_line(fid: float | None, clip: float | None) -> str:
    """MLPerf's printed result, values as full-precision strings (`repr` of the float); a
    metric not scored is left out of the dict (see the module doc)."""
    shown = {"FID_SCORE": fid, "CLIP_SCORE": clip}
    return "Accuracy Results: {" + ", ".join(
        f"'{k}': '{float(v)!r}'" for k, v in shown.items() if v is not None) + "}"


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for dist in ("torch", "torchvision", "open_clip_torch", "scipy", "numpy"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "absent"
    return out


def result_record(result: AccuracyResult, verdict: Verdict, extra: dict[str, Any]
                  ) -> dict[str, Any]:
    fid_check, clip_check = verdict.check("FID"), verdict.check("CLIP")
    per_sample = ([] if result.clip is None  # CLIP not scored: no per-sample scores
                  else list(zip(result.sample_ids, result.clip_per_sample, strict=True)))
    worst = sorted((score, i) for i, score in per_sample)[:10]
    record: dict[str, Any] = {
        "verdict": verdict.state,
        "require_full": verdict.require_full,
        "comparable_with_mlperf": not verdict.labels,
        "labels": list(verdict.labels),
        "metrics": [c.metric.lower() for c in verdict.checks],
        "not_scored": [m.lower() for m in verdict.not_scored],
        "fid": None if fid_check is None else {
            **fid_check.to_dict(),
            "method": result.frechet.method if result.frechet else None,
            "eps_offset_used": bool(result.frechet and result.frechet.eps_offset),
            "discarded_imaginary": result.frechet.max_imag if result.frechet else None,
            "cross_check": (None if result.frechet_check is None or result.fid is None else
                            {"method": result.frechet_check.method,
                             "score": result.frechet_check.value,
                             "difference": result.frechet_check.value - result.fid})},
        "clip": None if clip_check is None else clip_check.to_dict(),
        "n": result.n,
        "duplicates_skipped": result.duplicates,
        "backbones": result.backbones.to_dict(),
        "fid_weights_sha256": result.backbones.fid_weights,
        "clip_weights_sha256": result.backbones.clip_weights,
        "statistics": {"path": result.statistics_path, "sha256": result.statistics_sha256},
        "batch_size": result.batch_size,
        "device": result.device,
        "seconds": result.seconds,
        "frechet_seconds": result.frechet_seconds,
        "frechet_cached": result.frechet_cached,
        "images_per_second": result.images_per_second,
        "worst_clip": [{"qsl_idx": i, "clip": s} for s, i in worst],
        "clip_per_sample": {str(i): score for i, score in per_sample},
        "mlperf_line": verdict_mlperf_line(verdict),
        "versions": _versions(),
    }
    record.update(extra)
    return record


def verdict_mlperf_line(verdict: Verdict) -> str:
    fid, clip = verdict.check("FID"), verdict.check("CLIP")
    return mlperf_line(None if fid is None else fid.value, None if clip is None else clip.value)


def write_results(out_dir: Path, result: AccuracyResult, verdict: Verdict,
                  extra: dict[str, Any]) -> tuple[Path, Path]:
    """`accuracy.json` and `accuracy.txt`, each written atomically."""
    json_path, txt_path = Path(out_dir) / JSON_NAME, Path(out_dir) / TXT_NAME
    atomic_write_json(json_path, result_record(result, verdict, extra))
    atomic_write_text(txt_path, verdict_mlperf_line(verdict) + "\n")
    return json_path, txt_path

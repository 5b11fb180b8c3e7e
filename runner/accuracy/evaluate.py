"""`runner score`: a run dir in, a verdict out (accuracy.json + accuracy.txt in the run dir).

The checks that can fail fast do, before any image is scored: the profile has ranges and
statistics, the weights are the published ones, the captions cover every id, the run holds
every sample it asked for (`allow_subset` waives this one). A scored set that is not the one
the ranges were set for is scored and labelled a subset, not judged against them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runner.accuracy.backbones import Backbones, backbone_weights, load_backbones
from runner.accuracy.frechet import FidStatistics, load_statistics
from runner.accuracy.samples import SampleSource, format_ids, open_source, scan_log_ids
from runner.accuracy.score import AccuracyResult, ScoreSettings, reader_jobs, score_samples
from runner.accuracy.settings import AccuracySettings, accuracy_settings, statistics_file
from runner.accuracy.verdict import (
    JSON_NAME,
    TXT_NAME,
    Verdict,
    judge,
    require_ranges,
    write_results,
)
from runner.base.errors import BadInput, IncompleteRun
from runner.config.mlperf_data import Captions, load_captions
from runner.config.profile import METRICS, Profile, load_profile, profile_from_raw, profile_path
from runner.rundir.mlperf_log import TRUNCATED_FIX, truncation
from runner.rundir.store import SampleStore, failures_error


@dataclass(frozen=True)
class ScorePlan:
    """What will be scored, decided before scoring."""

    source: SampleSource
    profile: Profile
    settings: AccuracySettings
    ids: tuple[int, ...]  # the samples that will be scored
    missing: tuple[int, ...]  # requested but absent
    subset: bool  # the scored set is not the set the ranges hold for


@dataclass(frozen=True)
class RunScore:
    plan: ScorePlan
    result: AccuracyResult
    verdict: Verdict
    json_path: Path
    txt_path: Path


def resolve_profile(source: SampleSource, name: str | Profile | None) -> Profile:
    """`--profile` where given (or the loaded profile a command scores with, its `--set`
    overrides applied); else the profile as the run recorded it, with the overrides it was
    made with (a profile file read again would not have them: an overridden
    `accuracy.fid_statistics` would quietly become the file's)."""
    if isinstance(name, Profile):
        return name
    chosen = name or source.profile
    if not chosen:
        raise BadInput("no profile recorded with these images", where=source.location,
                       fix="pass --profile (e.g. sdxl for an MLPerf SDXL accuracy log)")
    if name is None and source.profile_config is not None:
        return profile_from_raw(source.profile_config, profile_path(chosen))
    return load_profile(chosen)


def _missing_text(missing: tuple[int, ...]) -> str:
    return format_ids(missing) if len(missing) <= 40 else format_ids(missing[:40]) + ",..."


def plan_scoring(source: SampleSource, profile: Profile, captions: Captions,
                 allow_subset: bool, check_ranges_set: bool = True) -> ScorePlan:
    """`check_ranges_set=False` for calibration, where the run's set becomes the ranges' set."""
    settings = accuracy_settings(profile)
    if source.kind == "log":
        assert source.log is not None  # a "log" source always names its log
        cut = truncation(source.log)
        if cut:  # a cut-off log is said so, not counted as a run with samples missing
            raise BadInput(f"truncated accuracy log: {cut}", where=str(source.log),
                           fix=TRUNCATED_FIX)
        on_disk = scan_log_ids(source.log)
    else:
        on_disk = source.available or ()
    requested = source.requested if source.requested is not None else (
        settings.samples if source.kind == "log" else None)
    if requested is None:
        requested = on_disk
    missing = tuple(sorted(set(requested) - set(on_disk)))
    ids = tuple(sorted(set(on_disk) if source.kind == "log" else set(on_disk) & set(requested)))
    if not ids:
        raise BadInput("no images to score", where=source.location,
                       fix="generate the run's samples first")
    if ids[-1] >= len(captions):
        raise BadInput(f"sample {ids[-1]} has no caption: the file has {len(captions)} rows",
                       where=str(captions.path),
                       fix="use MLPerf's captions_source.tsv (5000 rows)")
    if missing and not allow_subset and source.run_dir.joinpath("run.json").is_file():
        raise IncompleteRun(f"the run is incomplete: {len(missing)} of {len(requested)} requested "
                          f"samples are missing ({_missing_text(missing)})",
                          where=source.location,
                          fix="finish the run (`runner run --resume`) and score it again")
    if missing and not allow_subset:  # a bare log or generate dir: nothing to resume
        raise BadInput(f"{len(missing)} of {len(requested)} requested samples are not "
                       f"there ({_missing_text(missing)})", where=source.location,
                       fix="score it without --require-full (a subset is scored and "
                       "labelled), or supply the complete images")
    expected = settings.samples if settings.samples is not None else tuple(range(len(captions)))
    # Not the ranges' set: scored, labelled "subset of N", not judged (runner.accuracy.verdict).
    subset = check_ranges_set and set(ids) != set(expected)
    return ScorePlan(source, profile, settings, ids, missing, subset)


def reference_statistics(p: ScorePlan) -> FidStatistics:
    return profile_statistics(p.profile, p.settings)


def profile_statistics(profile: Profile, settings: AccuracySettings) -> FidStatistics:
    """The FID reference statistics a profile names, read and checked (the scorer's read,
    and the preflight's before a run)."""
    where = f"{profile.path}: accuracy.fid_statistics"
    if settings.fid_statistics is None:
        raise BadInput("the profile names no FID reference statistics", where=where,
                       fix="set it to MLPerf's val2014.npz (SDXL) or a `runner calibrate` "
                           "output")
    path = statistics_file(settings, where)
    assert path is not None  # a profile that names none was refused above
    return load_statistics(path, where=where)


def open_backbones(p: ScorePlan, fid_weights=None, clip_weights=None, device: str = "cpu",
                   metrics: tuple[str, ...] = METRICS, **checksums) -> Backbones:
    return load_backbones(p.settings.backbones, p.settings.seed, fid_weights, clip_weights,
                          device, metrics=metrics, **checksums)


def run_scores(p: ScorePlan, backbones: Backbones, captions: Captions,
               reference: FidStatistics | None, batch_size: int = 1, progress: bool = True,
               metrics: tuple[str, ...] = METRICS) -> AccuracyResult:
    size = p.profile.model.image_size
    samples = p.source.iter_samples((size, size, 3), keep_duplicates=True,
                                    jobs=reader_jobs(backbones.device))
    return score_samples(samples, captions,
                         ScoreSettings(batch_size=batch_size, image_size=(size, size),
                                       progress=progress, metrics=metrics),
                         backbones, reference, total=len(p.ids))


def refuse_failed(source: SampleSource) -> None:
    """A run with samples its pipeline could not make (decoder output not finite) is not
    scored: FID and CLIP over the others would describe another sample set. (`runner
    generate` stops at such an image: its dir never holds one.)"""
    failed = SampleStore(source.run_dir).failures(source.requested)
    if failed:
        total = len(source.requested) if source.requested else len(failed)
        raise failures_error(failed, total, str(source.run_dir), "scoring refused")


def prepare_scoring(run_dir: Path, profile: str | Profile | None, log: Path | None,
                    allow_subset: bool, metrics: tuple[str, ...] | None, verify: bool = True
                    ) -> tuple[ScorePlan, Captions, tuple[str, ...], FidStatistics | None]:
    """Every check that can fail before an image is scored, in the order scoring meets
    them: the plan, the captions, the metrics scored and the FID reference statistics."""
    source = open_source(Path(run_dir), Path(log) if log else None, verify)
    refuse_failed(source)
    prof = resolve_profile(source, profile)
    prof.model.check_scorable()  # seeded random weights: images that mean nothing
    metrics = metrics or prof.accuracy.metrics
    require_ranges(prof.accuracy, str(prof.path), metrics)
    captions = load_captions(*([source.captions] if source.captions else []))
    p = plan_scoring(source, prof, captions, allow_subset)
    if "fid" in metrics and len(p.ids) < 2:  # known now, not after the networks and a pass
        raise BadInput(f"{len(p.ids)} image(s) to score; FID needs at least 2",
                       where=source.location,
                       fix="score two samples or more, or CLIP alone (--metrics clip)")
    reference = reference_statistics(p) if "fid" in metrics else None
    return p, captions, metrics, reference


def scoring_lines(p: ScorePlan, metrics: tuple[str, ...], fid_weights=None, clip_weights=None
                  ) -> list[str]:
    """A dry run's account of a scoring: what is scored, with which weights (found, not
    yet read: their sha256 is checked when loaded), against which statistics."""
    label = f"{len(p.ids)} samples ({format_ids(p.ids)}) of {p.source.location}"
    lines = [f"# score {' and '.join(m.upper() for m in metrics)} of {label}, profile "
             f"{p.profile.name}" + (" (a subset: scored, not judged)" if p.subset else "")]
    if p.missing:
        lines.append(f"# {len(p.missing)} requested sample(s) missing ({_missing_text(p.missing)})")
    for path in backbone_weights(p.settings.backbones, metrics, fid_weights, clip_weights):
        lines.append(f"# weights: {path}")
    if p.settings.backbones == "seeded":
        lines.append(f"# backbones: seeded random networks (seed {p.settings.seed})")
    return lines


def score_plan(run_dir: Path, *, profile: str | None = None, log: Path | None = None,
               metrics: tuple[str, ...] | None = None, fid_weights=None,
               clip_weights=None) -> list[str]:
    """What `runner score --dry-run` prints: every input checked as `evaluate_run` checks
    it, nothing read past that, nothing written."""
    p, _, metrics, reference = prepare_scoring(run_dir, profile, log, False, metrics, verify=False)
    lines = scoring_lines(p, metrics, fid_weights, clip_weights)
    if reference is not None:
        lines.append(f"# FID reference statistics: {reference.path}")
    json_path, txt_path = Path(run_dir) / JSON_NAME, Path(run_dir) / TXT_NAME
    return [*lines, f"# would write {json_path} and {txt_path}"]


def evaluate_run(run_dir: Path, *, profile: str | Profile | None = None, log: Path | None = None,
                 allow_subset: bool = False, require_full: bool = False,
                 fid_weights=None, clip_weights=None,
                 batch_size: int = 1, device: str = "cpu", progress: bool = True,
                 backbones: Backbones | Callable[[], Backbones] | None = None,
                 metrics: tuple[str, ...] | None = None) -> RunScore:
    """`metrics`: fid, clip or both; default the profile's `accuracy.metrics` (both unless
    it says otherwise). Only the weights and statistics of those metrics are needed.
    `backbones` may be a loader, called only once every check of the images has passed
    (a caller that keeps its networks between runs loads them no sooner)."""
    p, captions, metrics, reference = prepare_scoring(run_dir, profile, log, allow_subset, metrics)
    prof, source = p.profile, p.source
    if callable(backbones):
        backbones = backbones()
    backbones = backbones or open_backbones(p, fid_weights, clip_weights, device, metrics)
    result = run_scores(p, backbones, captions, reference, batch_size, progress, metrics)
    labels = []
    if backbones.info.mode == "seeded":
        labels.append(backbones.info.label)
    scored_missing = tuple(sorted(set(p.ids) - set(result.sample_ids)))
    subset = bool(p.subset or p.missing or scored_missing)
    verdict = judge(result.fid, result.clip, prof.accuracy, tuple(labels), str(prof.path),
                    subset_of=result.n if subset else None, require_full=require_full)
    extra = {
        "profile": prof.name, "profile_path": str(prof.path),
        "source": {"kind": source.kind, "path": source.location},
        "sample_ids": format_ids(result.sample_ids),
        "ranges_samples": p.settings.samples_text or f"0-{len(captions) - 1}",
        "subset": subset,
        "missing": format_ids(p.missing + scored_missing),
    }
    json_path, txt_path = write_results(Path(run_dir), result, verdict, extra)
    return RunScore(p, result, verdict, json_path, txt_path)

"""The files a run reads at its end, opened before its first batch by the functions that
read them then: a run of hours must not learn after its last sample that scoring cannot
start (the model refuses scoring, the FID statistics are missing or malformed, a weights
file is missing or not the published one)."""

from __future__ import annotations

from pathlib import Path

from runner.accuracy.backbones import find_weights, verify_weights, weight_specs
from runner.accuracy.evaluate import profile_statistics
from runner.accuracy.settings import accuracy_settings
from runner.base.errors import RunnerError
from runner.config.mlperf_data import CAPTIONS_FILE, load_captions
from runner.config.profile import Profile
from runner.preflight.check import CheckState, PreflightCheck


def captions_check(captions: Path | None) -> PreflightCheck:
    """The captions file the workers and the scorer read."""
    path = captions or CAPTIONS_FILE
    try:
        rows = len(load_captions(path))
    except RunnerError as e:
        return PreflightCheck.failed("captions", e)
    return PreflightCheck("captions", CheckState.OK, f"{rows} prompts in {path}", str(path))


def scoring_checks(profile: Profile, score: bool) -> list[PreflightCheck]:
    """What `Lifecycle.score` reads after the aggregation, in the order it reads it."""
    if not score:
        return [PreflightCheck("scoring", CheckState.ABSENT, "not asked: nothing is scored")]
    if not profile.accuracy.has_ranges():
        return [PreflightCheck("scoring", CheckState.ABSENT,
                               "the profile has no accuracy ranges: not scored")]
    metrics = profile.accuracy.metrics
    try:
        settings = accuracy_settings(profile)
    except RunnerError as e:
        return [PreflightCheck.failed("scoring", e)]
    checks = [_scorable(profile, f"{' and '.join(m.upper() for m in metrics)} with "
                                 f"{settings.backbones} backbones")]
    if "fid" in metrics:
        checks.append(_statistics_check(profile, settings))
    for spec in weight_specs(settings.backbones, metrics):
        try:
            path = find_weights(spec)
            verify_weights(path, spec)
        except RunnerError as e:
            checks.append(PreflightCheck.failed(spec.what, e))
            continue
        checks.append(PreflightCheck(spec.what, CheckState.OK,
                                     f"{path} (sha256 as published)", str(path)))
    return checks


def _scorable(profile: Profile, detail: str) -> PreflightCheck:
    """A model that refuses scoring (seeded weights) fails here; its files are checked
    still, so one attempt shows every fix."""
    try:
        profile.model.check_scorable()
    except RunnerError as e:
        return PreflightCheck.failed("scoring", e)
    return PreflightCheck("scoring", CheckState.OK, detail)


def _statistics_check(profile: Profile, settings) -> PreflightCheck:
    try:
        stats = profile_statistics(profile, settings)
    except RunnerError as e:
        return PreflightCheck.failed("FID statistics", e)
    return PreflightCheck("FID statistics", CheckState.OK,
                          f"{stats.path} ({stats.mu.shape[0]}-d mu and sigma)",
                          str(stats.path))

"""Scoring's files (FID statistics, Inception and CLIP weights) are found one way: under
`$RUNNER_CACHE_DIR` first, then `~/.cache/iree-sdxl-runner`, and the one used is printed; a
profile's `accuracy.fid_statistics` given by `--set` is the one a run's scoring reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cli_support import cli

from runner.accuracy import backbones as bb
from runner.accuracy.files import find_scoring_file, scoring_file_places
from runner.accuracy.frechet import save_statistics
from runner.base.errors import BadInput

HOSTILE = "c $(touch pwned) 'q\" dir"  # a cache dir a lab might name, quoting and all
STATS = "mlperf/val2014.npz"


@pytest.fixture
def caches(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """($RUNNER_CACHE_DIR, ~/.cache/iree-sdxl-runner) of a HOME under tmp_path, both empty."""
    env, home = tmp_path / HOSTILE, tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(env))
    for var in ("RUNNER_FID_WEIGHTS", "RUNNER_CLIP_WEIGHTS"):
        monkeypatch.delenv(var, raising=False)
    return env, home / ".cache" / "iree-sdxl-runner"


def _put(root: Path, name: str, data: bytes = b"x") -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _statistics(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_statistics(path, np.zeros(2048), np.eye(2048))
    return path


def test_the_env_cache_is_looked_in_first_then_the_home_cache(caches):
    env, home = caches
    assert scoring_file_places(STATS) == (env / STATS, home / STATS)
    in_home = _put(home, STATS)
    assert find_scoring_file(STATS, "stats", "--x", "fetch it") == in_home
    in_env = _put(env, STATS)
    assert find_scoring_file(STATS, "stats", "--x", "fetch it") == in_env


def test_a_file_in_neither_cache_is_bad_input_naming_both(caches):
    env, home = caches
    with pytest.raises(BadInput) as e:
        find_scoring_file(STATS, "FID reference statistics", "--x", "fetch it")
    assert str(env / STATS) in e.value.message and str(home / STATS) in e.value.message
    assert e.value.where == "--x" and str(env / STATS) in (e.value.fix or "")


def test_without_the_env_var_the_home_cache_is_the_one_place(caches, monkeypatch):
    _, home = caches
    monkeypatch.delenv("RUNNER_CACHE_DIR")
    assert scoring_file_places(STATS) == (home / STATS,)


def test_weights_missing_from_the_env_cache_are_found_in_the_home_cache(caches):
    env, home = caches
    clip = _put(home, bb.CLIP_WEIGHTS.cache_name)
    assert bb.find_weights(bb.CLIP_WEIGHTS) == clip
    fid = _put(env, bb.FID_WEIGHTS.cache_name)
    _put(home, bb.FID_WEIGHTS.cache_name)
    assert bb.find_weights(bb.FID_WEIGHTS) == fid



def test_score_finds_each_file_in_either_cache_and_prints_the_one_used(small_run, caches):
    """The sdxl profile's statistics (`~/.cache/iree-sdxl-runner/mlperf/val2014.npz`) in
    $RUNNER_CACHE_DIR only, its weights one in each cache: every one is found."""
    env, home = caches
    stats = _statistics(env / STATS)
    fid = _put(home, bb.FID_WEIGHTS.cache_name)
    clip = _put(env, bb.CLIP_WEIGHTS.cache_name)
    proc = cli("score", small_run, "--profile", "sdxl", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert f"# FID reference statistics: {stats}" in proc.stdout
    assert f"# weights: {fid}" in proc.stdout and f"# weights: {clip}" in proc.stdout
    assert not (Path.cwd() / "pwned").exists()


def test_score_without_the_statistics_names_both_places(small_run, caches):
    env, home = caches
    _put(env, bb.FID_WEIGHTS.cache_name)
    _put(env, bb.CLIP_WEIGHTS.cache_name)
    proc = cli("score", small_run, "--profile", "sdxl", "--dry-run")
    assert proc.returncode == 2
    assert str(env / STATS) in proc.stderr and str(home / STATS) in proc.stderr
    assert "accuracy.fid_statistics" in proc.stderr and "Traceback" not in proc.stderr


def test_an_overridden_statistics_file_is_the_one_scoring_reads(tmp_path):
    """`--set accuracy.fid_statistics=X` on a run: its scoring reads X (the run records the
    override), not the profile file's built-in statistics; a missing X fails the score."""
    stats = _statistics(tmp_path / HOSTILE / "val2014.npz")
    run = tmp_path / "run"
    proc = cli("run", "--profile", "cpu", "--count", "2", "--no-score", "--set",
               f"accuracy.fid_statistics={stats}", "--out", run)
    assert proc.returncode == 0, proc.stderr
    plan = cli("score", run, "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert f"# FID reference statistics: {stats}" in plan.stdout
    stats.unlink()
    failed = cli("score", run)
    assert failed.returncode == 2
    assert f"FID statistics file not found: {stats}" in failed.stderr
    assert not (run / "accuracy.json").exists()


def test_an_mlperf_accuracy_test_scores_against_the_overridden_statistics(tmp_path):
    """`runner mlperf` scores its accuracy log with its loaded profile, `--set` included
    (it read the profile file again, whose built-in statistics then scored it)."""
    missing = tmp_path / HOSTILE / "val2014.npz"
    proc = cli("mlperf", "--profile", "cpu", "--scenario", "offline", "--mode", "accuracy",
               "--count", "2", "--set", f"accuracy.fid_statistics={missing}", "--out",
               tmp_path / "mlperf")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"FID statistics file not found: {missing}" in proc.stderr

"""scripts/bench_history_alarms.py's step: nights of a new build, each a real night's result
with every time 10% slower, written into a real store and read back by `runner history` as
a process, are flagged as the step across the two builds (not as the machine's), with the
confirm command, and only once three nights of the new build are in."""

from __future__ import annotations

import argparse
from dataclasses import replace
from datetime import timedelta

import numpy as np
import pytest
from repo_support import REPO
from script_support import load_script

from runner.history.extract import extract
from runner.history.paired import Looks
from runner.history.store import open_store
from runner.history.url import resolve

FIXTURE = REPO / "tests" / "fixtures" / "history" / "bench-goldens"


@pytest.mark.slow  # a `runner history` process per night of the new build
def test_a_slower_build_is_flagged_across_the_builds_from_its_third_night(tmp_path):
    bench = load_script("bench_history_alarms")
    (night,) = extract(FIXTURE)
    rng = np.random.default_rng(5)
    real = [replace(night, key=f"{night.key}-{i}", finished_at=night.finished_at
                    + timedelta(days=i), metrics=tuple(
                        replace(m, value=m.value * float(rng.normal(1.0, 0.01)))
                        for m in night.metrics)) for i in range(12)]
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    with open_store(resolve(url)) as store:
        store.add_all(real)
    assert bench.changes(url) == []
    flagged, commands = bench.nights_to_flag(url, real, 5, 0.10)
    assert set(flagged) == {"tiny-bench/clip_cpu", "tiny-bench/unet_cpu", "tiny-bench/vae_cpu"}
    assert all(k is not None and 3 <= k <= 5 for k in flagged.values())
    assert len(commands) == 3 and all(
        c.startswith("runner history confirm --good wheels:3.13.0rc20261016 --bad "
                     f"wheels:{bench.STEP_VERSION}") for c in commands)


def _with_spreads(night, rng: np.random.Generator, i: int):
    """Night `i`: the fixture's times 1% apart from night to night, each with its
    repetitions' interval 3% either side, as `runner bench goldens` keeps it now."""
    metrics = tuple(replace(m, value=m.value * float(rng.normal(1.0, 0.01)))
                    for m in night.metrics)
    spreads = {m.subject: {"n": 5, "median": m.value, "low": m.value * 0.97,
                           "high": m.value * 1.03, "confidence": 0.9375}
               for m in metrics if m.name == "time_ms"}
    return replace(night, key=f"{night.key}-{i}", finished_at=night.finished_at
                   + timedelta(days=i), metrics=metrics,
                   details={**night.details, "spread": spreads})


@pytest.mark.slow  # a `runner history` process per night of the new build
def test_a_slower_build_with_its_repetitions_is_flagged_on_its_first_night(tmp_path):
    """With each night's repetitions kept, the step is listed across the two builds on the
    first night of the new build (its repetitions 10% slower too), with confirm's command."""
    bench = load_script("bench_history_alarms")
    (night,) = extract(FIXTURE)
    rng = np.random.default_rng(5)
    real = [_with_spreads(night, rng, i) for i in range(12)]
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    with open_store(resolve(url)) as store:
        store.add_all(real)
    flagged, commands = bench.nights_to_flag(url, real, 3, 0.10)
    assert flagged == dict.fromkeys(("tiny-bench/clip_cpu", "tiny-bench/unet_cpu",
                                     "tiny-bench/vae_cpu"), 1)
    assert len(commands) == 3


def test_the_first_nights_ab_holds_for_the_step_and_not_without_it(tmp_path):
    """The nightly's A/B judgement on interleaved rounds (here the fixture's night, each run
    moved 5% by the machine and its five repetitions 3% apart): the bad side 10% slower
    holds in every series, flagged and confirmed on night 1; the same rounds with no step
    hold in none. Every round is given: none is measured."""
    bench = load_script("bench_history_alarms")
    (night,) = extract(FIXTURE)
    rng = np.random.default_rng(9)
    rounds = bench.Rounds(tmp_path, 0, None)
    times = [m for m in night.metrics if m.name == "time_ms"]
    for i in range(30):
        for side in ("good", "bad"):
            drift = float(rng.normal(1.0, 0.05))
            rounds.taken[i, side] = {m.subject: {"value": m.value * drift, "times_ms": [
                m.value * drift * float(rng.normal(1.0, 0.03)) for _ in range(5)]}
                for m in times}
    subjects = sorted(m.subject for m in times)
    plan = Looks(10, 30)
    held = bench.ab(rounds, subjects, 0.10, plan)
    assert all(v.holds and v.rounds <= 30 for v in held.values())
    assert not any(v.holds for v in bench.ab(rounds, subjects, 0.0, plan).values())
    args = argparse.Namespace(confirm_hog_every=0, k=None, step=0.10)
    assert bench.confirmed_nights(held, dict.fromkeys(subjects), tmp_path, args, plan) == (
        dict.fromkeys(subjects, 1))
    assert not list(tmp_path.iterdir())


def test_a_night_beside_foreign_load_in_any_test_counts_once():
    bench = load_script("bench_history_alarms")
    (night,) = extract(FIXTURE)
    busy = {"tiny-bench/unet_cpu": {"beside_foreign_load": False},
            "tiny-bench/vae_cpu": {"beside_foreign_load": True}}
    quiet = {"tiny-bench/unet_cpu": {"beside_foreign_load": False}}
    nights = [replace(night, details={**night.details, "conditions": c})
              for c in (busy, quiet, busy, {})]
    assert bench.beside_foreign_load(nights) == 2

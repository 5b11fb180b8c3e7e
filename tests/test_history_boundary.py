"""The newest build boundary tested at the size a new build has after one to three nights
(runner.history.changes.build_step): a step listed `unconfirmed` with its confirm command
the night it shows beyond both builds' spread, never a regression before a confirmation;
nothing listed on one build, nor for a new build whose nights are alike; a size steps at
one point."""

from __future__ import annotations

import numpy as np
import pytest
from cli_support import cli
from test_history import nightly, noisy

from runner.base.outcome import Outcome
from runner.history.changes import MIN_SIZE, Change, build_step, detect, detect_all
from runner.history.judge import alerts, judge_changes
from runner.history.model import Result
from runner.history.series import Series, series_of
from runner.history.store import open_store
from runner.history.url import resolve

SEEDS = range(40)
REPEAT = 0.03  # each night's repetitions within 3% of its number, as a quiet night's are
UNET = "tiny-bench/unet_cpu"


def timed(i: int, value: float, build: str, busy: bool = False) -> Result:
    """Night `i`'s bench goldens time of `build` with its repetitions' interval and the
    conditions it was timed under, as `runner bench goldens` records them."""
    return nightly(i, value, build, name="time_ms", subject=UNET, command="bench goldens",
                   sku="cpu", details={
                       "spread": {UNET: {"n": 5, "median": value, "low": value * (1 - REPEAT),
                                         "high": value * (1 + REPEAT), "confidence": 0.9375}},
                       "conditions": {UNET: {"beside_foreign_load": busy}}})


def nights(values: list[float], builds: list[str], busy: set[int] = frozenset()
           ) -> Series:
    (series,) = series_of([timed(i, v, b, i in busy)
                           for i, (v, b) in enumerate(zip(values, builds, strict=True))])
    return series


def listed(series: Series) -> list[Change]:
    """What `runner history` lists for the series, judged."""
    return judge_changes(detect_all([series]), [])


def quiet(n: int, seed: int, step_at: int | None = None, step: float = 0.10) -> list[float]:
    """Nights of a quiet machine: 2% noise from night to night."""
    values = 100.0 * np.random.default_rng(seed).normal(1.0, 0.02, n)
    if step_at is not None:
        values[step_at:] *= 1 + step
    return [float(v) for v in values]


def hogged(values: list[float]) -> tuple[list[float], set[int]]:
    """Every third night beside a CPU hog: 60% slower, and said so in its conditions."""
    busy = set(range(2, len(values), 3))
    return [v * 1.6 if i in busy else v for i, v in enumerate(values)], busy


@pytest.mark.parametrize("after", range(1, MIN_SIZE + 1))
def test_a_step_that_comes_with_a_new_build_is_listed_unconfirmed_within_three_nights(after):
    """30 nights of 3.12.0 (every third beside a hog), then `after` nights of 3.13.0 10%
    slower: listed unconfirmed, with its confirm command, on every seed, from the first
    night; no alert (exit 0)."""
    for seed in SEEDS:
        values, busy = hogged(quiet(30 + after, seed, step_at=30))
        series = nights(values, ["3.12.0"] * 30 + ["3.13.0"] * after, busy)
        # (the search finds a step of the machine's within 3.12.0 on a few seeds)
        (change,) = [c for c in listed(series) if c.kind != Outcome.MACHINE]
        assert change.kind == Outcome.UNCONFIRMED and change.index == 30
        assert change.confirm and "--good wheels:3.12.0 --bad wheels:3.13.0" in change.confirm
        assert change.relative > 0.05 and not alerts([change])


def test_the_first_night_is_found_at_the_boundary_alone():
    """One night after the boundary: the search (MIN_SIZE a side) cannot see it; the
    boundary's test does, and says how sure the nights alone make it."""
    series = nights([100.0 + 0.1 * i for i in range(20)] + [110.0], ["3.12.0"] * 20 + ["3.13.0"])
    assert detect(series) == []
    step = build_step(series)
    assert step is not None and step.at_boundary and (step.n_before, step.n_after) == (20, 1)
    # the interval of the 20 nights' median ends at the 15th: 6 nights at or above its
    # edge, so one night alike to them lands beyond it with a chance of 6/21, two-sided 12/21
    assert step.p_value == pytest.approx(12 / 21)
    assert step.to_dict()["at_boundary"] is True
    (judged,) = judge_changes([step], [])
    assert judged.reasons[0].startswith("found at the build boundary after 1 result(s) of "
                                        "3.13.0")


def test_on_one_build_with_a_hog_beside_every_third_night_nothing_is_listed():
    """30 nights of one build, every third beside a CPU hog: no build boundary, so nothing
    is listed at all, on every seed."""
    for seed in SEEDS:
        values, busy = hogged(noisy(30, seed))  # 2% noise, and a run 30% slow now and then
        assert listed(nights(values, ["3.12.0"] * 30, busy)) == []


def test_a_new_build_alike_to_the_last_is_seldom_listed_and_never_an_alert():
    """1 to 3 nights of a new build with the same times: a night whose repetitions all fell
    high can lie beyond the previous build's interval (2 of the 120 series here, after one
    night), listed unconfirmed so that its confirmation answers; never a regression."""
    found = []
    for seed in SEEDS:
        for after in range(1, MIN_SIZE + 1):
            values, busy = hogged(quiet(30 + after, seed))
            found += listed(nights(values, ["3.12.0"] * 30 + ["3.13.0"] * after, busy))
    assert len(found) == 2 and {c.kind for c in found} == {Outcome.UNCONFIRMED}
    assert all(c.n_after == 1 and c.confidence < 0.5 for c in found)


def test_a_new_builds_night_beside_a_hog_waits_for_a_quiet_one():
    """The new build's first night ran beside a hog (slower for that): not judged; its
    first quiet night, 10% slower, is."""
    old, hogs = hogged([100.0 + 0.1 * i for i in range(21)])
    builds = ["3.12.0"] * 21 + ["3.13.0"] * 2
    assert listed(nights([*old, 160.0], builds[:-1], {*hogs, 21})) == []
    (change,) = listed(nights([*old, 160.0, 110.0], builds, {*hogs, 21}))
    assert change.kind == Outcome.UNCONFIRMED and change.index == 21
    assert (change.n_before, change.n_after) == (21, 2)


def test_a_time_kept_without_its_repetitions_waits_for_the_search():
    """A new build's night with no interval kept (a result from before they were) is not
    judged at one night: its number alone says nothing of its noise."""
    results = [timed(i, 100.0 + 0.5 * (i % 4), "3.12.0") for i in range(20)]
    bare = nightly(20, 110.0, "3.13.0", name="time_ms", subject=UNET,
                   command="bench goldens", sku="cpu")
    (series,) = series_of([*results, bare])
    assert build_step(series) is None


@pytest.mark.parametrize("before", [1, 10])
def test_a_size_steps_at_one_point(before):
    """The tiny UNet's module grew from 3.11.0 to 3.12.0 (306872 -> 322634 B, the releases'
    real sizes): deterministic, so one point of each build shows it; listed unconfirmed,
    with the bisect (compstat) that pins it, since confirm measures times only."""
    results = [nightly(i, 306872.0, "3.11.0", name="size_bytes", subject=UNET,
                       command="bench goldens", sku="cpu") for i in range(before)]
    results.append(nightly(before, 322634.0, "3.12.0", name="size_bytes", subject=UNET,
                           command="bench goldens", sku="cpu"))
    (change,) = listed(series_of(results)[0])
    assert change.kind == Outcome.UNCONFIRMED and change.confidence == 1.0
    assert change.confirm is None and not alerts([change])
    assert "--test compstat" in (change.bisect() or "")


def test_a_size_that_moved_within_a_build_is_not_judged_at_one_point():
    """Two sizes within the previous build: its modules were compiled two ways, so one new
    point cannot say the build changed them."""
    sizes = [306872.0] * 5 + [307000.0] * 5
    results = [nightly(i, v, "3.11.0", name="size_bytes", subject=UNET,
                       command="bench goldens", sku="cpu") for i, v in enumerate(sizes)]
    results.append(nightly(10, 322634.0, "3.12.0", name="size_bytes", subject=UNET,
                           command="bench goldens", sku="cpu"))
    assert build_step(series_of(results)[0]) is None


def test_runner_history_lists_it_and_exits_0(tmp_path):
    """Through the command: the first night of the slower build is listed unconfirmed with
    its confirm command in the JSON, and the command exits 0 (no confirmed regression)."""
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    rng = np.random.default_rng(3)
    with open_store(resolve(url)) as store:
        store.add_all([timed(i, float(100 * rng.normal(1, 0.01)), "3.12.0")
                       for i in range(20)] + [timed(20, 111.0, "3.13.0")])
    ran = cli("history", "--json", "--results", url)
    assert ran.returncode == 0, ran.stderr
    import json

    (change,) = json.loads(ran.stdout)["changes"]
    assert change["kind"] == "unconfirmed" and change["at_boundary"]
    assert change["confirm"].startswith("runner history confirm --good wheels:3.12.0")

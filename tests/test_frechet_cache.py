"""A Fréchet distance is computed once per pair of statistics on a machine
(runner/accuracy/frechet_cache.py): the kept answer is the one computed here, bit for bit;
other statistics, another method, or an unreadable entry compute it again; a cache that
cannot be written only costs the time."""

from __future__ import annotations

import json

import numpy as np
import pytest

from runner.accuracy.frechet import frechet_eigh, frechet_sqrtm
from runner.accuracy.frechet_cache import CACHE_SUBDIR, FrechetPair


def _stats(seed: int, d: int = 48):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4 * d, d)) * rng.uniform(0.1, 2.0, d)
    return x.mean(axis=0), np.cov(x, rowvar=False)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / CACHE_SUBDIR


def test_the_same_statistics_are_answered_from_the_cache_with_the_same_bits(cache):
    (mu1, s1), (mu2, s2) = _stats(0), _stats(1)
    direct = frechet_sqrtm(mu1, s1, mu2, s2)  # computed here, now
    first, cached = FrechetPair(mu1, s1, mu2, s2).distance("sqrtm")
    assert (first, cached) == (direct, False)
    again, cached = FrechetPair(mu1, s1, mu2, s2).distance("sqrtm")
    assert (again, cached) == (direct, True)
    entries = list(cache.glob("*.json"))
    assert len(entries) == 1
    entry = json.loads(entries[0].read_text())
    assert entry["value"] == direct.value and "numpy" in entry["machine"]


def test_other_statistics_or_another_method_are_computed_again(cache):
    (mu1, s1), (mu2, s2) = _stats(2), _stats(3)
    FrechetPair(mu1, s1, mu2, s2).distance("sqrtm")
    moved = s2.copy()
    moved[0, 0] = np.nextafter(moved[0, 0], np.inf)  # one ulp of one element
    result, cached = FrechetPair(mu1, s1, mu2, moved).distance("sqrtm")
    assert not cached and result == frechet_sqrtm(mu1, s1, mu2, moved)
    swapped, cached = FrechetPair(mu2, s2, mu1, s1).distance("sqrtm")  # MLPerf's order matters
    assert not cached and swapped == frechet_sqrtm(mu2, s2, mu1, s1)
    fast, cached = FrechetPair(mu1, s1, mu2, s2).distance("eigh")
    assert not cached and fast == frechet_eigh(mu1, s1, mu2, s2)
    assert len(list(cache.glob("*.json"))) == 4


@pytest.mark.parametrize("damage", ["", "{not json", '{"value": "x"}',
                                    '{"value": 1.0, "method": "eigh", "eps_offset": false, '
                                    '"max_imag": 0.0}'])
def test_an_unreadable_or_wrong_entry_is_computed_again_and_replaced(cache, damage):
    (mu1, s1), (mu2, s2) = _stats(4), _stats(5)
    direct, _ = FrechetPair(mu1, s1, mu2, s2).distance("sqrtm")
    (entry,) = cache.glob("*.json")
    entry.write_text(damage)
    result, cached = FrechetPair(mu1, s1, mu2, s2).distance("sqrtm")
    assert (result, cached) == (direct, False)
    assert json.loads(entry.read_text())["value"] == direct.value


def test_a_cache_that_is_a_file_only_costs_the_time(cache):
    """A full disk or a read-only cache dir ends the same way: the write fails."""
    cache.parent.mkdir(parents=True)
    cache.write_text("not a directory")
    (mu1, s1), (mu2, s2) = _stats(8), _stats(9)
    for _ in range(2):
        result, cached = FrechetPair(mu1, s1, mu2, s2).distance("sqrtm")
        assert not cached and result == frechet_sqrtm(mu1, s1, mu2, s2)


def test_the_fast_methods_reference_root_is_computed_once_per_reference(cache, monkeypatch):
    """Scores against one reference (a trend's builds) share its square root: computed once
    in the process, and each distance has the bits of one computed from scratch."""
    import runner.accuracy.frechet_cache as frechet_cache

    roots = []
    real = frechet_cache.psd_sqrt
    monkeypatch.setattr(frechet_cache, "psd_sqrt", lambda s: roots.append(1) or real(s))
    monkeypatch.setattr(frechet_cache, "_ROOTS", {})
    (mu, ref), others = _stats(10), [_stats(11), _stats(12)]
    for mu2, s2 in others:
        found, cached = FrechetPair(mu, ref, mu2, s2).distance("eigh")
        assert (found, cached) == (frechet_eigh(mu, ref, mu2, s2), False)
    assert len(roots) == 1
    FrechetPair(*others[0], mu, ref).distance("eigh")  # another reference: its own root
    assert len(roots) == 2

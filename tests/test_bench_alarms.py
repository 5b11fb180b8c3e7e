"""scripts/bench_history_alarms.py's step: nights of a new build, each a real night's result
with every time 10% slower, written into a real store and read back by `runner history` as
a process, are flagged as the step across the two builds (not as the machine's), with the
confirm command, and only once three nights of the new build are in."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import numpy as np
import pytest
from repo_support import REPO
from script_support import load_script

from runner.history.extract import extract
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

"""scripts/bench_timing_noise.py: each driver's runs are real `bench goldens` processes on
that driver, and a series' noise is the spread of its runs' log medians and of the log ratio
of each run to the next."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from repo_support import REPO
from script_support import load_script


def test_noise_is_the_spread_of_log_medians_and_of_each_step():
    bench = load_script("bench_timing_noise")
    # logs 0, ln 2, 2 ln 2: they spread by ln 2; every step is the same, so pairs do not
    steady = bench.noise([1.0, 2.0, 4.0])
    assert steady == {"median_ms": 2.0, "spread": round(math.log(2), 4), "pair_spread": 0.0}
    zigzag = bench.noise([1.0, 2.0, 1.0, 2.0])
    assert zigzag["pair_spread"] == round(math.sqrt(4 / 3) * math.log(2), 4)


def test_local_tasks_pairs_over_local_syncs_and_none_where_sync_never_moved():
    bench = load_script("bench_timing_noise")
    got = {"local-task": {"tiny-bench/s": [1.0, 2.0, 1.0]},
           "local-sync": {"tiny-bench/s": [1.0, 1.1, 1.0]}}
    assert list(bench.summary(got)) == ["s"]  # a key the docs' measured markers can name
    (row,) = bench.summary(got).values()
    assert row["task_over_sync"] == round(
        bench.noise([1.0, 2.0, 1.0])["pair_spread"] / bench.noise([1.0, 1.1, 1.0])["pair_spread"],
        2)
    assert bench.summary({"local-task": {"s": [1.0, 2.0, 1.0]},
                          "local-sync": {"s": [1.0, 1.0, 1.0]}})["s"]["task_over_sync"] is None


@pytest.mark.parametrize("device", ["local-task", "local-sync"])
def test_a_run_is_a_real_bench_goldens_process_on_its_driver(device, tmp_path):
    bench = load_script("bench_timing_noise")
    medians = bench.run_medians(device, tmp_path / "run", "clip")
    assert list(medians) == ["tiny-bench/clip_cpu"] and medians["tiny-bench/clip_cpu"] > 0
    report = (tmp_path / "run" / "bench.json").read_text(encoding="utf-8")
    assert f"--device={device}" in report


def test_fewer_than_three_rounds_are_refused():
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_timing_noise.py"),
                           "--rounds", "2"], capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert "--rounds: at least 3" in proc.stderr and "Traceback" not in proc.stderr

"""A timed number carries its noise: the median and interval of its repetitions
(runner.base.spread) and what else the machine did meanwhile (runner.base.conditions)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from runner.base.conditions import FOREIGN_SHARE, Watch, between, cpufreq, sample
from runner.base.spread import Spread, spread

TICK = os.sysconf("SC_CLK_TCK")


def test_the_interval_is_the_order_statistics_one_scipy_gives():
    binom = pytest.importorskip("scipy.stats").binom
    for n in range(1, 40):
        values = [float((7 * i) % n) + i / 100 for i in range(n)]
        s = spread(values)
        xs = sorted(values)
        # the widest k with P(x_(k) <= median <= x_(n-k+1)) >= 95%, else the whole range
        ks = [k for k in range(1, (n + 1) // 2 + 1)
              if 1 - 2 * binom.cdf(k - 1, n, 0.5) >= 0.95] or [1]
        k = max(ks)
        assert (s.low, s.high, s.n) == (xs[k - 1], xs[n - k], n), n
        assert s.confidence == pytest.approx(1 - 2 * binom.cdf(k - 1, n, 0.5), abs=1e-4)
        assert s.median == pytest.approx(sorted(values)[n // 2] if n % 2 else
                                         (xs[n // 2 - 1] + xs[n // 2]) / 2)


def test_five_repetitions_give_their_range_at_94_percent_and_apart_is_no_overlap():
    s = spread([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s.median, s.low, s.high, s.confidence) == (3.0, 1.0, 5.0, 0.9375)
    assert Spread.from_dict(s.to_dict()) == s
    assert spread([6.0, 7.0, 8.0]).apart_from(spread([1.0, 2.0, 3.0]))
    assert not spread([3.0, 7.0, 8.0]).apart_from(spread([1.0, 2.0, 3.0]))
    assert Spread.from_dict({"n": "x"}) is None and Spread.from_dict(None) is None


def _proc(root: Path, load: str, busy: list[int], own: list[int]) -> Path:
    (root / "self").mkdir(parents=True, exist_ok=True)
    (root / "loadavg").write_text(f"{load} 0.5 0.4 1/100 42\n")
    (root / "stat").write_text("cpu  " + " ".join(map(str, busy)) + "\ncpu0 0 0 0 0\n")
    # pid (comm with ) and spaces) state ... utime stime cutime cstime are fields 14-17
    fields = ["S"] + ["0"] * 10 + [str(v) for v in own] + ["0"] * 30
    (root / "self" / "stat").write_text("123 (a) b) " + " ".join(fields) + "\n")
    return root


def test_others_cpu_is_all_busy_time_less_ours_and_our_waited_children(tmp_path):
    """/proc/stat's busy jiffies (user nice system idle iowait irq softirq steal) less
    /proc/self/stat's utime+stime+cutime+cstime, over the wall time."""
    before = sample(_proc(tmp_path / "a", "1.5", [100, 0, 50, 9000, 7, 0, 0, 0],
                          [10, 5, 0, 0]))
    after = sample(_proc(tmp_path / "b", "2.5", [100 + 2 * TICK, 0, 50 + TICK, 9900, 7, 0,
                                                0, 0], [10 + TICK, 5, TICK // 2, 0]))
    after = type(after)(before.wall + 2.0, after.load, after.busy, after.own)
    c = between(before, after, cpufreq_root=tmp_path / "no-cpufreq")
    # 3 cores-seconds busy in 2 s, of which 1.5 ours: others took 0.75 of a core
    assert c.foreign_cores == pytest.approx(0.75) and c.own_cores == pytest.approx(0.75)
    assert (c.load_start, c.load_end) == (1.5, 2.5)
    assert (c.governor, c.freq_mhz) == (None, None)  # no cpufreq: recorded as absent
    assert c.foreign_share == pytest.approx(0.75 / c.cores)
    assert c.beside_foreign_load is (0.75 / c.cores >= FOREIGN_SHARE)
    assert "others took 0.75 core(s)" in c.line() and "governor absent" in c.line()


def test_unreadable_proc_is_recorded_as_absent_not_a_failure(tmp_path):
    c = Watch(gpu=False, proc=tmp_path, cpufreq_root=tmp_path).stop()
    assert (c.foreign_cores, c.own_cores, c.load_start) == (None, None, None)
    assert c.beside_foreign_load is False and "unreadable" in c.line()


def test_cpufreq_governor_and_frequencies_where_exposed(tmp_path):
    for i, (gov, khz) in enumerate([("performance", "3400000"), ("powersave", "1200000")]):
        d = tmp_path / f"cpu{i}" / "cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_governor").write_text(gov + "\n")
        (d / "scaling_cur_freq").write_text(khz + "\n")
    assert cpufreq(tmp_path) == {"governor": "performance,powersave",
                                 "freq_mhz": [1200.0, 3400.0]}


def test_a_waited_child_counts_as_ours_on_this_machine():
    """The real /proc: a child that burns CPU and is waited for inside the watch is our
    time, not another process'."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    watch = Watch(gpu=False).start()
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    c = watch.stop()
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_ticks = ((used.ru_utime + used.ru_stime) - (before.ru_utime + before.ru_stime)) * TICK
    assert c.own_cores is not None and c.foreign_cores is not None
    assert c.own_cores * c.seconds * TICK >= child_ticks - 2  # jiffies are whole ticks
    assert c.kernel == os.uname().release
    exposed = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").is_file()
    assert (c.governor is not None) == exposed


GPU_INFO = Path(__file__).parent / "fixtures" / "gpu_info" / "nvidia-smi-h200.csv"
GPU_APPS = Path(__file__).parent / "fixtures" / "gpu_holders" / "nvidia-smi-compute-apps.csv"


def test_on_a_gpu_machine_the_driver_clocks_and_foreign_holders_are_kept(tmp_path,
                                                                         monkeypatch):
    """A stand-in nvidia-smi on PATH prints captured H200 output (a GPU cannot be had
    here); the path from the watch through both vendor-tool readers runs for real."""
    from runner.base.conditions import gpu_state

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text('#!/bin/sh\ncase "$*" in *compute-apps*) cat "$APPS";; *) cat "$INFO";; '
                    "esac\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("APPS", str(GPU_APPS))
    monkeypatch.setenv("INFO", str(GPU_INFO))
    c = Watch(gpu=True).stop()
    assert c.gpu["tool"] == "nvidia-smi" and len(c.gpu["gpus"]) == 8
    assert {g["driver"] for g in c.gpu["gpus"]} == {"550.127.05"}
    assert c.gpu["gpus"][0]["clocks_mhz"]["sm"] == 345
    assert c.gpu["foreign_processes"] == ["pid 1523411: 40962 MiB", "pid 1523417: 512 MiB",
                                          "pid 1523420: ? bytes"]
    assert c.beside_foreign_load  # another process held the GPU meanwhile
    assert gpu_state(own_pids={1523411, 1523417, 1523420})["foreign_processes"] == []

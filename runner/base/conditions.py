"""What else the machine was doing while a number was timed, so a slow number taken beside a
busy neighbour says so, and the history can tell a build's step from the machine's.

A measurement is bracketed by two samples (`Watch.start()`, `.stop()`):

- the load average (`/proc/loadavg`) at both ends;
- the CPU time every process took (`/proc/stat`: busy jiffies of all CPUs) minus what this
  process and the children it waited for took (`/proc/self/stat`: utime, stime, cutime,
  cstime), over the wall time: `foreign_cores` is how many cores others kept busy meanwhile
  (a child still running at `stop()` is not counted as ours: every timed tool here is waited
  for before it);
- each CPU's frequency governor and current frequency, where cpufreq is exposed (a VM often
  has none: recorded as absent, `None`);
- the kernel, and on a GPU machine the GPUs' driver and clocks (runner.base.gpu_info), each
  GPU's temperature, power draw, power cap and what throttled its clocks
  (runner.base.gpu_sensors), and the processes holding GPU memory that are not ours
  (runner.base.gpu_holders). The GPU is asked after the timing: its temperature and
  clocks are those of that moment, recorded and shown but not judged (they move every
  run); a power cap is a setting, and its change between two results is named as the
  machine's (runner.history.machine). Where nvidia-smi counts how long each reason held
  the clocks down, the counters are read at start too, and the seconds the timing itself
  was throttled are kept (`throttled_s`), shown, not judged.

Nothing here fails a measurement: an unreadable file is recorded as absent.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    from runner.base.gpu_info import Gpu
    from runner.base.gpu_sensors import Sensors

PROC = Path("/proc")
CPUFREQ = Path("/sys/devices/system/cpu")
# Another process' share of the machine at or above which a measurement is taken "beside
# foreign load": a quarter of the cores (on 2 cores, half of one) is what moved the tiny
# benchmarks' times by tens of percent on a shared VM.
FOREIGN_SHARE = 0.25


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def loadavg(proc: Path = PROC) -> float | None:
    text = _read(proc / "loadavg")
    try:
        return float(text.split()[0]) if text else None
    except (ValueError, IndexError):
        return None


def busy_jiffies(proc: Path = PROC) -> int | None:
    """All CPUs' busy time (user, nice, system, irq, softirq, steal), in clock ticks."""
    text = _read(proc / "stat")
    if not text or not text.startswith("cpu "):
        return None
    fields = [int(v) for v in text.splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return user + nice + system + irq + softirq + steal


def own_jiffies(proc: Path = PROC) -> int | None:
    """This process' CPU time and its waited-for children's, in clock ticks."""
    text = _read(proc / "self" / "stat")
    if not text:
        return None
    after_name = text.rsplit(")", 1)[-1].split()
    try:  # fields 14-17 of proc(5); after the name, field 3 is index 0
        return sum(int(v) for v in after_name[11:15])
    except (ValueError, IndexError):
        return None


def cpufreq(root: Path = CPUFREQ) -> dict[str, Any]:
    """Governors in use and the current frequencies (MHz, min..max over CPUs); None each
    where cpufreq is not exposed."""
    governors, freqs = set(), []
    for cpu in sorted(root.glob("cpu[0-9]*/cpufreq")):
        governor = _read(cpu / "scaling_governor")
        if governor:
            governors.add(governor.strip())
        freq = _read(cpu / "scaling_cur_freq")
        if freq and freq.strip().isdigit():
            freqs.append(int(freq) / 1000)
    return {"governor": ",".join(sorted(governors)) or None,
            "freq_mhz": [min(freqs), max(freqs)] if freqs else None}


@dataclass(frozen=True)
class ProcSample:
    wall: float
    load: float | None
    busy: int | None
    own: int | None


def sample(proc: Path = PROC) -> ProcSample:
    return ProcSample(time.monotonic(), loadavg(proc), busy_jiffies(proc), own_jiffies(proc))


@dataclass(frozen=True)
class Conditions:
    """What the machine did during one measurement; see the module docstring."""

    seconds: float
    cores: int
    load_start: float | None
    load_end: float | None
    foreign_cores: float | None  # None: /proc/stat or /proc/self/stat unreadable
    own_cores: float | None
    governor: str | None
    freq_mhz: list[float] | None
    kernel: str
    gpu: dict[str, Any] = field(default_factory=dict)  # gpu_state(): see its docstring

    @property
    def foreign_share(self) -> float | None:
        return None if self.foreign_cores is None else self.foreign_cores / max(self.cores, 1)

    @property
    def beside_foreign_load(self) -> bool:
        share = self.foreign_share
        return (share is not None and share >= FOREIGN_SHARE) or bool(
            self.gpu.get("foreign_processes"))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "foreign_share": self.foreign_share,
                "beside_foreign_load": self.beside_foreign_load}

    def line(self) -> str:
        """`2 cores; others took 0.8 core(s); load 1.2 -> 2.0; governor absent`."""
        others = ("others' CPU time unreadable" if self.foreign_cores is None
                  else f"others took {self.foreign_cores:.2f} core(s)")
        gov = self.governor or "absent"
        flag = "; BESIDE FOREIGN LOAD" if self.beside_foreign_load else ""
        return (f"{self.cores} cores; {others}; load {self.load_start} -> {self.load_end}; "
                f"governor {gov}{gpu_line(self.gpu)}{flag}")


def _shown(value: Any, unit: str) -> str:
    return f"? {unit}" if not isinstance(value, int | float) else f"{value:g} {unit}"


def gpu_line(gpu: dict[str, Any]) -> str:
    """`; GPU 0 59 C, 632 W of 700 W, throttled: sw_power_cap, sw_power_cap 0.35 s of the
    timing` per GPU the state lists (`` where none): the sensors as they were after the
    timing, and the time each reason held the clocks down during it, where counted."""
    parts = []
    for g in gpu.get("gpus") or []:
        if not isinstance(g, dict) or "power_cap_w" not in g:
            continue  # a record from before the sensors were kept
        throttle = g.get("throttle") or []
        spent = g.get("throttled_s") or {}
        parts.append(f"GPU {g.get('index')} {_shown(g.get('temperature_c'), 'C')}, "
                     f"{_shown(g.get('power_w'), 'W')} of {_shown(g.get('power_cap_w'), 'W')}"
                     + (f", throttled: {','.join(throttle)}" if throttle else "")
                     + "".join(f", {r} {s:g} s of the timing" for r, s in spent.items()))
    return "".join(f"; {p}" for p in parts)


def _delta(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else b - a


def between(start: ProcSample, end: ProcSample, gpu: dict[str, Any] | None = None,
            cpufreq_root: Path = CPUFREQ) -> Conditions:
    """The conditions of the time between two samples."""
    seconds = max(end.wall - start.wall, 1e-9)
    tick = os.sysconf("SC_CLK_TCK")
    busy, own = _delta(start.busy, end.busy), _delta(start.own, end.own)
    foreign = None if busy is None or own is None else max(busy - own, 0) / tick / seconds
    freq = cpufreq(cpufreq_root)
    return Conditions(seconds=round(seconds, 3), cores=os.cpu_count() or 1,
                      load_start=start.load, load_end=end.load,
                      foreign_cores=None if foreign is None else round(foreign, 3),
                      own_cores=None if own is None else round(own / tick / seconds, 3),
                      governor=freq["governor"], freq_mhz=freq["freq_mhz"],
                      kernel=platform.release(), gpu=gpu or {})


def gpu_state(own_pids: set[int] | None = None) -> dict[str, Any]:
    """Each GPU's name, driver, clocks, temperature, power draw and cap, what throttled it
    (runner.base.gpu_sensors), and the processes holding GPUs that are not ours; {} on a
    machine without nvidia-smi, amd-smi or rocm-smi."""
    from runner.base.errors import ToolFailed
    from runner.base.gpu_holders import snapshot
    from runner.base.gpu_info import query
    from runner.base.gpu_sensors import read_sensors

    try:
        info, holders = query(), snapshot()
    except ToolFailed as e:
        return {"error": str(e)}
    sensors = read_sensors()
    if info.tool is None and sensors.tool is None:
        return {}
    ours = own_pids or {os.getpid()}
    state = {"tool": info.tool or sensors.tool, "gpus": _gpus(info.gpus, sensors.gpus),
             "foreign_processes": [p.text() for p in holders.processes if p.pid not in ours]}
    return {**state, "sensors_note": sensors.note} if sensors.note else state


def _gpus(described: Iterable[Gpu], sensed: Iterable[Sensors]) -> list[dict[str, Any]]:
    """The GPUs the description lists, each with its sensors; a GPU only a sensor tool
    lists (amd-smi where rocm-smi is gone) with its sensors alone."""
    from runner.base.gpu_sensors import Sensors

    by_index = {s.index: s for s in sensed}
    out = []
    for g in described:
        s = by_index.pop(g.index, Sensors(g.index))
        clocks = {**g.clocks_mhz, **{k: v for k, v in s.clocks_mhz.items() if v is not None}}
        out.append({"index": g.index, "name": g.name, "driver": g.driver,
                    "clocks_mhz": clocks, **s.fields()})
    out += [{"index": s.index, "name": None, "driver": None, "clocks_mhz": s.clocks_mhz,
             **s.fields()} for s in by_index.values()]
    return out


class Watch:
    """Brackets one measurement: `start()` before it, `stop()` after, which returns its
    `Conditions`. The GPU is asked at stop (its tools take a second); where nvidia-smi
    counts the time each reason held the clocks down, those counters are read at start too,
    so the conditions keep how long the timing itself was throttled (`throttled_s`)."""

    def __init__(self, gpu: bool = True, proc: Path = PROC, cpufreq_root: Path = CPUFREQ):
        self.gpu, self.proc, self.cpufreq_root = gpu, proc, cpufreq_root
        self._start = sample(proc)
        self._counters: dict[int, dict[str, float]] | None = None

    def start(self) -> Watch:
        from runner.base.gpu_sensors import read_counters

        self._counters = read_counters() if self.gpu else None
        self._start = sample(self.proc)
        return self

    def stop(self) -> Conditions:
        end = sample(self.proc)
        gpu = gpu_state() if self.gpu else None
        if gpu and self._counters is not None:
            gpu = with_throttle_time(gpu, self._counters)
        return between(self._start, end, gpu, self.cpufreq_root)


def with_throttle_time(gpu: dict[str, Any], before: dict[int, dict[str, float]]
                       ) -> dict[str, Any]:
    """The GPU state with each GPU's `throttled_s`: the seconds each reason held its clocks
    down since `before` (read at the timing's start), where the counters were read twice."""
    from runner.base.gpu_sensors import read_counters, throttled_s

    spent = throttled_s(before, read_counters())
    gpus = [{**g, "throttled_s": spent[g.get("index")]} if g.get("index") in spent else g
            for g in gpu.get("gpus") or []]
    return {**gpu, "gpus": gpus}

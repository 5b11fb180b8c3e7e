"""Each GPU's temperature, power draw, power cap, current clocks and throttling, as its tool
reports them at one moment: kept with every timed number (runner.base.conditions), since a
GPU held under a lower power cap, or slowed by heat, gives another number from the same
build.

The tools, in their own formats (tests/fixtures/gpu_sensors/ holds their output):

- `nvidia-smi --query-gpu=index,temperature.gpu,... --format=csv`: a header naming each
  field (the full name, with its unit: `enforced.power.limit [W]`), then one line per GPU;
  the columns are found by those names. The power cap is `enforced.power.limit`, the
  ceiling the driver holds the board to. `clocks_event_reasons.active` (R535 on; asked
  again as `clocks_throttle_reasons.active` where an older driver refuses the name) is a
  bit mask of what holds the clocks down; each reason set is named (`sw_power_cap`,
  `hw_thermal_slowdown`, ...), all but `gpu_idle`, which is only the GPU resting after
  the timed work. `clocks_event_reasons_counters.*` count, in microseconds since the
  driver loaded, how long each reason held the clocks down: read before and after a
  timing (conditions.Watch), their difference is how long that timing was throttled, the
  one throttling fact that is the timing's own rather than a moment's.
- `amd-smi metric --power --clock --temperature --json` and `amd-smi static --limit --json`
  (amd-smi replaces rocm-smi from ROCm 6.4): a list of per-GPU objects (`{"gpu": 0, ...}`),
  inside `{"gpu_data": [...]}` in later releases; a value is `{"value": 38, "unit": "C"}`,
  a bare number, or `"N/A"`. The temperature is the hotspot (junction) sensor, else the
  edge; the power is `socket_power`; the cap is the limit's `socket_power` (ROCm 7.1 and
  before) or `ppt0.socket_power_limit` (7.2 on); `throttle_status: THROTTLED` is the one
  throttling flag it gives.
- `rocm-smi --showtemp --showpower --showmaxpower --showclocks --json` where amd-smi is
  absent: per card `Temperature (Sensor junction) (C)`, `... Graphics Package Power (W)`,
  `Max Graphics Package Power (W)` (the cap), `sclk clock speed:`.

A machine without the tools records their absence (`tool: None`); a tool that fails or
prints what cannot be read leaves the sensors unknown, with a note: a sensor never fails a
measurement.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runner.base.errors import ToolFailed
from runner.base.gpu_info import (
    amd_part,
    amd_rows,
    card_value,
    nvidia_csv,
    rocm_cards,
    rocm_json,
    tool_output,
)

NVIDIA_SENSORS = ("index", "temperature.gpu", "power.draw", "enforced.power.limit",
                  "clocks.current.sm", "clocks.current.memory", "clocks_event_reasons.active")
# A driver before R535 knows the reasons by their old name only (and refuses the query).
OLD_REASONS = "clocks_throttle_reasons.active"
AMD_METRIC = ("amd-smi", "metric", "--power", "--clock", "--temperature", "--json")
AMD_LIMIT = ("amd-smi", "static", "--limit", "--json")
ROCM_SENSORS = ("rocm-smi", "--showtemp", "--showpower", "--showmaxpower", "--showclocks", "--json")
# nvml.h's nvmlClocksThrottleReason* bits; 0x1 (GpuIdle) is left out on purpose.
THROTTLE_BITS = {0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
                 0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
                 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
                 0x100: "display_clock_setting"}
# How long each reason has held the clocks down since the driver loaded, in microseconds:
# read before and after a timing, their difference is the time it throttled that timing.
COUNTED = ("sw_power_cap", "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown",
           "hw_power_brake_slowdown")
NVIDIA_COUNTERS = ("index", *(f"clocks_event_reasons_counters.{r}" for r in COUNTED))
Which = Callable[[str], str | None]
Run = Callable[..., subprocess.CompletedProcess]


@dataclass(frozen=True)
class Sensors:
    """One GPU at one moment; None where its tool could not tell."""

    index: int
    temperature_c: float | None = None
    power_w: float | None = None
    power_cap_w: float | None = None
    clocks_mhz: dict[str, float | None] = field(default_factory=dict)
    throttle: tuple[str, ...] = ()  # what held the clocks down, as the tool names it

    def fields(self) -> dict[str, Any]:
        """What a measurement's conditions keep of it, beside the GPU's name and driver."""
        return {"temperature_c": self.temperature_c, "power_w": self.power_w,
                "power_cap_w": self.power_cap_w, "throttle": list(self.throttle)}


@dataclass(frozen=True)
class Reading:
    tool: str | None  # None: no tool on PATH
    gpus: tuple[Sensors, ...] = ()
    note: str = ""


def sensor_value(value: Any) -> float | None:
    """`38`, `"35.0"`, `"700.00 W"`, `"(131Mhz)"` or `{"value": 38, "unit": "C"}` -> the
    number; None for `N/A`, `[N/A]`, `[Not Supported]` and the like."""
    if isinstance(value, dict):
        value = value.get("value")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    found = re.search(r"-?\d+(\.\d+)?", str(value))
    return float(found.group()) if found and "N/A" not in str(value) else None


def throttle_reasons(mask: str) -> tuple[str, ...]:
    """The reasons set in nvidia-smi's `0x0000000000000004` mask, less `gpu_idle`."""
    try:
        bits = int(mask, 16)
    except ValueError:
        return ()
    return tuple(name for bit, name in THROTTLE_BITS.items() if bits & bit)


def parse_nvidia(text: str) -> list[Sensors]:
    """`nvidia-smi --query-gpu=<NVIDIA_SENSORS> --format=csv`, or any capture holding them."""
    out = []
    for row in nvidia_csv(text, NVIDIA_SENSORS, header=True):
        if not row["index"].isdigit():
            raise ToolFailed(f"nvidia-smi printed a line without a GPU index: {row!r}")
        out.append(Sensors(
            int(row["index"]), sensor_value(row["temperature.gpu"]),
            sensor_value(row["power.draw"]), sensor_value(row["enforced.power.limit"]),
            {"sm": sensor_value(row["clocks.current.sm"]),
             "memory": sensor_value(row["clocks.current.memory"])},
            throttle_reasons(row["clocks_event_reasons.active"])))
    return out


def amd_cap(limit: dict[str, Any]) -> float | None:
    """The socket's power cap: `socket_power` (ROCm 7.1 and before) or
    `ppt0.socket_power_limit` (7.2 on)."""
    return sensor_value(limit.get("socket_power")) or sensor_value(
        amd_part(limit, "ppt0").get("socket_power_limit"))


def parse_amd(metric: str, limit: str | None) -> list[Sensors]:
    """`amd-smi metric --power --clock --temperature --json`, with the caps of
    `amd-smi static --limit --json` where it answered."""
    caps = {r["gpu"]: amd_cap(amd_part(r, "limit")) for r in amd_rows(limit)} if limit else {}
    out = []
    for row in amd_rows(metric):
        power, temps, clock = (amd_part(row, k) for k in ("power", "temperature", "clock"))
        out.append(Sensors(
            row["gpu"], sensor_value(temps.get("hotspot")) or sensor_value(temps.get("edge")),
            sensor_value(power.get("socket_power")), caps.get(row["gpu"]),
            {"gfx": sensor_value(amd_part(clock, "gfx_0").get("clk")),
             "memory": sensor_value(amd_part(clock, "mem_0").get("clk"))},
            ("throttled",) if power.get("throttle_status") == "THROTTLED" else ()))
    return sorted(out, key=lambda s: s.index)


def parse_rocm(text: str) -> list[Sensors]:
    """`rocm-smi --showtemp --showpower --showmaxpower --showclocks --json`."""
    out = []
    for index, card in rocm_cards(rocm_json(text)).items():
        temperature = sensor_value(card_value(card, "Temperature (Sensor junction) (C)")) \
            or sensor_value(card_value(card, "Temperature (Sensor edge) (C)"))
        out.append(Sensors(
            index, temperature,
            sensor_value(card_value(card, "Current Socket Graphics Package Power (W)",
                                    "Average Graphics Package Power (W)")),
            sensor_value(card_value(card, "Max Graphics Package Power (W)")),
            {"sclk": sensor_value(card_value(card, "sclk clock speed:")),
             "mclk": sensor_value(card_value(card, "mclk clock speed:"))}))
    if not out:
        raise ToolFailed(f"rocm-smi listed no card: {text.strip()[:200]!r}")
    return sorted(out, key=lambda s: s.index)


def parse_counters(text: str) -> dict[int, dict[str, float]]:
    """GPU index -> reason -> microseconds, from `nvidia-smi
    --query-gpu=<NVIDIA_COUNTERS> --format=csv` (or a capture holding them); a reason the
    driver cannot count (`[N/A]`) is left out."""
    out: dict[int, dict[str, float]] = {}
    for row in nvidia_csv(text, NVIDIA_COUNTERS, header=True):
        if not row["index"].isdigit():
            raise ToolFailed(f"nvidia-smi printed a line without a GPU index: {row!r}")
        counted = {r: sensor_value(row[f"clocks_event_reasons_counters.{r}"]) for r in COUNTED}
        out[int(row["index"])] = {r: v for r, v in counted.items() if v is not None}
    return out


def read_counters(which: Which = shutil.which, run: Run = subprocess.run
                  ) -> dict[int, dict[str, float]] | None:
    """The throttle counters now; None where they cannot be read (no nvidia-smi, a driver
    that does not count them, AMD: amd-smi's violation counters are MI300-only)."""
    if which("nvidia-smi") is None:
        return None
    try:
        return parse_counters(tool_output(_argv(NVIDIA_COUNTERS), run))
    except ToolFailed:
        return None


def throttled_s(before: dict[int, dict[str, float]] | None,
                after: dict[int, dict[str, float]] | None) -> dict[int, dict[str, float]]:
    """GPU index -> reason -> seconds it held the clocks down between the two readings
    (only the reasons that did); {} where either reading is missing."""
    out: dict[int, dict[str, float]] = {}
    for index, now in (after or {}).items():
        then = (before or {}).get(index)
        if then is None:
            continue
        out[index] = {r: round((now[r] - then[r]) / 1e6, 3) for r in now
                      if r in then and now[r] > then[r]}
    return out


def _argv(fields: tuple[str, ...]) -> tuple[str, ...]:
    return ("nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv")


def _nvidia(run: Run) -> list[Sensors]:
    try:
        return parse_nvidia(tool_output(_argv(NVIDIA_SENSORS), run))
    except ToolFailed as e:
        if f'"{NVIDIA_SENSORS[-1]}" is not a valid field' not in str(e):
            raise
    return parse_nvidia(tool_output(_argv((*NVIDIA_SENSORS[:-1], OLD_REASONS)), run))


def _amd(run: Run) -> list[Sensors]:
    try:
        limit: str | None = tool_output(AMD_LIMIT, run)
    except ToolFailed:
        limit = None  # the temperatures and clocks still say something without the caps
    return parse_amd(tool_output(AMD_METRIC, run), limit)


_READERS: tuple[tuple[str, Callable[[Run], list[Sensors]]], ...] = (
    ("nvidia-smi", _nvidia),
    ("amd-smi", _amd),
    ("rocm-smi", lambda run: parse_rocm(tool_output(ROCM_SENSORS, run))))


def read_sensors(which: Which = shutil.which, run: Run = subprocess.run) -> Reading:
    """The GPUs' sensors now, from the first of nvidia-smi, amd-smi and rocm-smi on PATH;
    never raises (see the module docstring)."""
    for tool, reader in _READERS:
        if which(tool) is None:
            continue
        try:
            return Reading(tool, tuple(reader(run)))
        except ToolFailed as e:
            return Reading(tool, note=f"sensors unknown: {e}")
    return Reading(None, note="no nvidia-smi, amd-smi or rocm-smi on PATH: no GPU sensor "
                   "recorded")

"""What GPU a machine has: name, driver, memory and clocks, as the vendor's tool reports them.

A number measured on a lent GPU means little without the GPU it ran on, and the clocks and
driver it ran with; the GPU check records these beside its results. They come from the
vendors' tools, in their own formats (tests/fixtures/gpu_info/ holds captured output):

- `nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits`: one line per GPU, the
  fields in the order asked, comma separated, `[N/A]` (or `[Not Supported]`) where the
  driver cannot tell. `compute_cap` is asked for where the driver knows the field (since
  R510); an older one refuses the whole query, which is then asked again without it.
- `rocm-smi --showproductname --showdriverversion --showmeminfo vram --showclocks --json`:
  one object per card (`card0`, ...) and a `system` object with the driver's version; key
  names changed case between ROCm releases (`Card series`, `Card Series`), so they are
  matched without case.
- `amd-smi static --asic --bus --driver --vram --json` where rocm-smi is gone (deprecated
  from ROCm 6.4): per GPU `asic.market_name` and `target_graphics_version`, `driver.version`,
  `vram.size` (`{"value": 196592, "unit": "MB"}`), `bus.bdf`; a bare list, or inside
  `{"gpu_data": [...]}` in later releases. Its clocks are the sensors'
  (runner.base.gpu_sensors).

Where no tool is on PATH (a CPU machine) the answer says so (`tool: None` and a note):
absence is recorded, not an error. A tool that runs and prints what cannot be read raises
ToolFailed, naming the tool and the line.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from runner.base.errors import ToolFailed

TIMEOUT_S = 60
NVIDIA_FIELDS = ("index", "name", "driver_version", "memory.total", "clocks.max.sm",
                 "clocks.max.memory", "clocks.sm", "clocks.mem", "pci.bus_id", "compute_cap")
ROCM = ("rocm-smi", "--showproductname", "--showdriverversion", "--showmeminfo", "vram",
        "--showclocks", "--json")
AMD = ("amd-smi", "static", "--asic", "--bus", "--driver", "--vram", "--json")
_NA = ("[N/A]", "[Not Supported]", "N/A", "")


@dataclass(frozen=True)
class Gpu:
    """One GPU as its tool describes it; None where the tool could not tell."""

    index: int
    name: str
    driver: str | None = None
    memory_mib: int | None = None
    clocks_mhz: dict[str, int | None] = field(default_factory=dict)
    arch: str | None = None  # NVIDIA's compute capability (9.0), AMD's gfx target (gfx942)
    bus_id: str | None = None


@dataclass(frozen=True)
class GpuInfo:
    tool: str | None  # None: neither tool on PATH (the note says so)
    gpus: tuple[Gpu, ...] = ()
    command: tuple[str, ...] = ()
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "command": list(self.command), "note": self.note,
                "gpus": [asdict(g) for g in self.gpus]}

    def line(self) -> str:
        """One line for a report: the first GPU, and how many there are."""
        if not self.gpus:
            return self.note or "no GPU found"
        g = self.gpus[0]
        more = f" (x{len(self.gpus)})" if len(self.gpus) > 1 else ""
        memory = f", {g.memory_mib} MiB" if g.memory_mib else ""
        driver = f", driver {g.driver}" if g.driver else ""
        clocks = ", ".join(f"{k} {v} MHz" for k, v in g.clocks_mhz.items() if v)
        return f"{g.name}{more}{memory}{driver}" + (f", clocks {clocks}" if clocks else "")


def _value(text: str) -> str | None:
    text = text.strip()
    return None if text in _NA else text


def _int(text: str | None) -> int | None:
    """`143771` or `(2100Mhz)` or `1980 MHz` -> the integer; None where there is none."""
    if text is None:
        return None
    found = re.search(r"\d+", text)
    return int(found.group()) if found else None


# The names a query may use for a field, as nvidia-smi's header spells them: the header
# carries the field's full name whichever alias was asked (`clocks.sm` is headed
# `clocks.current.sm [MHz]`), and R535 renamed the throttle reasons to clock-event reasons.
NVIDIA_ALIASES = {"clocks.sm": "clocks.current.sm", "clocks.mem": "clocks.current.memory",
                  "clocks.max.mem": "clocks.max.memory", "used_memory": "used_gpu_memory",
                  "clocks_throttle_reasons.active": "clocks_event_reasons.active",
                  "gpu.power.requested_limit": "power.limit",
                  "gpu.power.current_limit": "enforced.power.limit"}


def _field_name(cell: str) -> str:
    """A header cell's field (`power.limit [W]` -> `power.limit`), by its full name."""
    name = re.sub(r"\s*\[[^\]]*\]$", "", cell.strip()).lower()
    return NVIDIA_ALIASES.get(name, name)


def nvidia_csv(text: str, fields: tuple[str, ...], *, header: bool = False
               ) -> list[dict[str, str]]:
    """The rows of any `nvidia-smi --query-*=<fields> --format=csv[,noheader][,nounits]`,
    each a dict of the fields asked to their cells as printed: the one reader of that CSV,
    for the GPU list here, the compute processes (gpu_holders), the sensors (gpu_sensors)
    and a system's description (loadgen.system). `header`: the query was run without
    `noheader`, so its first line is the header (`pid, used_gpu_memory [MiB]`), and the
    columns are found by their names: a query's columns may come in another order, or more
    of them (a capture of every field), and a field asked by an alias is headed by its
    full name."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    columns = list(range(len(fields)))
    if header:
        names = [_field_name(c) for c in lines[0].split(",")] if lines else []
        if _field_name(fields[0]) not in names:
            raise ToolFailed(f"nvidia-smi printed no CSV header: {text.strip()[:200]!r}")
        missing = [f for f in fields if _field_name(f) not in names]
        if missing:
            raise ToolFailed(f"nvidia-smi printed no column {', '.join(missing)}: "
                             f"{lines[0][:200]!r}")
        columns = [names.index(_field_name(f)) for f in fields]
        width, lines = len(names), lines[1:]
    else:
        width = len(fields)
    rows = []
    for line in lines:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != width:
            raise ToolFailed(f"nvidia-smi printed {len(cells)} fields where {width} "
                             f"were asked ({', '.join(fields)}): {line!r}")
        rows.append({f: cells[i] for f, i in zip(fields, columns, strict=True)})
    return rows


def headed(text: str, fields: tuple[str, ...]) -> bool:
    """Whether nvidia-smi's CSV starts with a header naming the first field: a capture of a
    real GPU keeps it (and every other field), the runner's own queries ask `noheader`."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return _field_name(fields[0]) in {_field_name(c) for c in first.split(",")}


def parse_nvidia_smi(text: str, fields: tuple[str, ...] = NVIDIA_FIELDS) -> list[Gpu]:
    """`nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits` output, or a
    capture with its header (any columns, in any order: tests/fixtures/gpu_sensors/ holds
    nvidia-smi's every field captured on real GPUs), read by the header's names."""
    gpus = []
    for cells in nvidia_csv(text, fields, header=headed(text, fields)):
        line = ", ".join(cells.values())
        row = {k: _value(v) for k, v in cells.items()}
        if row["index"] is None or not row["index"].isdigit() or row["name"] is None:
            raise ToolFailed(f"nvidia-smi printed a line without a GPU index and name: {line!r}")
        gpus.append(Gpu(
            index=int(row["index"]), name=row["name"], driver=row["driver_version"],
            memory_mib=_int(row["memory.total"]),
            clocks_mhz={"sm_max": _int(row["clocks.max.sm"]),
                        "memory_max": _int(row["clocks.max.memory"]),
                        "sm": _int(row["clocks.sm"]), "memory": _int(row["clocks.mem"])},
            arch=row.get("compute_cap"), bus_id=row["pci.bus_id"]))
    if not gpus:
        raise ToolFailed(f"nvidia-smi listed no GPU: {text.strip()[:200]!r}")
    return gpus


def card_value(card: dict[str, Any], *names: str) -> str | None:
    """A card's value under any of `names`, matched without case (ROCm renamed them)."""
    lowered = {str(k).strip().lower(): v for k, v in card.items()}
    for name in names:
        value = lowered.get(name.lower())
        if value is not None:
            return _value(str(value))
    return None


def rocm_json(text: str) -> dict[str, Any]:
    """The JSON object of any `rocm-smi ... --json`; warnings before it, which some releases
    print on stdout, are skipped."""
    start = text.find("{")
    try:
        data = json.loads(text[start:]) if start >= 0 else None
    except ValueError as e:
        raise ToolFailed(f"rocm-smi printed JSON that cannot be read ({e}): "
                         f"{text.strip()[:200]!r}") from None
    if not isinstance(data, dict):
        raise ToolFailed(f"rocm-smi printed no JSON object: {text.strip()[:200]!r}")
    return data


def amd_json(text: str) -> Any:
    """The JSON of any `amd-smi ... --json`, from the first line that opens it and reads:
    warnings some releases print first (on stdout) are skipped, one in brackets too; None
    where nothing looks like JSON."""
    lines = text.splitlines(keepends=True)
    error: ValueError | None = None
    for i, line in enumerate(lines):
        if line.lstrip()[:1] in ("[", "{"):
            try:
                return json.loads("".join(lines[i:]))
            except ValueError as e:
                error = error or e
    if error is not None:
        raise ToolFailed(f"amd-smi printed JSON that cannot be read ({error}): "
                         f"{text.strip()[:200]!r}")
    return None  # no JSON at all: the caller says what it found missing


def amd_part(row: dict[str, Any], name: str) -> dict[str, Any]:
    """One section of an amd-smi GPU's object (`power`, `asic`, ...); {} where it is `N/A`
    or missing."""
    part = row.get(name)
    return part if isinstance(part, dict) else {}


def amd_rows(text: str) -> list[dict[str, Any]]:
    """The per-GPU objects (`{"gpu": 0, ...}`) of any `amd-smi ... --json`: a bare list, or
    `{"gpu_data": [...]}` in later releases."""
    data = amd_json(text)
    rows = data.get("gpu_data") if isinstance(data, dict) else data
    found = [r for r in rows or [] if isinstance(r, dict) and isinstance(r.get("gpu"), int)]
    if not found:
        raise ToolFailed(f"amd-smi listed no GPU: {text.strip()[:200]!r}")
    return found


def rocm_cards(data: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """index -> the card's values (`card0`, or `card:0` in some releases)."""
    cards = {}
    for key, card in data.items():
        found = re.fullmatch(r"card:?(\d+)", str(key))
        if found and isinstance(card, dict):
            cards[int(found.group(1))] = card
    return cards


def parse_rocm_smi(text: str) -> list[Gpu]:
    """`rocm-smi ... --json` output (ROCM's flags above)."""
    data = rocm_json(text)
    system = data.get("system")
    driver = card_value(system, "Driver version") if isinstance(system, dict) else None
    gpus = []
    for index, card in rocm_cards(data).items():
        memory = _int(card_value(card, "VRAM Total Memory (B)"))
        gpus.append(Gpu(
            index=index,
            name=card_value(card, "Card Series", "Card SKU", "Device Name") or "AMD GPU",
            driver=driver, memory_mib=None if memory is None else memory >> 20,
            clocks_mhz={"sclk": _int(card_value(card, "sclk clock speed:")),
                        "mclk": _int(card_value(card, "mclk clock speed:"))},
            arch=card_value(card, "GFX Version"), bus_id=card_value(card, "PCI Bus")))
    if not gpus:
        raise ToolFailed(f"rocm-smi listed no card: {text.strip()[:200]!r}")
    return sorted(gpus, key=lambda g: g.index)


def _mib(size: Any) -> int | None:
    """amd-smi's `{"value": 196592, "unit": "MB"}` -> MiB (amd-smi's MB are MiB)."""
    value = size.get("value") if isinstance(size, dict) else size
    unit = str(size.get("unit", "MB")).upper() if isinstance(size, dict) else "MB"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value * {"GB": 1024, "MB": 1, "KB": 1 / 1024, "B": 1 / (1 << 20)}.get(unit, 1))


def parse_amd_smi(text: str) -> list[Gpu]:
    """`amd-smi static --asic --bus --driver --vram --json` output (AMD's flags above)."""
    gpus = []
    for row in amd_rows(text):
        asic, bus, driver, vram = (amd_part(row, k) for k in ("asic", "bus", "driver", "vram"))
        gpus.append(Gpu(
            index=row["gpu"], name=card_value(asic, "market_name") or "AMD GPU",
            driver=card_value(driver, "version"), memory_mib=_mib(vram.get("size")),
            arch=card_value(asic, "target_graphics_version"), bus_id=card_value(bus, "bdf")))
    return sorted(gpus, key=lambda g: g.index)


Run = Callable[..., subprocess.CompletedProcess]


def _run(argv: list[str], run: Run) -> subprocess.CompletedProcess:
    try:
        return run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolFailed(f"{argv[0]} did not answer: {e}") from None


def tool_output(argv: tuple[str, ...], run: Run) -> str:
    """What a vendor tool printed on stdout; ToolFailed where it cannot run or fails."""
    proc = _run(list(argv), run)
    if proc.returncode != 0:
        raise ToolFailed(f"{' '.join(argv)} exited {proc.returncode}: "
                         f"{(proc.stderr or proc.stdout).strip()[:300]}")
    return str(proc.stdout)


def nvidia_argv(fields: tuple[str, ...]) -> list[str]:
    return ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]


def query(which: Callable[[str], str | None] = shutil.which, run: Run = subprocess.run
          ) -> GpuInfo:
    """The machine's GPUs from nvidia-smi, else rocm-smi, else amd-smi; `tool: None` where
    none is on PATH."""
    if which("nvidia-smi"):
        fields: tuple[str, ...] = NVIDIA_FIELDS
        proc = _run(nvidia_argv(fields), run)
        if proc.returncode != 0 and "compute_cap" in (proc.stdout + proc.stderr):
            fields = NVIDIA_FIELDS[:-1]  # a driver older than R510 knows no compute_cap
            proc = _run(nvidia_argv(fields), run)
        if proc.returncode != 0:
            raise ToolFailed(f"nvidia-smi exited {proc.returncode}: "
                             f"{(proc.stderr or proc.stdout).strip()[:300]}")
        return GpuInfo("nvidia-smi", tuple(parse_nvidia_smi(proc.stdout, fields)),
                       tuple(nvidia_argv(fields)))
    if which("rocm-smi"):
        proc = _run(list(ROCM), run)
        if proc.returncode != 0:
            raise ToolFailed(f"rocm-smi exited {proc.returncode}: "
                             f"{(proc.stderr or proc.stdout).strip()[:300]}")
        return GpuInfo("rocm-smi", tuple(parse_rocm_smi(proc.stdout)), ROCM)
    if which("amd-smi"):
        return GpuInfo("amd-smi", tuple(parse_amd_smi(tool_output(AMD, run))), AMD)
    return GpuInfo(None, note="no nvidia-smi, rocm-smi or amd-smi on PATH: no GPU recorded")

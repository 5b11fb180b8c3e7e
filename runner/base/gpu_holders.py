"""Which processes hold GPU memory: a check that a command left none behind.

A driver stopped by a signal stops and waits for its workers (runner/base/procs.py), and a
worker closes its IREE device before it exits; this is how a GPU machine's check shows it
held: a snapshot of the GPU's compute processes before the command, another after it
returned, and every process in the second that was not in the first is a leak.

The tools, as their vendors print them (tests/fixtures/gpu_holders/ holds captured output):

- `nvidia-smi --query-compute-apps=pid,used_memory --format=csv`: a header line, then
  `<pid>, <n> MiB` per process (`[N/A]` where the driver cannot tell, as Windows'
  WDDM driver prints for every process);
- `rocm-smi --showpids`: a "KFD process information:" table of `PID  PROCESS NAME  GPU(s)
  VRAM USED  SDMA USED  CU OCCUPANCY` (VRAM in bytes), or "No KFD PIDs currently running";
- `amd-smi process --json` where rocm-smi is absent (ROCm 6.4 on deprecate it, later
  releases drop it): per GPU a `process_list` of `{"process_info": {"name", "pid",
  "memory_usage": {"vram_mem": {"value": N, "unit": "B"}}, "mem_usage", ...}}`, or
  `{"process_info": "No running processes detected"}`; a bare list, or inside
  `{"gpu_data": [...]}` in later releases. rocm-smi comes first where both are: amd-smi
  before ROCm 7.x listed only the processes of the user running it, rocm-smi every KFD
  process.

Where no tool is on PATH (a CPU machine), the check is skipped with a note saying so:
it can neither pass nor fail there.

As a command:

    python3 -m runner.base.gpu_holders snapshot > before.json
    runner bench ... --out runs/b
    python3 -m runner.base.gpu_holders check before.json    # exit 1 naming any leak
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from runner.base.errors import ToolFailed
from runner.base.gpu_info import TIMEOUT_S, amd_rows, headed, nvidia_csv, tool_output

NVIDIA_APPS = ("nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv")
ROCM_PIDS = ("rocm-smi", "--showpids")
AMD_PROCESSES = ("amd-smi", "process", "--json")
MIB = 1 << 20


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_bytes: int | None  # None: the tool could not tell
    name: str = ""

    def text(self) -> str:
        used = "? bytes" if self.used_bytes is None else f"{self.used_bytes / MIB:.0f} MiB"
        return f"pid {self.pid}{f' ({self.name})' if self.name else ''}: {used}"


@dataclass(frozen=True)
class Snapshot:
    tool: str | None  # None: neither tool found; `note` says so
    processes: tuple[GpuProcess, ...] = ()
    note: str = ""

    def to_dict(self) -> dict:
        return {"tool": self.tool, "note": self.note,
                "processes": [asdict(p) for p in self.processes]}

    @classmethod
    def from_dict(cls, raw: dict) -> Snapshot:
        return cls(raw.get("tool"), tuple(GpuProcess(**p) for p in raw.get("processes", [])),
                   raw.get("note", ""))


def nvidia_processes(text: str) -> list[GpuProcess]:
    """`nvidia-smi --query-compute-apps=pid,used_memory --format=csv` output."""
    out = []
    for row in nvidia_csv(text, ("pid", "used_memory"), header=True):
        if not row["pid"].isdigit():
            raise ToolFailed("nvidia-smi printed a line that is not `pid, memory`: "
                             f"{', '.join(row.values())!r}")
        match = re.fullmatch(r"(\d+)\s*MiB", row["used_memory"])
        out.append(GpuProcess(int(row["pid"]), int(match.group(1)) * MIB if match else None))
    return out


def rocm_processes(text: str) -> list[GpuProcess]:
    """`rocm-smi --showpids` output."""
    if "No KFD PIDs currently running" in text:
        return []
    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines)
                   if line.split()[:1] == ["PID"] and "VRAM USED" in line), None)
    if header is None:
        raise ToolFailed(f"rocm-smi printed no KFD process table: {text.strip()[:200]!r}")
    out = []
    for line in lines[header + 1:]:
        parts = line.split()
        if not parts or not parts[0].isdigit():
            break  # the closing ==== line
        if len(parts) < 6:
            raise ToolFailed(f"rocm-smi printed a short process line: {line!r}")
        # PID, PROCESS NAME (may hold spaces), GPU(s), VRAM USED, SDMA USED, CU OCCUPANCY
        vram = parts[-3]
        out.append(GpuProcess(int(parts[0]), int(vram) if vram.isdigit() else None,
                              " ".join(parts[1:-4])))
    return out


_UNITS = {"B": 1, "KB": 1 << 10, "KIB": 1 << 10, "MB": MIB, "MIB": MIB, "GB": 1 << 30,
         "GIB": 1 << 30}


def _bytes(value: object) -> int | None:
    """amd-smi's `{"value": 2353860608, "unit": "B"}` (or a bare number of bytes) -> bytes."""
    unit = "B"
    if isinstance(value, dict):
        unit = str(value.get("unit") or "B").upper()
        value = value.get("value")
    if isinstance(value, bool) or not isinstance(value, int | float) or unit not in _UNITS:
        return None
    return int(value * _UNITS[unit])


def amd_process_gpus(text: str) -> list[tuple[int, GpuProcess]]:
    """(GPU index, process) for each process on each GPU of `amd-smi process --json`."""
    out = []
    for row in amd_rows(text):
        if not isinstance(row.get("process_list"), list):
            raise ToolFailed(f"amd-smi printed no process_list for GPU {row['gpu']}: "
                             f"{text.strip()[:200]!r}")
        for entry in row["process_list"]:
            info = entry.get("process_info", entry) if isinstance(entry, dict) else None
            if not isinstance(info, dict):
                continue  # "No running processes detected"
            pid = str(info.get("pid", ""))
            if not pid.isdigit():
                raise ToolFailed(f"amd-smi printed a process without a pid: {info!r}")
            usage = info.get("memory_usage")
            vram = usage.get("vram_mem") if isinstance(usage, dict) else None
            used = _bytes(vram) if vram is not None else _bytes(info.get("mem_usage"))
            name = str(info.get("name") or "")
            out.append((row["gpu"], GpuProcess(int(pid), used, "" if name == "N/A" else name)))
    return out


def amd_processes(text: str) -> list[GpuProcess]:
    """`amd-smi process --json` output: each process once, with its memory on every GPU."""
    by_pid: dict[int, GpuProcess] = {}
    for _, p in amd_process_gpus(text):
        seen = by_pid.get(p.pid)
        used = p.used_bytes if seen is None else (
            None if None in (seen.used_bytes, p.used_bytes)
            else (seen.used_bytes or 0) + (p.used_bytes or 0))
        by_pid[p.pid] = GpuProcess(p.pid, used, p.name or (seen.name if seen else ""))
    return list(by_pid.values())


def amd_pid_gpus(text: str) -> dict[int, set[int]]:
    """pid -> the GPU indices `amd-smi process --json` lists it under."""
    held: dict[int, set[int]] = {}
    for gpu, p in amd_process_gpus(text):
        held.setdefault(p.pid, set()).add(gpu)
    return held


def snapshot(which=shutil.which, run=subprocess.run) -> Snapshot:
    """The GPU's compute processes now, by the first of nvidia-smi, rocm-smi and amd-smi on
    PATH."""
    for argv, parse in ((NVIDIA_APPS, nvidia_processes), (ROCM_PIDS, rocm_processes),
                        (AMD_PROCESSES, amd_processes)):
        if which(argv[0]) is not None:
            return Snapshot(argv[0], tuple(parse(tool_output(argv, run))))
    return Snapshot(None, note="skipped: no nvidia-smi, rocm-smi or amd-smi on PATH, so no "
                    "GPU process can be listed here")


NVIDIA_APP_GPUS = ("nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader")
NVIDIA_GPU_UUIDS = ("nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader")
ROCM_PID_GPUS = ("rocm-smi", "--showpidgpus")


def nvidia_pid_gpus(apps: str, gpus: str) -> dict[int, set[int]]:
    """pid -> the GPU indices it holds memory on, from `nvidia-smi
    --query-compute-apps=pid,gpu_uuid` and `--query-gpu=index,uuid` (both `noheader`, or
    captures with their headers)."""
    gpu_fields, app_fields = ("index", "uuid"), ("pid", "gpu_uuid")
    index = {r["uuid"]: int(r["index"]) for r in nvidia_csv(
        gpus, gpu_fields, header=headed(gpus, gpu_fields)) if r["index"].isdigit()}
    held: dict[int, set[int]] = {}
    for row in nvidia_csv(apps, app_fields, header=headed(apps, app_fields)):
        if row["pid"].isdigit() and row["gpu_uuid"] in index:
            held.setdefault(int(row["pid"]), set()).add(index[row["gpu_uuid"]])
    return held


def rocm_pid_gpus(text: str) -> dict[int, set[int]]:
    """pid -> device indices, from `rocm-smi --showpidgpus`: `PID <pid> is using <n> DRM
    device(s):` then the indices, space-separated over one or more lines."""
    held: dict[int, set[int]] = {}
    pid = None
    for line in text.splitlines():
        found = re.match(r"\s*PID (\d+) is using \d+ DRM device\(s\)", line)
        if found:
            pid = int(found.group(1))
            held[pid] = set()
        elif pid is not None and re.fullmatch(r"[\d\s]+", line.strip() or "x"):
            held[pid].update(int(d) for d in line.split())
        else:
            pid = None  # a spacer line ends the list
    return held


def held_devices(tool: str, which=shutil.which, run=subprocess.run
                 ) -> dict[int, set[int]] | None:
    """pid -> the device indices each compute process holds, by the tool that listed them
    (`snapshot`'s); None where the tool cannot say."""
    argvs = {"nvidia-smi": (NVIDIA_APP_GPUS, NVIDIA_GPU_UUIDS),
             "rocm-smi": (ROCM_PID_GPUS,), "amd-smi": (AMD_PROCESSES,)}.get(tool)
    if argvs is None or which(tool) is None:
        return None
    outputs = []
    for argv in argvs:
        try:
            proc = run(list(argv), capture_output=True, text=True, timeout=TIMEOUT_S,
                       check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if proc.returncode != 0:
            return None
        outputs.append(proc.stdout)
    if tool == "amd-smi":
        try:
            return amd_pid_gpus(outputs[0])
        except ToolFailed:
            return None
    return nvidia_pid_gpus(*outputs) if tool == "nvidia-smi" else rocm_pid_gpus(outputs[0])


@dataclass(frozen=True)
class LeakCheck:
    """What a check found: `leaks` (processes holding GPU memory that did not before)."""

    tool: str | None
    leaks: list[GpuProcess] = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.leaks

    def lines(self) -> list[str]:
        if self.tool is None:
            return [self.note]
        if not self.leaks:
            return [f"{self.tool}: no process holds GPU memory that did not before"]
        return [f"{self.tool}: {len(self.leaks)} process(es) hold GPU memory after the "
                "command returned:", *(f"  {p.text()}" for p in self.leaks)]


def check_leaks(before: Snapshot, after: Snapshot | None = None) -> LeakCheck:
    """The processes in `after` (default: now) that were not in `before`."""
    after = after if after is not None else snapshot()
    if after.tool is None:
        return LeakCheck(None, note=after.note)
    known = {p.pid for p in before.processes}
    return LeakCheck(after.tool, [p for p in after.processes if p.pid not in known])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m runner.base.gpu_holders", allow_abbrev=False,
        description="Snapshot the GPU's compute processes, or check that none was added "
        "since a snapshot (exit 1 naming each; 0 with a note where no tool exists).")
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("snapshot", help="print the compute processes now as JSON",
                   allow_abbrev=False)
    p = sub.add_parser("check", help="exit 1 if a process holds GPU memory that did not in "
                       "the snapshot", allow_abbrev=False)
    p.add_argument("before", type=Path, help="the JSON `snapshot` printed before the command")
    args = parser.parse_args(argv)
    try:
        if args.action == "snapshot":
            print(json.dumps(snapshot().to_dict(), indent=2))
            return 0
        result = check_leaks(Snapshot.from_dict(json.loads(args.before.read_text())))
    except (ToolFailed, OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(result.lines()))
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

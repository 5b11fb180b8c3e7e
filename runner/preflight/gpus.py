"""The GPUs a layout names: there, in the partition mode it assumes, and free.

The facts come from the vendor's tool on this host, read in its own format:

- `amd-smi static --partition --json` (preferred where it is on PATH: rocm-smi is
  deprecated from ROCm 6): per GPU a `partition` object with its `compute_partition`
  (SPX, DPX, QPX, CPX) and `memory_partition` (NPS1, NPS4); a bare list in ROCm 6.x, inside
  `{"gpu_data": [...]}` in later releases.
- `rocm-smi --showcomputepartition --showmemorypartition --json`: the same per card. In a
  partitioned mode every partition is a card (a GPU to amd-smi), so their count is the
  device IDs the layout may name; partitions past each GPU's first may say `N/A`.
- `nvidia-smi --query-gpu=index,mig.mode.current --format=csv,noheader,nounits`: per GPU
  whether MIG is on (`Enabled`), which the layout's one-worker-per-GPU view does not assume.
- who holds GPU memory now: `runner.base.gpu_holders.snapshot`.

The layout's own facts (its partition mode, how many device IDs it names) are
runner/config/layout.py's. tests/fixtures/gpu_partition/ holds the formats read here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from runner.base.errors import RunnerError, ToolFailed
from runner.base.gpu_holders import GpuProcess, held_devices, snapshot
from runner.base.gpu_info import (
    TIMEOUT_S,
    amd_json,
    card_value,
    headed,
    nvidia_csv,
    rocm_cards,
    rocm_json,
)
from runner.config.layout import Plan, partition_command
from runner.preflight.check import CheckState, PreflightCheck

AMD_PARTITIONS = ("amd-smi", "static", "--partition", "--json")
ROCM_PARTITIONS = ("rocm-smi", "--showcomputepartition", "--showmemorypartition", "--json")
NVIDIA_MIG = ("nvidia-smi", "--query-gpu=index,mig.mode.current",
              "--format=csv,noheader,nounits")
SHARE_GPUS = "--share-gpus"  # every command whose preflight checks GPUs takes it
PARTITION_TOOLS = {"hip": (AMD_PARTITIONS, ROCM_PARTITIONS), "cuda": (NVIDIA_MIG,)}
Which = Callable[[str], str | None]
Run = Callable[..., subprocess.CompletedProcess]


@dataclass(frozen=True)
class Card:
    """One device ID as the tool lists it; None where it says N/A."""

    index: int
    compute: str | None = None  # SPX/DPX/QPX/CPX (ROCm); MIG mode (NVIDIA)
    memory: str | None = None  # NPS1/NPS4 (ROCm)


def rocm_partitions(text: str) -> list[Card]:
    """`rocm-smi --showcomputepartition --showmemorypartition --json` output."""
    cards = rocm_cards(rocm_json(text))
    if not cards:
        raise ToolFailed(f"rocm-smi listed no card: {text.strip()[:200]!r}")
    return [Card(i, _mode(card_value(c, "Compute Partition")),
                 _mode(card_value(c, "Memory Partition"))) for i, c in sorted(cards.items())]


def amd_partitions(text: str) -> list[Card]:
    """`amd-smi static --partition --json` output."""
    data = amd_json(text)
    rows = data.get("gpu_data") if isinstance(data, dict) else data
    cards = [Card(row["gpu"], _mode(str(part.get("compute_partition", ""))),
                  _mode(str(part.get("memory_partition", ""))))
             for row in rows or [] if isinstance(row, dict) and isinstance(row.get("gpu"), int)
             and isinstance(part := row.get("partition"), dict)]
    if not cards:
        raise ToolFailed(f"amd-smi listed no GPU's partition: {text.strip()[:200]!r}")
    return sorted(cards, key=lambda c: c.index)


def nvidia_mig(text: str) -> list[Card]:
    """`nvidia-smi --query-gpu=index,mig.mode.current --format=csv,noheader,nounits`, or a
    capture with its header (gpu_info.headed)."""
    fields = ("index", "mig.mode.current")
    rows = nvidia_csv(text, fields, header=headed(text, fields))
    if not rows or not all(r["index"].isdigit() for r in rows):
        raise ToolFailed(f"nvidia-smi printed no GPU index: {text.strip()[:200]!r}")
    return [Card(int(r["index"]), _mode(r["mig.mode.current"])) for r in rows]


def _mode(value: str | None) -> str | None:
    value = (value or "").strip()
    return None if not value or re.fullmatch(r"\[?N/A\]?", value, re.I) else value.upper()


def gpu_checks(plan: Plan, share: bool, which: Which = shutil.which,
               run: Run = subprocess.run) -> list[PreflightCheck]:
    """The devices (and their partition or MIG mode), then who holds them; nothing for a
    CPU layout. `which` and `run` are the tool lookup and call (tests hand in a tool's
    captured output)."""
    layout = plan.layout
    candidates = PARTITION_TOOLS.get(layout.backend)
    if candidates is None:
        return [PreflightCheck("GPUs", CheckState.ABSENT, "a cpu layout uses none")]
    argv = next((a for a in candidates if which(a[0]) is not None), None)
    if argv is None:
        names = " or ".join(a[0] for a in candidates)
        return [PreflightCheck(
            "GPUs", CheckState.FAILED,
            f"no {names} on PATH: the {len(layout.devices)} {layout.backend} device ID(s) "
            "the layout names cannot be seen from this host", where=names,
            fix="run on the GPU node (with its driver and tools installed), or with "
                "--executor slurm to run on the cluster's GPU nodes")]
    try:
        cards = _cards(argv, run)
    except RunnerError as e:
        return [PreflightCheck.failed("GPUs", e)]
    check = (_nvidia_check(plan, cards) if layout.backend == "cuda"
             else _rocm_check(plan, cards, argv[0]))
    return [check, _holders_check(plan, share, which, run)]


def _cards(argv: tuple[str, ...], run: Run) -> list[Card]:
    try:
        proc = run(list(argv), capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolFailed(f"{argv[0]} did not answer: {e}", where=argv[0]) from None
    if proc.returncode != 0:
        raise ToolFailed(f"{' '.join(argv)} exited {proc.returncode}: "
                         f"{(proc.stderr or proc.stdout).strip()[:300]}", where=argv[0],
                         fix=f"run `{' '.join(argv)}` by hand and repair the driver")
    return PARSERS[argv[0]](proc.stdout)


PARSERS: dict[str, Callable[[str], list[Card]]] = {
    "amd-smi": amd_partitions, "rocm-smi": rocm_partitions, "nvidia-smi": nvidia_mig}


def _missing(plan: Plan, cards: list[Card], tool: str) -> PreflightCheck | None:
    present = {c.index for c in cards}
    missing = [d for d in plan.layout.devices if d not in present]
    if not missing:
        return None
    return PreflightCheck(
        "GPUs", CheckState.FAILED,
        f"{tool} lists {len(cards)} device(s); the layout names {len(missing)} more "
        f"(first: {missing[0]})", where="layout.devices",
        fix="name the devices there are (--devices), or run on a node that has them")


def _rocm_check(plan: Plan, cards: list[Card], tool: str) -> PreflightCheck:
    layout = plan.layout
    mode = (layout.partition or "spx").upper()
    modes = sorted({c.compute for c in cards if c.compute})
    memory = sorted({c.memory for c in cards if c.memory})
    if modes and modes != [mode]:
        return PreflightCheck(
            "GPUs", CheckState.FAILED,
            f"the GPUs are in {'/'.join(modes)} mode; the layout assumes {mode}",
            where="layout.partition",
            fix=f"as root: `{' '.join(partition_command(mode))}`, or plan for the mode "
                f"there is: --partition {modes[0].lower()}")
    missing = _missing(plan, cards, tool)
    if missing is not None:
        return missing
    return PreflightCheck("GPUs", CheckState.OK,
                          f"{len(layout.devices)} device ID(s) of {len(cards)} in "
                          f"{'/'.join(modes) or 'unreported'} compute mode, memory "
                          f"{'/'.join(memory) or 'unreported'}", tool)


def _nvidia_check(plan: Plan, cards: list[Card]) -> PreflightCheck:
    mig = [c.index for c in cards if c.compute == "ENABLED" and c.index in plan.layout.devices]
    if mig:
        return PreflightCheck(
            "GPUs", CheckState.FAILED,
            f"MIG is enabled on GPU(s) {', '.join(map(str, mig))}: a worker would see a MIG "
            "instance, not the whole GPU the layout plans for", where="nvidia-smi",
            fix=f"as root: `nvidia-smi -i {','.join(map(str, mig))} -mig 0`, or leave those "
                "GPUs out (--devices)")
    missing = _missing(plan, cards, "nvidia-smi")
    if missing is not None:
        return missing
    return PreflightCheck("GPUs", CheckState.OK,
                          f"{len(plan.layout.devices)} of {len(cards)} GPU(s), MIG off",
                          "nvidia-smi")


def _holders_check(plan: Plan, share: bool, which: Which, run: Run) -> PreflightCheck:
    """Processes holding memory on a device the layout names refuse the run; ones on other
    devices are named, not refused. Where the tool cannot say which device a process holds,
    it counts as holding the layout's."""
    try:
        held = snapshot(which, run)
        devices = held_devices(held.tool, which, run) if held.tool and held.processes else {}
    except RunnerError as e:
        return PreflightCheck.failed("GPU processes", e)
    tool = held.tool or ""
    named = set(plan.layout.devices)
    mine = [p for p in held.processes
            if devices is None or p.pid not in devices or devices[p.pid] & named]
    others = [p for p in held.processes if p not in mine]
    elsewhere = (f"; on other devices than the layout's: "
                 f"{'; '.join(_on(p, devices) for p in others)}") if others else ""
    if not mine:
        return PreflightCheck("GPU processes", CheckState.OK,
                              f"none hold the layout's devices' memory{elsewhere}", tool)
    names = "; ".join(_on(p, devices) for p in mine)
    if share:
        return PreflightCheck("GPU processes", CheckState.SHARED,
                              f"shared as asked ({SHARE_GPUS}) with {names}{elsewhere}", tool)
    return PreflightCheck(
        "GPU processes", CheckState.FAILED,
        f"{len(mine)} other process(es) hold GPU memory: {names}{elsewhere}",
        where=tool or "GPUs",
        fix=f"stop them (or wait for them), or pass {SHARE_GPUS} to run beside them: slower, "
            "and it may run out of memory")


def _on(process: GpuProcess, devices: dict[int, set[int]] | None) -> str:
    on = sorted((devices or {}).get(process.pid, ()))
    return process.text() + (f" on device(s) {', '.join(map(str, on))}" if on else "")

"""The software and firmware a result was measured on, kept with it in the store.

A number moves when the GPU driver, the ROCm or CUDA release, the VBIOS, the partition
mode or the kernel changes under it, just as when IREE changes; and the same IREE version
compiles other modules when the flags change. So each result keeps one `Environment`:

- what the machine runs, asked once at the end of a command's attempt
  (`capture_environment`, written into its attempt record by the CLI): the GPU driver, the
  ROCm release (`$ROCM_PATH/.info/version`, default /opt/rocm), the CUDA version
  (`nvidia-smi -q`), the VBIOS (`nvidia-smi --query-gpu=vbios_version`,
  `rocm-smi --showvbios`, or on a node without rocm-smi `amd-smi static --driver --vbios`),
  the compute and memory partition (runner.preflight.gpus' parsers of rocm-smi, amd-smi
  and nvidia-smi's MIG mode), the kernel;
- the runner that measured (its attempt record's version and commit);
- the sha256 of each compiled module the result measured (`modules`: a run's manifest,
  run.json, lists every vmfb it compiled with its hash).

Absent is None, not an error: a CPU machine has no GPU driver, an older out dir no record
of it, and a tool that fails leaves its fields unknown. tests/fixtures/gpu_info/ holds the
tools' output in their formats.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from runner.base import gpu_info
from runner.base.errors import ToolFailed
from runner.preflight.gpus import (
    AMD_PARTITIONS,
    NVIDIA_MIG,
    ROCM_PARTITIONS,
    Card,
    Run,
    Which,
    amd_partitions,
    nvidia_mig,
    rocm_partitions,
)

NVIDIA_VERSIONS = ("nvidia-smi", "--query-gpu=driver_version,vbios_version",
                   "--format=csv,noheader,nounits")
NVIDIA_DETAILS = ("nvidia-smi", "-q")
ROCM_VERSIONS = ("rocm-smi", "--showdriverversion", "--showvbios", "--json")
AMD_VERSIONS = ("amd-smi", "static", "--driver", "--vbios", "--json")

# How each field is named in a change's explanation, in the order they are listed.
FIELD_LABELS = {"gpu_driver": "GPU driver", "rocm_version": "ROCm", "cuda_version": "CUDA",
                "vbios": "VBIOS", "compute_partition": "compute partition",
                "memory_partition": "memory partition", "kernel": "kernel"}


@dataclass(frozen=True)
class Environment:
    """See the module docstring. Several GPUs that differ are listed comma-separated."""

    gpu_driver: str | None = None
    rocm_version: str | None = None
    cuda_version: str | None = None
    vbios: str | None = None
    compute_partition: str | None = None  # SPX/CPX (ROCm); MIG's mode (NVIDIA)
    memory_partition: str | None = None  # NPS1/NPS4 (ROCm)
    kernel: str | None = None
    runner_version: str | None = None
    runner_commit: str | None = None
    modules: dict[str, str] = field(default_factory=dict)  # module -> its vmfb's sha256

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Any) -> Environment | None:
        """The environment a record kept; None where it kept none. A field of another type
        (a hand-edited record) is taken as absent rather than refusing the result."""
        if not isinstance(raw, dict):
            return None
        texts = {f.name: raw[f.name] for f in fields(cls)
                 if f.name != "modules" and isinstance(raw.get(f.name), str)}
        modules = raw.get("modules")
        modules = {str(k): str(v) for k, v in modules.items()} if isinstance(
            modules, dict) else {}
        return cls(**texts, modules=modules)

    def with_runner(self, runner: dict[str, Any]) -> Environment:
        return _replace(self, runner_version=_text(runner.get("version")),
                        runner_commit=_text(runner.get("commit")))

    def with_modules(self, modules: dict[str, str]) -> Environment:
        return _replace(self, modules=dict(modules))


def _replace(env: Environment, **changes: Any) -> Environment:
    return Environment(**{**env.to_dict(), **changes})


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _joined(values: Any) -> str | None:
    """Distinct known values, comma-separated (one where every GPU agrees)."""
    known = sorted({str(v) for v in values if v not in (None, "")})
    return ",".join(known) or None


def _output(argv: tuple[str, ...], run: Run) -> str | None:
    """The tool's stdout; None where it cannot run or fails (absent, not an error)."""
    try:
        proc = run(list(argv), capture_output=True, text=True, timeout=gpu_info.TIMEOUT_S,
                   check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def cuda_version(text: str) -> str | None:
    """`CUDA Version : 12.4` from `nvidia-smi -q` (the driver's CUDA). From R610 the line
    is marked deprecated ("will be removed in CUDA 14.0") beside a `CUDA UMD Version`
    line with the same value, read where the old one is gone."""
    found = re.search(r"^\s*CUDA (?:UMD )?Version\s*:\s*(\S+)", text, re.M)
    return found.group(1) if found and found.group(1) != "N/A" else None


def rocm_release(root: Path | None = None) -> str | None:
    """The ROCm release installed (`6.3.1-48`), from its .info/version file."""
    root = root or Path(os.environ.get("ROCM_PATH") or "/opt/rocm")
    try:
        return (root / ".info" / "version").read_text().strip() or None
    except OSError:
        return None


def _nvidia(run: Run) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    text = _output(NVIDIA_VERSIONS, run)
    if text:
        rows = gpu_info.nvidia_csv(text, ("driver_version", "vbios_version"))
        out["gpu_driver"] = _joined(r["driver_version"] for r in rows)
        out["vbios"] = _joined(r["vbios_version"] for r in rows)
    details = _output(NVIDIA_DETAILS, run)
    out["cuda_version"] = cuda_version(details) if details else None
    mig = _output(NVIDIA_MIG, run)
    if mig:
        out["compute_partition"] = _joined(
            f"MIG {c.compute.lower()}" for c in nvidia_mig(mig) if c.compute)
    return out


def _rocm(run: Run) -> dict[str, str | None]:
    out: dict[str, str | None] = {"rocm_version": rocm_release()}
    text = _output(ROCM_VERSIONS, run)
    if text:
        data = gpu_info.rocm_json(text)
        out["gpu_driver"] = gpu_info.card_value(data.get("system") or {}, "Driver version")
        out["vbios"] = _joined(gpu_info.card_value(c, "VBIOS version")
                               for c in gpu_info.rocm_cards(data).values())
    parts = _output(ROCM_PARTITIONS, run)
    return {**out, **_cards_partitions(rocm_partitions(parts))} if parts else out


def _cards_partitions(cards: list[Card]) -> dict[str, str | None]:
    return {"compute_partition": _joined(c.compute for c in cards),
            "memory_partition": _joined(c.memory for c in cards)}


def _amd(run: Run) -> dict[str, str | None]:
    """A ROCm node without rocm-smi: amd-smi's driver, firmware (`vbios`, named `ifwi` from
    ROCm 7; the `--vbios` flag is kept for it) and partition modes."""
    out: dict[str, str | None] = {"rocm_version": rocm_release()}
    text = _output(AMD_VERSIONS, run)
    if text:
        rows = gpu_info.amd_rows(text)
        version, part = gpu_info.card_value, gpu_info.amd_part
        out["gpu_driver"] = _joined(version(part(r, "driver"), "version") for r in rows)
        out["vbios"] = _joined(version(part(r, "ifwi") or part(r, "vbios"), "version")
                               for r in rows)
    parts = _output(AMD_PARTITIONS, run)
    return {**out, **_cards_partitions(amd_partitions(parts))} if parts else out


def capture_environment(runner: dict[str, Any] | None = None, which: Which = shutil.which,
                        run: Run = subprocess.run) -> Environment:
    """This machine's environment now (see the module docstring); never raises: a tool
    that prints what cannot be read leaves what it would have told unknown."""
    gpu: dict[str, str | None] = {}
    try:
        if which("nvidia-smi"):
            gpu = _nvidia(run)
        elif which("rocm-smi"):
            gpu = _rocm(run)
        elif which("amd-smi"):
            gpu = _amd(run)
        else:
            gpu = {"rocm_version": rocm_release()}
    except (ToolFailed, ValueError, KeyError, TypeError, AttributeError):
        gpu = {}
    env = Environment.from_dict({**gpu, "kernel": platform.release()}) or Environment()
    return env.with_runner(runner) if runner else env


def module_hashes(manifest: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Each compiled module's vmfb sha256 from a run's manifest (run.json's `compiled`),
    named by the MLIR it was compiled from (`unet`), after `prefix` where given."""
    compiled = manifest.get("compiled")
    entries = compiled.get("compiled") if isinstance(compiled, dict) else None
    out = {}
    for c in entries if isinstance(entries, list) else []:
        if isinstance(c, dict) and c.get("vmfb_sha256") and c.get("mlir"):
            out[prefix + Path(str(c["mlir"])).stem] = str(c["vmfb_sha256"])
    return out

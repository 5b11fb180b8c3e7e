"""Whether the GPU found runs the code the profile compiled for, told before any number.

A CUDA profile compiles PTX for its chip (`sm_80` for the h100 profiles: IREE 3.13 knows no
`sm_90`), which the CUDA driver compiles again for the GPU it finds: any GPU of that compute
capability or newer runs it, so an H200 (9.0) runs the h100 profile as an H100 does, and an
A10 (8.6) would too, while a V100 (7.0) cannot. A HIP profile's code is for one gfx target,
which the GPU must be. The compute capability comes from nvidia-smi (`compute_cap`), or,
from a driver too old to report it, from the GPU's name (NVIDIA_SM);
where neither tells, the check says so and goes on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runner.base.gpu_info import Gpu, GpuInfo

TOOLS = {"cuda": "nvidia-smi", "hip": "rocm-smi"}
# NVIDIA product and architecture names -> compute capability, for a driver whose nvidia-smi
# does not report `compute_cap`.
NVIDIA_SM = {"a100": 80, "ampere": 80, "a10": 86, "rtx3090ti": 86, "l4": 89, "l40s": 89,
             "ada": 89, "rtx4090": 89, "h100": 90, "h200": 90, "gh200": 90, "hopper": 90,
             "b200": 100, "gb200": 100, "blackwell": 100}


@dataclass(frozen=True)
class DeviceFit:
    """Whether this machine's GPU runs the code the profile was compiled for."""

    ok: bool | None  # None: could not be told (the note says why)
    note: str


def compute_capability(gpu: Gpu) -> int | None:
    """`9.0` -> 90; else from the name's words (`NVIDIA H200` -> h200 -> 90)."""
    if gpu.arch and re.fullmatch(r"\d+\.\d", gpu.arch):
        major, minor = gpu.arch.split(".")
        return int(major) * 10 + int(minor)
    words = re.findall(r"[a-z0-9]+", gpu.name.lower())
    return next((NVIDIA_SM[w] for w in words if w in NVIDIA_SM), None)


def runs_profile(backend: str, chip: str, info: GpuInfo) -> DeviceFit:
    """Whether device 0 runs code compiled for (backend, chip)."""
    if backend not in TOOLS:
        return DeviceFit(None, f"a {backend} profile: no GPU to check")
    if info.tool is None or not info.gpus:
        return DeviceFit(None, f"not checked: {info.note or 'no GPU listed'}")
    if info.tool != TOOLS[backend]:
        return DeviceFit(False, f"the profile is compiled for {backend} ({chip}), but this "
                         f"machine's GPU is listed by {info.tool}: {info.line()}")
    gpu = info.gpus[0]
    if backend == "hip":
        if not gpu.arch or not chip.startswith("gfx"):
            return DeviceFit(None, f"not checked: rocm-smi gives no gfx target for {gpu.name}")
        ok = gpu.arch == chip
        return DeviceFit(ok, f"{gpu.name} is {gpu.arch}; the profile's code is for {chip}")
    want = re.fullmatch(r"sm_(\d+)", chip)
    have = compute_capability(gpu)
    if want is None or have is None:
        return DeviceFit(None, f"not checked: the compute capability of {gpu.name} or of "
                         f"{chip} is unknown")
    need = int(want.group(1))
    if have < need:
        return DeviceFit(False, f"{gpu.name} (compute capability {have / 10:.1f}) cannot run "
                         f"{chip} code, which needs {need / 10:.1f} or newer")
    how = ("" if have == need else
           f"; the CUDA driver compiles the profile's PTX for its sm_{have}")
    return DeviceFit(True, f"{gpu.name} (compute capability {have / 10:.1f}) runs {chip} "
                     f"code{how}")

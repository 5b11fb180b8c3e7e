"""Whether the installed iree-compile knows a chip (a CUDA or HIP GPU, or an LLVM CPU), asked
before compiling for it, in a dry run as in the real one.

IREE has no command that lists its GPU targets, and a chip it does not know fails late or
badly: IREE 3.13 stops an unknown `sm_XX` (`sm_90`, the H100) with "missing GPU target in
#hal.executable.target" and a long IR dump, and crashes on any other unknown CUDA name
(`--iree-cuda-target=h100`: a segfault and a stack dump); `target.chip=gfx9999` on the cpu
profile becomes `--iree-llvmcpu-target-cpu=gfx9999`, which a dry run would print as if fine.
So before compiling for a chip the runner compiles a three-line module for it
(`--compile-to=executable-targets`, under a second) and remembers the answer per compiler
version and commit in `$RUNNER_CACHE_DIR/gpu-targets/`. For a chip the compiler does not know
it probes the usual candidates once, and says which ones this compiler knows and what to do
instead.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from runner.base.errors import BadInput
from runner.base.fileio import atomic_write_json
from runner.base.iree_tools import CompilerInfo
from runner.base.paths import cache_dir, caches_writable

PROBE_MLIR = """func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %r = arith.addf %a, %b : tensor<4xf32>
  return %r : tensor<4xf32>
}
"""
# The chip flags, the backend each names, and the HAL device a probe compiles for.
CHIP_FLAGS = {"--iree-cuda-target=": "cuda", "--iree-rocm-target=": "hip",
              "--iree-hip-target=": "hip", "--iree-llvmcpu-target-cpu=": "llvm-cpu"}
DEVICES = {"cuda": ("--iree-hal-target-device=cuda",), "hip": ("--iree-hal-target-device=hip",),
           "llvm-cpu": ("--iree-hal-target-device=local",
                        "--iree-hal-local-target-device-backends=llvm-cpu")}
# What "known" is checked against when a chip is not: the architectures of the GPUs a lab
# runs SDXL on and their neighbours (IREE also takes product names, e.g. mi300x, a100).
CANDIDATES = {
    "cuda": ("sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"),
    "hip": ("gfx908", "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"),
    "llvm-cpu": ("host", "x86-64-v3", "x86-64-v4", "znver4", "sapphirerapids", "neoverse-v2"),
}
# What iree-compile says of a target it does not know (3.11-3.13): an unknown sm_XX, an
# unknown CUDA name (then it crashes), an unknown ROCm target.
UNKNOWN = ("missing GPU target", "Unknown CUDA target", "Unknown ROCM target",
           "does not provide any executable targets", "Unknown CPU for target architecture",
           "is not a recognized processor")
PROBE_TIMEOUT_S = 120
# The shipped profile whose `target.chip` is the one to suggest for each backend: the chip
# the project compiles and documents for it (configs/h100.yaml: sm_80, whose PTX the CUDA
# driver JIT-compiles for an H100 or H200; configs/sdxl.yaml: gfx942, MI300X and MI325X).
DOCUMENTED_BY = {"cuda": "h100", "hip": "sdxl"}
# Signals that stop a probe from outside (Ctrl-C, a kill, a time limit): they say nothing
# about the chip. A crash (SIGSEGV, SIGABRT) is the compiler's own answer: IREE 3.13 crashes
# on a CUDA name it does not know.
_STOPPED = {signal.SIGINT, signal.SIGTERM, signal.SIGKILL, signal.SIGHUP}


@dataclass(frozen=True)
class ChipFlag:
    backend: str  # cuda | hip
    prefix: str  # the flag, up to its `=`
    chip: str

    @property
    def flag(self) -> str:
        return f"{self.prefix}{self.chip}"


def chip_flag(flags: tuple[str, ...]) -> ChipFlag | None:
    """The CUDA/HIP chip or LLVM CPU a compile command targets (the last flag wins, as in
    LLVM's)."""
    found = None
    for flag in flags:
        for prefix, backend in CHIP_FLAGS.items():
            if flag.startswith(prefix) and flag != prefix:
                found = ChipFlag(backend, prefix, flag.removeprefix(prefix))
    return found


def _cache_path(compiler: CompilerInfo) -> Path:
    name = re.sub(r"[^\w.-]", "_", f"{compiler.version}-{compiler.commit}")
    return cache_dir() / "gpu-targets" / f"{name}.json"


# What a dry run probed, by the cache file it would have gone to: a dry run writes no cache
# (runner.base.paths.caches_read_only), and without these it asked iree-compile the same
# question again for each of the model's files (five probes of one chip per dry run).
_UNSAVED: dict[Path, dict[str, bool]] = {}


def _load(compiler: CompilerInfo) -> dict[str, bool]:
    path = _cache_path(compiler)
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        raw = {}  # none yet, or damaged: it is only a cache
    saved = {k: v for k, v in raw.items() if isinstance(v, bool)} if isinstance(raw, dict) \
        else {}
    if caches_writable():  # a real run asks and saves anew what only a dry run knew
        return saved
    return {**saved, **_UNSAVED.get(path, {})}


def _save(compiler: CompilerInfo, answers: dict[str, bool]) -> None:
    """Merged into what is there: another process may have probed other chips meanwhile.
    A dry run keeps its answers to itself: in this process, not in the cache."""
    if caches_writable():
        atomic_write_json(_cache_path(compiler), {**_load(compiler), **answers})
    else:
        _UNSAVED.setdefault(_cache_path(compiler), {}).update(answers)


def probe_chip(compiler: CompilerInfo, target: ChipFlag) -> bool | None:
    """Whether `compiler` compiles for the chip: True, False, or None when the probe says
    nothing about the chip (e.g. this compiler does not know the flag itself: the real
    compile then reports that)."""
    with tempfile.TemporaryDirectory(prefix="runner-gpu-probe-") as tmp:
        mlir = Path(tmp) / "probe.mlir"
        mlir.write_text(PROBE_MLIR)
        argv = [compiler.path, str(mlir), *DEVICES[target.backend], target.flag,
                "--compile-to=executable-targets", "-o", os.devnull]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                                  timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None
    rc = proc.returncode
    if rc == 0:
        return True
    if -rc in _STOPPED or rc - 128 in _STOPPED:
        return None  # stopped from outside: no answer, nothing cached
    if rc < 0 or rc >= 128 or any(u in proc.stderr for u in UNKNOWN):
        return False  # a crash (signal) on a three-line module is the target too
    return None


def known_targets(compiler: CompilerInfo, backend: str, prefix: str) -> list[str]:
    """The candidates of `backend` this compiler knows (probed in parallel, then cached)."""
    answers = _load(compiler)
    todo = [c for c in CANDIDATES[backend] if f"{prefix}{c}" not in answers]
    if todo:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            found = pool.map(lambda c: probe_chip(compiler, ChipFlag(backend, prefix, c)), todo)
            new = {f"{prefix}{c}": ok for c, ok in zip(todo, found, strict=True)
                   if ok is not None}
        _save(compiler, new)
        answers.update(new)
    return [c for c in CANDIDATES[backend] if answers.get(f"{prefix}{c}")]


def check_gpu_target(flags: tuple[str, ...], compiler: CompilerInfo, where: str) -> None:
    """Raises RunnerError naming the targets `compiler` knows when the flags' chip
    is not one of them; nothing for a CPU compile or a chip it knows (cached answers make
    this free after the first compile for a chip)."""
    target = chip_flag(flags)
    if target is None:
        return
    answers = _load(compiler)
    known = answers.get(target.flag)
    if known is None:
        known = probe_chip(compiler, target)
        if known is None:
            return  # the probe could not tell: the compile itself says what is wrong
        _save(compiler, {target.flag: known})
    if known:
        return
    others = known_targets(compiler, target.backend, target.prefix)
    kind = {"cuda": "CUDA", "hip": "HIP", "llvm-cpu": "LLVM CPU"}[target.backend]
    raise BadInput(
        f"iree-compile {compiler.version} (@ {compiler.commit[:12]}) does not know the {kind} "
        f"target {target.chip!r} ({target.flag}: compiling for it would stop with an error, "
        f"or crash); of {', '.join(CANDIDATES[target.backend])} it knows "
        f"{', '.join(others) or 'none'}", where=where, fix=_fix(target, others))


def documented_chip(backend: str) -> tuple[str, str]:
    """(the chip the shipped profile for `backend` compiles for, that profile's file)."""
    from runner.config.profile import load_profile

    profile = load_profile(DOCUMENTED_BY[backend])
    return profile.target.chip, str(profile.path)


def _fix(target: ChipFlag, known: list[str]) -> str:
    """What to compile for instead: the chip the project's own profile for the backend
    compiles for (for CUDA its PTX is JIT-compiled by the driver for the GPU it runs on),
    when this compiler knows it; otherwise what it knows. A CPU: what LLVM knows."""
    if target.backend == "llvm-cpu":
        return (f"set target.chip to a CPU it knows: {', '.join(known) or 'host'} (`host` is "
                "this machine's), or another CPU name LLVM lists for this architecture")
    chip, profile = documented_chip(target.backend)
    if known and chip not in known:
        chip = known[0]
    if target.backend == "hip":
        return (f"set target.chip={chip} (what {profile} compiles for: MI300X/MI325X; gfx950 "
                f"for MI355X), or use an IREE build that knows {target.chip}")
    return (f"set target.chip={chip} (--set target.chip={chip}; what {profile} compiles "
            "for): IREE embeds PTX, which the CUDA driver JIT-compiles for the newer GPU it "
            f"runs on (sm_80 PTX runs on an H100 or H200), or use an IREE build that knows "
            f"{target.chip}")

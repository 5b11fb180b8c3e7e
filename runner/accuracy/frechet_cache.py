"""A Fréchet distance computed once per pair of statistics on this machine.

MLPerf's square root of a 2048-d covariance product (`frechet_sqrtm`) and its cross-check
take 27 s of a 32 s tiny-model score on a 2-core x86-64 VM (docs/accuracy.md), and
rescoring the same images (`runner run --rescore`, `runner score` again, a validate step run
again, `--require-full` after a subset verdict) asks them the same question. The answer is
kept in `$RUNNER_CACHE_DIR/frechet/`, keyed by the sha256 of both statistics' float64 bytes,
the method, and what computes it: the numpy and scipy versions, the CPU model and the CPUs
this process may use (BLAS picks its kernels and blocking from them). Anything else computes
it again, so a cached value is the value this machine would compute now, bit for bit. An
unreadable entry is computed again and replaced.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
from dataclasses import asdict
from pathlib import Path

import numpy as np

from runner.accuracy.frechet import FRECHET, FrechetResult, psd_sqrt
from runner.base.fileio import atomic_write_json
from runner.base.paths import cache_dir

CACHE_SUBDIR = "frechet"


@functools.cache
def _machine() -> str:
    """What the float64 answer depends on besides its inputs."""
    import scipy

    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"numpy {np.__version__}; scipy {scipy.__version__}; {platform.machine()} "
            f"{model}; {cpus} cpus")


def _digest(arrays: tuple[np.ndarray, ...]) -> str:
    digest = hashlib.sha256(f"{_machine()}\n".encode())
    for a in arrays:
        a = np.ascontiguousarray(a, np.float64)
        digest.update(repr(a.shape).encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def _read(path: Path) -> FrechetResult | None:
    try:
        entry = json.loads(path.read_text())
        return FrechetResult(float(entry["value"]), str(entry["method"]),
                             bool(entry["eps_offset"]), float(entry["max_imag"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


# The reference's square root for the fast method, by its statistics' digest: every score
# against one reference (a trend's builds, a validate's steps, a rescore) shares it. Two
# kept (2048-d: 32 MB each).
_ROOTS: dict[str, np.ndarray] = {}
_ROOTS_KEPT = 2


def reference_root(sigma: np.ndarray) -> np.ndarray:
    """`psd_sqrt(sigma)`, computed once per process for each reference."""
    key = _digest((sigma,))
    if key not in _ROOTS:
        while len(_ROOTS) >= _ROOTS_KEPT:
            _ROOTS.pop(next(iter(_ROOTS)))
        _ROOTS[key] = psd_sqrt(np.atleast_2d(np.asarray(sigma, np.float64)))
    return _ROOTS[key]


class FrechetPair:
    """One pair of statistics (reference first, as MLPerf passes them), hashed once (64 MB
    at 2048-d) for each method asked of it."""

    def __init__(self, mu1, sigma1, mu2, sigma2):
        self.statistics = (mu1, sigma1, mu2, sigma2)
        self._digest = _digest(self.statistics)

    def distance(self, method: str) -> tuple[FrechetResult, bool]:
        """`FRECHET[method]` of the pair, and whether it came from the cache."""
        path = cache_dir() / CACHE_SUBDIR / f"{self._digest}-{method}.json"
        found = _read(path)
        if found is not None and found.method == method:
            return found, True
        extra = {"sqrt_sigma1": reference_root(self.statistics[1])} if method == "eigh" else {}
        result = FRECHET[method](*self.statistics, **extra)
        with contextlib.suppress(OSError):  # a read-only or full cache only costs the time
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(path, {**asdict(result), "machine": _machine()})
        return result, False

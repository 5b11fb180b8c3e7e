"""The Frechet distance between two Gaussians, and the float64 statistics it is computed from.

    d^2 = ||mu1 - mu2||^2 + Tr(S1) + Tr(S2) - 2 Tr((S1 S2)^(1/2))

Two ways to get the last trace. `frechet_sqrtm` is MLPerf's (pytorch-fid's): scipy's `sqrtm`
of the non-symmetric product, and when that is not finite, the same with 1e-6 added to both
diagonals; a result whose diagonal has an imaginary part above 1e-3 is an error. It is the one
a verdict uses, since real submissions sit within 0.05 of the FID ceiling. `frechet_eigh` is
the fast one: (S1 S2)^(1/2) has the eigenvalues of sqrt(S1) S2 sqrt(S1), a symmetric PSD
matrix, so two symmetric eigensolves give the trace (a few times faster at 2048-d, and it
needs no offset for singular covariances).

The statistics stream: `RunningMoments` merges per-batch means and co-moments in float64
(Chan et al.'s pairwise update), so memory does not depend on N and the result equals
`np.mean` / `np.cov(rowvar=False)` over all features to float64 rounding.
"""

from __future__ import annotations

import io
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from runner.base.errors import BadInput, StepFailed
from runner.base.fileio import atomic_write_bytes, sha256_file

MLPERF_EPS = 1e-6
# MLPerf's tolerance on the imaginary part of the square root's diagonal.
IMAG_ATOL = 1e-3


@dataclass(frozen=True)
class FrechetResult:
    value: float
    method: str  # "sqrtm" (MLPerf's) or "eigh" (fast)
    eps_offset: bool = False  # MLPerf's singular-product fallback was taken
    max_imag: float = 0.0  # largest imaginary part discarded from the square root


def _check_pair(mu1, sigma1, mu2, sigma2):
    mu1, mu2 = (np.atleast_1d(np.asarray(m, np.float64)) for m in (mu1, mu2))
    s1, s2 = (np.atleast_2d(np.asarray(s, np.float64)) for s in (sigma1, sigma2))
    if mu1.shape != mu2.shape or s1.shape != s2.shape or s1.shape != (mu1.size, mu1.size):
        raise BadInput(f"statistics do not match: mu {mu1.shape} vs {mu2.shape}, "
                       f"sigma {s1.shape} vs {s2.shape}",
                       fix="compute both statistics with the same Inception feature size")
    return mu1, s1, mu2, s2


def frechet_sqrtm(mu1, sigma1, mu2, sigma2, eps: float = MLPERF_EPS) -> FrechetResult:
    """MLPerf's computation, step for step (argument order matters to the last bits: MLPerf
    passes the reference statistics first)."""
    from scipy import linalg

    mu1, s1, mu2, s2 = _check_pair(mu1, sigma1, mu2, sigma2)
    diff = mu1 - mu2
    offset_used = False
    with warnings.catch_warnings():
        # scipy warns on singular / ill-conditioned input; MLPerf's test is finiteness.
        warnings.simplefilter("ignore")
        covmean = linalg.sqrtm(s1.dot(s2))
        if not np.isfinite(covmean).all():
            offset_used = True
            offset = np.eye(s1.shape[0]) * eps
            covmean = linalg.sqrtm((s1 + offset).dot(s2 + offset))
    max_imag = 0.0
    if np.iscomplexobj(covmean):
        max_imag = float(np.max(np.abs(covmean.imag)))
        if not np.allclose(np.diagonal(covmean).imag, 0, atol=IMAG_ATOL):
            raise StepFailed(f"Frechet distance: the matrix square root has an imaginary "
                             f"component {max_imag:.3g} (MLPerf rejects above {IMAG_ATOL})",
                             fix="the covariances are degenerate: score more images, or check "
                                 "that the images are not constant")
        covmean = covmean.real
    value = diff.dot(diff) + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean)
    return FrechetResult(float(value), "sqrtm", offset_used, max_imag)


def psd_sqrt(sigma: np.ndarray) -> np.ndarray:
    """The symmetric positive semi-definite square root (eigenvalues below 0 taken as 0)."""
    w, v = np.linalg.eigh((sigma + sigma.T) / 2)
    return (v * np.sqrt(np.clip(w, 0, None))) @ v.T


def frechet_eigh(mu1, sigma1, mu2, sigma2, sqrt_sigma1: np.ndarray | None = None
                 ) -> FrechetResult:
    """Tr((S1 S2)^(1/2)) = sum of sqrt(eigenvalues of sqrt(S1) S2 sqrt(S1)); `sqrt_sigma1`
    lets a caller reuse the reference's square root across runs."""
    mu1, s1, mu2, s2 = _check_pair(mu1, sigma1, mu2, sigma2)
    diff = mu1 - mu2
    root = psd_sqrt(s1) if sqrt_sigma1 is None else sqrt_sigma1
    m = root @ s2 @ root
    ev = np.linalg.eigvalsh((m + m.T) / 2)
    tr_covmean = np.sqrt(np.clip(ev, 0, None)).sum()
    value = diff.dot(diff) + np.trace(s1) + np.trace(s2) - 2 * tr_covmean
    return FrechetResult(float(value), "eigh")


FRECHET: dict[str, Callable[..., FrechetResult]] = {"sqrtm": frechet_sqrtm,
                                                    "eigh": frechet_eigh}


# One-sample updates queued before they are applied, and the side of the square blocks of
# the co-moment matrix they are applied to (256 x 256 float64s: 512 KiB, cache-sized).
_QUEUED_UPDATES = 16
_BLOCK = 256


@dataclass
class RunningMoments:
    """Streaming mean and covariance in float64; memory O(d^2), independent of N.

    MLPerf scores one image at a time, and a one-sample update adds a scaled outer product
    to the d x d co-moment matrix: at d = 2048 that is 32 MB read and written per image,
    17-22 ms on a CPU, a tenth of both networks' forward passes. So one-sample updates are
    queued and applied block by block, each cache-sized block taking every queued update
    in order while it is in cache, and only above the diagonal while the matrix is exactly
    symmetric (an update adds the same bits at (i, j) and (j, i)). Every element sees the
    same float64 operations in the same order as with one Chan step per sample, so the
    result is bit-identical, at ~2.5 ms per image. `m2` is current after `covariance()`."""

    dims: int
    n: int = 0
    mean: np.ndarray = field(init=False)
    m2: np.ndarray = field(init=False)  # sum of outer products of deviations from the mean

    def __post_init__(self):
        self.mean = np.zeros(self.dims, np.float64)
        self.m2 = np.zeros((self.dims, self.dims), np.float64)
        self._deltas = np.empty((_QUEUED_UPDATES, self.dims), np.float64)
        self._scales = np.empty(_QUEUED_UPDATES, np.float64)
        self._queued = 0
        self._scratch = np.empty((_BLOCK, _BLOCK), np.float64)
        self._symmetric = True  # no multi-sample update (a BLAS product) has touched m2
        self._below_current = True  # the lower triangle holds its updates too

    def update(self, features: np.ndarray) -> None:
        x = np.asarray(features, np.float64).reshape(-1, self.dims)
        nb = x.shape[0]
        if nb == 0:
            return
        if nb == 1:  # the Chan step below with a zero in-batch co-moment, deferred
            n = self.n + 1
            delta = x[0] - self.mean
            self._deltas[self._queued] = delta
            self._scales[self._queued] = self.n * nb / n
            self._queued += 1
            self.mean = self.mean + delta * (nb / n)
            self.n = n
            if self._queued == _QUEUED_UPDATES:
                self._apply_queued()
            return
        self._settle()
        self._symmetric = False
        mb = x.mean(axis=0)
        dev = x - mb
        m2b = dev.T @ dev
        n = self.n + nb
        delta = mb - self.mean
        self.m2 += m2b + np.outer(delta, delta) * (self.n * nb / n)
        self.mean = self.mean + delta * (nb / n)
        self.n = n

    def _apply_queued(self) -> None:
        if not self._queued:
            return
        edges = range(0, self.dims, _BLOCK)
        for i in edges:
            for j in edges:
                if j < i and self._symmetric:
                    continue
                block = self.m2[i : i + _BLOCK, j : j + _BLOCK]
                term = self._scratch[: block.shape[0], : block.shape[1]]
                for q in range(self._queued):
                    np.multiply.outer(self._deltas[q, i : i + _BLOCK],
                                      self._deltas[q, j : j + _BLOCK], out=term)
                    term *= self._scales[q]
                    block += term
        self._queued = 0
        self._below_current = not self._symmetric

    def _settle(self) -> None:
        """Applies queued updates and mirrors the upper triangle down where it alone was
        updated."""
        self._apply_queued()
        if not self._below_current:
            below = np.tri(self.dims, k=-1, dtype=bool)
            np.copyto(self.m2, self.m2.T.copy(), where=below)
            self._below_current = True

    def covariance(self) -> np.ndarray:
        """Unbiased (N - 1), as `np.cov`; needs two samples."""
        if self.n < 2:
            raise BadInput(f"FID needs at least 2 images, got {self.n}",
                           fix="score a run of 2 or more samples (--count 2)")
        self._settle()
        return self.m2 / (self.n - 1)


@dataclass(frozen=True)
class FidStatistics:
    """Reference statistics (`mu`, `sigma`) as read from an `.npz`, plus where they came from.

    `meta` is optional provenance this tool adds when it writes statistics (backbone label
    and fingerprint, sample ids); MLPerf's `val2014.npz` has none.
    """

    mu: np.ndarray
    sigma: np.ndarray
    path: str | None = None
    sha256: str | None = None
    meta: dict = field(default_factory=dict)


def load_statistics(path: Path, dims: int = 2048, where: str | None = None) -> FidStatistics:
    path = Path(path).expanduser()
    where = where or str(path)
    if not path.is_file():
        raise BadInput(f"FID statistics file not found: {path}", where=where,
                       fix="for SDXL, MLPerf's `val2014.npz` (mlcommons/inference "
                           "text_to_image/tools); for other models, `runner calibrate`")
    try:
        with np.load(path, allow_pickle=False) as f:
            keys = set(f.files)
            if not {"mu", "sigma"} <= keys:
                raise BadInput(f"statistics file has keys {sorted(keys)}, needs `mu` and "
                               "`sigma`", where=where,
                               fix="use an .npz written by pytorch-fid, MLPerf or "
                                   "`runner calibrate`")
            mu, sigma = np.asarray(f["mu"], np.float64), np.asarray(f["sigma"], np.float64)
            meta = json.loads(str(f["meta"])) if "meta" in keys else {}
    except (OSError, ValueError) as e:
        raise BadInput(f"cannot read FID statistics: {e}", where=where,
                       fix="pass an .npz with `mu` and `sigma`") from e
    if mu.shape != (dims,) or sigma.shape != (dims, dims):
        raise BadInput(f"statistics have mu {mu.shape} and sigma {sigma.shape}; the FID "
                       f"Inception gives {dims}-d features, so mu must be ({dims},) and "
                       f"sigma ({dims}, {dims})", where=where,
                       fix="use statistics of the 2048-d pool3 features")
    if not (np.isfinite(mu).all() and np.isfinite(sigma).all()):
        raise BadInput("statistics contain NaN or Inf", where=where,
                       fix="recompute them (`runner calibrate`) or fetch a clean copy")
    return FidStatistics(mu, sigma, str(path), sha256_file(path), meta)


def save_statistics(path: Path, mu: np.ndarray, sigma: np.ndarray, meta: dict | None = None
                    ) -> None:
    """Atomically, compressed, with the provenance as a JSON string under `meta` (no pickles,
    so pytorch-fid and MLPerf read the file unchanged)."""
    buf = io.BytesIO()
    np.savez_compressed(buf, mu=np.asarray(mu, np.float64), sigma=np.asarray(sigma, np.float64),
                        meta=np.array(json.dumps(meta or {}, sort_keys=True)))
    atomic_write_bytes(Path(path), buf.getvalue())

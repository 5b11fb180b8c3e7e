"""`runner compare RUN_A RUN_B`: per-image PSNR and SSIM over the samples both runs hold.

FID and CLIP say whether a run is acceptable; when two runs' scores differ, this says which
images moved and by how much: PSNR and SSIM per image, data range 255, as torchmetrics'
functional ones compute them (SSIM: an 11-tap Gaussian of sigma 1.5 over the reflect-padded
image, k1 0.01, k2 0.03, the mean of the map over pixels and channels), in numpy: the GPU
check compares images on a machine with the runtime and no torch (tests/test_accuracy_cli.py
holds them to torchmetrics')."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runner.accuracy.samples import SampleSource, format_ids, open_source
from runner.base.errors import BadInput
from runner.base.fileio import atomic_write_json

BATCH = 16


@dataclass(frozen=True)
class ImageDiff:
    qsl_idx: int
    psnr: float  # inf for identical images
    ssim: float
    max_abs: int
    differing_fraction: float

    def to_dict(self) -> dict:
        return {"qsl_idx": self.qsl_idx, "psnr": None if math.isinf(self.psnr) else self.psnr,
                "identical": self.max_abs == 0, "ssim": self.ssim, "max_abs": self.max_abs,
                "differing_fraction": self.differing_fraction}


@dataclass(frozen=True)
class Comparison:
    run_a: str
    run_b: str
    diffs: tuple[ImageDiff, ...]  # ascending qsl_idx
    only_a: tuple[int, ...]
    only_b: tuple[int, ...]

    def worst(self, k: int = 10) -> list[ImageDiff]:
        return sorted(self.diffs, key=lambda d: (d.psnr, d.ssim, d.qsl_idx))[:k]

    def summary(self) -> dict:
        finite = [d.psnr for d in self.diffs if not math.isinf(d.psnr)]
        return {
            "common": len(self.diffs),
            "identical": sum(d.max_abs == 0 for d in self.diffs),
            "min_psnr": min(finite) if finite else None,
            "mean_psnr_of_differing": float(np.mean(finite)) if finite else None,
            "min_ssim": min((d.ssim for d in self.diffs), default=None),
            "mean_ssim": float(np.mean([d.ssim for d in self.diffs])) if self.diffs else None,
            "max_abs": max((d.max_abs for d in self.diffs), default=None),
        }

    def to_dict(self, k: int = 10) -> dict:
        return {"run_a": self.run_a, "run_b": self.run_b, "summary": self.summary(),
                "only_a": format_ids(self.only_a), "only_b": format_ids(self.only_b),
                "worst": [d.to_dict() for d in self.worst(k)],
                "per_image": [d.to_dict() for d in self.diffs]}

    def table(self, k: int = 10) -> str:
        s = self.summary()
        lines = [f"{s['common']} common samples, {s['identical']} identical; only in A: "
                 f"{len(self.only_a)}, only in B: {len(self.only_b)}",
                 f"{'qsl_idx':>8} {'PSNR dB':>9} {'SSIM':>10} {'max|d|':>7} {'differ%':>8}"]
        for d in self.worst(k):
            psnr = "inf" if math.isinf(d.psnr) else f"{d.psnr:.3f}"
            lines.append(f"{d.qsl_idx:>8} {psnr:>9} {d.ssim:>10.6f} {d.max_abs:>7} "
                         f"{100 * d.differing_fraction:>7.4f}%")
        return "\n".join(lines)


def _lookup(source: SampleSource, ids: set[int], shape):
    """Random access to a run's images; an accuracy log is read once into memory (only the
    common ids), since its records are in arbitrary order."""
    if source.kind == "store":
        from runner.rundir.store import SampleStore

        store = SampleStore(source.run_dir)
        return store.load
    if source.kind == "generate":
        return source._load_png
    held = {i: img for i, img in source.iter_samples(shape) if i in ids}
    return held.__getitem__


def _ids(source: SampleSource) -> set[int]:
    if source.kind == "log":
        from runner.accuracy.samples import scan_log_ids

        assert source.log is not None  # a "log" source always names its log
        return set(scan_log_ids(source.log))
    return set(source.available or ())


SSIM_SIGMA, SSIM_K1, SSIM_K2, DATA_RANGE = 1.5, 0.01, 0.03, 255.0


def _gaussian(sigma: float) -> np.ndarray:
    """torchmetrics' 1-D SSIM kernel: int(3.5 sigma + 0.5) * 2 + 1 taps (11 for 1.5)."""
    size = int(3.5 * sigma + 0.5) * 2 + 1
    g = np.exp(-((np.arange((1 - size) / 2, (1 + size) / 2) / sigma) ** 2) / 2)
    return g / g.sum()


def _blur(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The Gaussian over (N, H, W, C) padded by len(g) // 2 on H and W, as one 2-D kernel
    (the outer product) over its valid region: one axis, then the other."""
    k = len(g)
    h = sum(g[i] * x[:, i:i + x.shape[1] - k + 1] for i in range(k))
    return sum(g[i] * h[:, :, i:i + h.shape[2] - k + 1] for i in range(k))


def _metrics(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PSNR (inf where identical) and SSIM per image of two (N, H, W, C) uint8 stacks."""
    x, y = a.astype(np.float64), b.astype(np.float64)
    mse = ((x - y) ** 2).reshape(len(x), -1).mean(axis=1)
    with np.errstate(divide="ignore"):
        psnr = 10 * np.log10(DATA_RANGE ** 2 / mse)
    g = _gaussian(SSIM_SIGMA)
    pad = ((0, 0), (len(g) // 2,) * 2, (len(g) // 2,) * 2, (0, 0))
    xp, yp = np.pad(x, pad, mode="reflect"), np.pad(y, pad, mode="reflect")
    mu_x, mu_y = _blur(xp, g), _blur(yp, g)
    var_x = np.maximum(_blur(xp * xp, g) - mu_x ** 2, 0.0)
    var_y = np.maximum(_blur(yp * yp, g) - mu_y ** 2, 0.0)
    cov = _blur(xp * yp, g) - mu_x * mu_y
    c1, c2 = (SSIM_K1 * DATA_RANGE) ** 2, (SSIM_K2 * DATA_RANGE) ** 2
    ssim = ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / (
        (mu_x ** 2 + mu_y ** 2 + c1) * (var_x + var_y + c2))
    return psnr, ssim.reshape(len(x), -1).mean(axis=1)


def _common(run_a: Path, run_b: Path, log_a: Path | None = None, log_b: Path | None = None,
            verify: bool = True):
    """Both runs' images and the sample ids both hold (refused when none)."""
    src_a = open_source(Path(run_a), log_a, verify)
    src_b = open_source(Path(run_b), log_b, verify)
    ids_a, ids_b = _ids(src_a), _ids(src_b)
    common = sorted(ids_a & ids_b)
    if not common:
        raise BadInput("the two runs have no sample ids in common",
                       where=f"{src_a.location} vs {src_b.location}",
                       fix="compare runs made for overlapping samples (--count/--samples)")
    return src_a, src_b, ids_a, ids_b, common


def compare_plan(run_a: Path, run_b: Path, written: Path | None) -> list[str]:
    """What `runner compare --dry-run` prints: both runs checked as `compare_runs` checks
    them, then what it would compare and write (`written`: the comparison's file)."""
    src_a, src_b, ids_a, ids_b, common = _common(run_a, run_b, verify=False)
    lines = [f"# compare {len(common)} samples ({format_ids(common)}) of {src_a.location} and "
             f"{src_b.location}: PSNR/SSIM per image"]
    for only, location in ((ids_a - ids_b, src_a.location), (ids_b - ids_a, src_b.location)):
        if only:
            lines.append(f"# {len(only)} sample(s) only in {location}: left out")
    return [*lines, f"# would write {written}" if written else "# writes nothing (no --out): "
            "the table is printed"]


def compare_runs(run_a: Path, run_b: Path, image_shape: tuple[int, int, int] | None = None,
                 log_a: Path | None = None, log_b: Path | None = None) -> Comparison:
    src_a, src_b, ids_a, ids_b, common = _common(run_a, run_b, log_a, log_b)
    get_a, get_b = _lookup(src_a, set(common), image_shape), _lookup(src_b, set(common),
                                                                     image_shape)
    diffs: list[ImageDiff] = []
    for lo in range(0, len(common), BATCH):
        ids = common[lo : lo + BATCH]
        a = np.stack([get_a(i) for i in ids])
        b = np.stack([get_b(i) for i in ids])
        if a.shape != b.shape:
            raise BadInput(f"images differ in shape: {a.shape[1:]} vs {b.shape[1:]}",
                           where=f"{src_a.location} vs {src_b.location}",
                           fix="compare runs of the same model (the same image size)")
        psnr, ssim = _metrics(a, b)
        absdiff = np.abs(a.astype(np.int16) - b.astype(np.int16))
        for k, qsl_idx in enumerate(ids):
            diffs.append(ImageDiff(qsl_idx, float(psnr[k]), float(ssim[k]),
                                   int(absdiff[k].max()), float((absdiff[k] > 0).mean())))
    return Comparison(src_a.location, src_b.location, tuple(diffs),
                      tuple(sorted(ids_a - ids_b)), tuple(sorted(ids_b - ids_a)))


def write_comparison(path: Path, comparison: Comparison, k: int = 10) -> None:
    atomic_write_json(Path(path), comparison.to_dict(k))

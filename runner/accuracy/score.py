"""Streaming FID + CLIP over (qsl_idx, uint8 HWC) samples: MLPerf's numbers in bounded memory.

Images arrive one at a time and are scored in batches; what is kept per sample is one CLIP
float (MLPerf averages the per-sample floats with `np.mean`, so we do too), and the Inception
features go straight into float64 running moments. Duplicate qsl_idx are skipped (the first
wins, as in MLPerf's accuracy script).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from runner.accuracy.backbones import BackboneInfo, Backbones
from runner.accuracy.frechet import (
    FRECHET,
    FidStatistics,
    FrechetResult,
    RunningMoments,
)
from runner.accuracy.inception import FEATURE_DIMS, images_to_unit_float
from runner.errors import RunnerError


class CaptionLookup(Protocol):
    def __getitem__(self, qsl_idx: int) -> str: ...


@dataclass(frozen=True)
class ScoreSettings:
    batch_size: int = 1  # MLPerf's scripts: 1 (CLIP, and FID's default path)
    frechet: str = "sqrtm"  # the verdict's method: MLPerf's sqrtm, or "eigh"
    cross_check: bool = True  # also compute the other method and record the difference
    image_size: tuple[int, int] | None = None  # expected H, W; None: the first image's
    progress: bool = True


@dataclass(frozen=True)
class AccuracyResult:
    fid: float | None  # None when no reference statistics were given (calibration)
    clip: float
    n: int
    sample_ids: tuple[int, ...]
    duplicates: int
    clip_per_sample: tuple[float, ...]
    frechet: FrechetResult | None
    frechet_check: FrechetResult | None
    backbones: BackboneInfo
    statistics_path: str | None
    statistics_sha256: str | None
    batch_size: int
    device: str
    seconds: float  # reading images + both networks
    frechet_seconds: float
    mu: np.ndarray = field(repr=False, compare=False)
    sigma: np.ndarray = field(repr=False, compare=False)

    @property
    def images_per_second(self) -> float:
        return self.n / self.seconds if self.seconds > 0 else float("inf")


def check_image(qsl_idx: int, image, size: tuple[int, int] | None) -> None:
    where = f"sample {qsl_idx}"
    if not isinstance(image, np.ndarray):
        raise RunnerError(f"image is a {type(image).__name__}, not a numpy array", where=where)
    if image.dtype != np.uint8:
        if np.issubdtype(image.dtype, np.number) and not np.isfinite(image).all():
            raise RunnerError(f"image has NaN/Inf values ({image.dtype})", where=where,
                              fix="the pipeline produced non-finite pixels; fix it and rerun")
        raise RunnerError(f"image dtype is {image.dtype}, expected uint8", where=where,
                          fix="score MLPerf's output bytes: HWC float [0,1] x255, clipped, "
                              "rounded, uint8")
    if image.ndim != 3 or image.shape[2] != 3:
        raise RunnerError(f"image shape is {image.shape}, expected H x W x 3", where=where)
    if size is not None and tuple(image.shape[:2]) != tuple(size):
        raise RunnerError(f"image is {image.shape[0]}x{image.shape[1]}, expected "
                          f"{size[0]}x{size[1]}", where=where,
                          fix="score images from the profile's model (or pass its profile)")


def check_statistics_backbone(reference: FidStatistics, info: BackboneInfo) -> None:
    """Statistics this tool wrote record the Inception they came from; other Inception
    weights give features in another space, so their FID would be meaningless."""
    recorded = reference.meta.get("fid_fingerprint")
    if recorded and recorded != info.fid_fingerprint:
        raise RunnerError(
            f"these statistics were computed with Inception {reference.meta.get('fid_weights')} "
            f"(fingerprint {recorded[:12]}), not the loaded {info.fid_weights} "
            f"({info.fid_fingerprint[:12]})", where=reference.path,
            fix="use the profile's backbones, or recompute the statistics with "
                "`runner calibrate` (a torch whose seeded draws differ also lands here)")


class _Progress:
    def __init__(self, total: int | None, enabled: bool):
        self.total, self.enabled = total, enabled
        self.start = self.last = time.perf_counter()
        self.shown = -1

    def update(self, n: int, final: bool = False) -> None:
        now = time.perf_counter()
        if not self.enabled or n == self.shown or (not final and now - self.last < 2.0):
            return
        self.last, self.shown = now, n
        rate = n / (now - self.start) if now > self.start else 0.0
        of = f"/{self.total}" if self.total else ""
        print(f"accuracy: scored {n}{of} images ({rate:.1f} images/s)", file=sys.stderr,
              flush=True)


def score_samples(samples: Iterable[tuple[int, np.ndarray]], captions: CaptionLookup,
                  settings: ScoreSettings, backbones: Backbones,
                  reference: FidStatistics | None, total: int | None = None
                  ) -> AccuracyResult:
    import torch

    if settings.batch_size < 1:
        raise RunnerError(f"batch size {settings.batch_size}", where="--batch-size",
                          fix="use 1 or more")
    if settings.frechet not in FRECHET:
        raise RunnerError(f"unknown Frechet method {settings.frechet!r}",
                          fix=f"use one of {', '.join(FRECHET)}")
    if reference is not None:
        check_statistics_backbone(reference, backbones.info)
    start = time.perf_counter()
    moments = RunningMoments(FEATURE_DIMS)
    seen: set[int] = set()
    ids: list[int] = []
    clip_scores: list[float] = []
    batch_ids: list[int] = []
    batch_images: list[np.ndarray] = []
    duplicates = 0
    size = settings.image_size
    progress = _Progress(total, settings.progress)

    def flush() -> None:
        if not batch_images:
            return
        texts = [captions[i] for i in batch_ids]
        stacked = np.stack(batch_images)
        with torch.no_grad():
            pixels = images_to_unit_float(stacked).to(backbones.device)
            features = backbones.inception(pixels).double().cpu().numpy()
        if not np.isfinite(features).all():
            bad = [i for i, f in zip(batch_ids, features, strict=True) if not np.isfinite(f).all()]
            raise RunnerError(f"Inception features are not finite for samples {bad[:10]}",
                              fix="check the FID weights file (NaN/Inf weights?)")
        moments.update(features)
        clip_scores.extend(backbones.clip.scores(stacked, texts).tolist())
        ids.extend(batch_ids)
        batch_ids.clear()
        batch_images.clear()
        progress.update(len(ids))

    for qsl_idx, image in samples:
        qsl_idx = int(qsl_idx)
        if qsl_idx in seen:
            duplicates += 1
            continue
        seen.add(qsl_idx)
        check_image(qsl_idx, image, size)
        size = size or tuple(image.shape[:2])
        captions[qsl_idx]  # a caption file too short fails here, before any compute
        batch_ids.append(qsl_idx)
        batch_images.append(image)
        if len(batch_images) == settings.batch_size:
            flush()
    flush()
    progress.update(len(ids), final=True)
    if len(ids) < 2:
        raise RunnerError(f"{len(ids)} image(s) to score; FID needs at least 2",
                          fix="check the run dir holds the run's images")
    seconds = time.perf_counter() - start
    mu, sigma = moments.mean, moments.covariance()
    fid = check = None
    if reference is not None:
        # MLPerf's order: reference statistics first, generated second.
        fid = FRECHET[settings.frechet](reference.mu, reference.sigma, mu, sigma)
        if settings.cross_check:
            other = next(m for m in FRECHET if m != settings.frechet)
            check = FRECHET[other](reference.mu, reference.sigma, mu, sigma)
    return AccuracyResult(
        fid=None if fid is None else fid.value, clip=float(np.mean(clip_scores)), n=len(ids),
        sample_ids=tuple(ids), duplicates=duplicates, clip_per_sample=tuple(clip_scores),
        frechet=fid, frechet_check=check, backbones=backbones.info,
        statistics_path=None if reference is None else reference.path,
        statistics_sha256=None if reference is None else reference.sha256,
        batch_size=settings.batch_size, device=backbones.device,
        seconds=seconds, frechet_seconds=time.perf_counter() - start - seconds, mu=mu,
        sigma=sigma)

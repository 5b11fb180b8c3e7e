"""Streaming FID + CLIP over (qsl_idx, uint8 HWC) samples: MLPerf's numbers in bounded memory.
Either metric may be scored alone (`ScoreSettings.metrics`); the other network is then not run.

Images arrive one at a time and are scored in batches (on a GPU prepared on a loader thread
while the networks run the previous batch); what is kept per sample is one CLIP float (MLPerf
averages the per-sample floats with `np.mean`, so we do too), and the Inception features go
straight into float64 running moments. Duplicate qsl_idx are skipped (the first
wins, as in MLPerf's accuracy script).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np

from runner.accuracy.backbones import BackboneInfo, Backbones
from runner.accuracy.frechet import (
    FRECHET,
    FidStatistics,
    FrechetResult,
    RunningMoments,
)
from runner.accuracy.frechet_cache import FrechetPair
from runner.accuracy.inception import FEATURE_DIMS, images_to_unit_float
from runner.base.errors import BadInput, StepFailed
from runner.base.progress import Progress
from runner.config.profile import METRICS
from runner.rundir.parallel import keep_freed_memory, prefetch


class CaptionLookup(Protocol):
    def __getitem__(self, qsl_idx: int) -> str: ...


@dataclass(frozen=True)
class ScoreSettings:
    batch_size: int = 1  # MLPerf's scripts: 1 (CLIP, and FID's default path)
    frechet: str = "sqrtm"  # the verdict's method: MLPerf's sqrtm, or "eigh"
    cross_check: bool = True  # also compute the other method and record the difference
    image_size: tuple[int, int] | None = None  # expected H, W; None: the first image's
    progress: bool = True
    # Batches prepared ahead on a loader thread; None: 2 on a GPU, 0 on CPU, where the
    # forward passes already use every core and a loader thread only contends with them
    # (measured by scripts/bench_scale.py on a 2-core machine).
    prefetch: int | None = None
    metrics: tuple[str, ...] = METRICS  # MLPerf's two; either alone skips the other network


@dataclass(frozen=True)
class AccuracyResult:
    fid: float | None  # None: FID not scored, or no reference statistics (calibration)
    clip: float | None  # None: CLIP not scored
    n: int
    sample_ids: tuple[int, ...]
    duplicates: int
    clip_per_sample: tuple[float, ...]  # empty when CLIP is not scored
    frechet: FrechetResult | None
    frechet_check: FrechetResult | None
    backbones: BackboneInfo
    statistics_path: str | None
    statistics_sha256: str | None
    batch_size: int
    device: str
    seconds: float  # reading images + both networks
    frechet_seconds: float
    mu: np.ndarray | None = field(repr=False, compare=False)  # None: FID not scored
    sigma: np.ndarray | None = field(repr=False, compare=False)
    frechet_cached: bool = False  # every Fréchet distance came from runner.accuracy.frechet_cache

    @property
    def images_per_second(self) -> float:
        return self.n / self.seconds if self.seconds > 0 else float("inf")

    def files_lines(self) -> list[str]:
        """The scoring files this score read, each as the path it was found at: a lab sees
        which of its caches (or flags) the weights and statistics came from."""
        files = (("FID weights", self.backbones.fid_path),
                 ("CLIP weights", self.backbones.clip_path),
                 ("FID reference statistics", self.statistics_path))
        return [f"read {what}: {path}" for what, path in files if path]


def check_image(qsl_idx: int, image, size: tuple[int, int] | None) -> None:
    where = f"sample {qsl_idx}"
    if not isinstance(image, np.ndarray):
        raise BadInput(f"image is a {type(image).__name__}, not a numpy array", where=where,
                       fix="pass H x W x 3 uint8 numpy arrays")
    if image.dtype != np.uint8:
        if np.issubdtype(image.dtype, np.number) and not np.isfinite(image).all():
            raise BadInput(f"image has NaN/Inf values ({image.dtype})", where=where,
                           fix="the pipeline produced non-finite pixels; fix it and rerun")
        raise BadInput(f"image dtype is {image.dtype}, expected uint8", where=where,
                       fix="score MLPerf's output bytes: HWC float [0,1] x255, clipped, "
                           "rounded, uint8")
    if image.ndim != 3 or image.shape[2] != 3:
        raise BadInput(f"image shape is {image.shape}, expected H x W x 3", where=where,
                       fix="pass RGB images, height x width x 3 channels")
    if size is not None and tuple(image.shape[:2]) != tuple(size):
        raise BadInput(f"image is {image.shape[0]}x{image.shape[1]}, expected "
                       f"{size[0]}x{size[1]}", where=where,
                       fix="score images from the profile's model (or pass its profile)")


def check_statistics_backbone(reference: FidStatistics, info: BackboneInfo) -> None:
    """Statistics this tool wrote record the Inception they came from; other Inception
    weights give features in another space, so their FID would be meaningless."""
    recorded = reference.meta.get("fid_fingerprint")
    if recorded and info.fid_fingerprint and recorded != info.fid_fingerprint:
        raise BadInput(
            f"these statistics were computed with Inception {reference.meta.get('fid_weights')} "
            f"(fingerprint {recorded[:12]}), not the loaded {info.fid_weights} "
            f"({info.fid_fingerprint[:12]})", where=reference.path,
            fix="use the profile's backbones, or recompute the statistics with "
                "`runner calibrate` (a torch whose seeded draws differ also lands here)")


@dataclass
class _Batch:
    """One batch, prepared by the loader thread up to the networks' input tensors."""

    ids: list[int]
    texts: list[str]
    inputs: dict[str, Any]  # each metric's input tensor on the device, by `ScoreMetric.name`


_R = TypeVar("_R", covariant=True)


class ScoreMetric(ABC, Generic[_R]):
    """One score over the samples, fed batch by batch and computed once (the shape of
    torchmetrics' `Metric`), so that `score_samples` is one loop whatever is scored and each
    metric's state and arithmetic live in one place. `prepare` runs on the loader thread,
    ahead of `update`'s forward pass on the scoring thread."""

    name: ClassVar[str]  # its key in ScoreSettings.metrics and in _Batch.inputs

    @abstractmethod
    def prepare(self, images: np.ndarray) -> Any:
        """The network's input for an N x H x W x 3 uint8 stack, on the device."""

    @abstractmethod
    def update(self, batch: _Batch) -> None:
        """Takes in one batch's samples (under torch.no_grad())."""

    @abstractmethod
    def compute(self) -> _R:
        """The score over every sample taken in."""


@dataclass(frozen=True)
class FidScore:
    mu: np.ndarray  # the generated images' Inception statistics
    sigma: np.ndarray
    frechet: FrechetResult | None  # None: no reference statistics (calibration)
    check: FrechetResult | None  # the other method's distance, when cross-checking
    cached: bool  # every Fréchet distance came from runner.accuracy.frechet_cache


class FidMetric(ScoreMetric[FidScore]):
    """Inception features folded into float64 running moments (memory independent of N),
    then the Fréchet distance of those against the reference statistics."""

    name = "fid"

    def __init__(self, backbones: Backbones, reference: FidStatistics | None,
                 settings: ScoreSettings):
        self._backbones = backbones
        self._reference = reference
        self._settings = settings
        self._moments = RunningMoments(FEATURE_DIMS)

    def prepare(self, images: np.ndarray) -> Any:
        pixels = images_to_unit_float(images).to(self._backbones.device)
        return self._backbones.inception.prepare(pixels)

    def update(self, batch: _Batch) -> None:
        features = self._backbones.inception.features(
            batch.inputs[self.name]).double().cpu().numpy()
        if not np.isfinite(features).all():
            bad = [i for i, f in zip(batch.ids, features, strict=True)
                   if not np.isfinite(f).all()]
            raise StepFailed(f"Inception features are not finite for samples "
                             f"{bad[:10]}",
                             fix="check the FID weights file (NaN/Inf weights?)")
        self._moments.update(features)

    def compute(self) -> FidScore:
        mu, sigma = self._moments.mean, self._moments.covariance()
        reference, settings = self._reference, self._settings
        if reference is None:
            return FidScore(mu, sigma, None, None, False)
        others = [m for m in FRECHET if m != settings.frechet]
        methods = [settings.frechet, *others[: int(settings.cross_check)]]
        with Progress("Fréchet distance", len(methods), enabled=settings.progress,
                      eta=False) as step:
            # MLPerf's order: reference statistics first, generated second.
            pair = FrechetPair(reference.mu, reference.sigma, mu, sigma)
            results, cached = [], []
            for method in methods:
                step.start_item(f"{method}, {FEATURE_DIMS}-d")
                result, was_cached = pair.distance(method)
                results.append(result)
                cached.append(was_cached)
                step.advance()
        return FidScore(mu, sigma, results[0], results[1] if len(results) > 1 else None,
                        all(cached))


@dataclass(frozen=True)
class ClipScore:
    mean: float  # MLPerf's number: np.mean of the per-sample floats
    per_sample: tuple[float, ...]


class ClipMetric(ScoreMetric[ClipScore]):
    """One CLIP image-caption score per sample, averaged as MLPerf does."""

    name = "clip"

    def __init__(self, backbones: Backbones):
        self._backbones = backbones
        self._scores: list[float] = []

    def prepare(self, images: np.ndarray) -> Any:
        return self._backbones.clip.pixels(images).to(self._backbones.device)

    def update(self, batch: _Batch) -> None:
        self._scores.extend(self._backbones.clip.scores_of_pixels(batch.inputs[self.name],
                                                                  batch.texts).tolist())

    def compute(self) -> ClipScore:
        return ClipScore(float(np.mean(self._scores)), tuple(self._scores))


class _Batcher:
    """Checks, deduplicates (first wins, as MLPerf) and batches the samples, and runs every
    metric's preprocessing; on the loader thread, ahead of the forward passes. It counts the
    duplicates it skipped, to be read once its batches are consumed."""

    def __init__(self, captions: CaptionLookup, settings: ScoreSettings,
                 metrics: list[ScoreMetric[Any]]):
        self._captions = captions
        self._settings = settings
        self._metrics = metrics
        self.duplicates = 0

    def batches(self, samples: Iterable[tuple[int, np.ndarray]]) -> Iterator[_Batch]:
        seen: set[int] = set()
        size = self._settings.image_size
        ids: list[int] = []
        images: list[np.ndarray] = []
        for qsl_idx, image in samples:
            qsl_idx = int(qsl_idx)
            if qsl_idx in seen:
                self.duplicates += 1
                continue
            seen.add(qsl_idx)
            check_image(qsl_idx, image, size)
            size = size or tuple(image.shape[:2])
            self._captions[qsl_idx]  # a caption file too short fails here, before any compute
            ids.append(qsl_idx)
            images.append(image)
            if len(images) == self._settings.batch_size:
                yield self._prepared(ids, images)
                ids, images = [], []
        if images:
            yield self._prepared(ids, images)

    def _prepared(self, ids: list[int], images: list[np.ndarray]) -> _Batch:
        import torch

        stacked = np.stack(images)
        with torch.no_grad():
            inputs = {metric.name: metric.prepare(stacked) for metric in self._metrics}
        return _Batch(ids, [self._captions[i] for i in ids], inputs)


def reader_jobs(device: str) -> int | None:
    """Threads that read and verify samples while scoring: every core when the networks run
    on a GPU; none besides the scoring thread on CPU, where the forward passes already use
    every core and any thread beside them (readers, a loader) slowed scoring down 1.3-7x on
    a 2-core machine (scripts/bench_scale.py), against ~10 ms of reading and preprocessing
    per 1024x1024 image next to ~175 ms of forward passes."""
    return 1 if device == "cpu" else None


def _check_settings(settings: ScoreSettings, backbones: Backbones,
                    reference: FidStatistics | None) -> None:
    """Fails on settings that cannot score, before any sample is read."""
    if settings.batch_size < 1:
        raise BadInput(f"batch size {settings.batch_size}", where="--batch-size",
                       fix="use 1 or more")
    if settings.frechet not in FRECHET:
        raise BadInput(f"unknown Frechet method {settings.frechet!r}",
                       fix=f"use one of {', '.join(FRECHET)}")
    fid_scored = "fid" in settings.metrics
    clip_scored = "clip" in settings.metrics
    for scored, net, metric in ((fid_scored, backbones.inception, "FID"),
                                (clip_scored, backbones.clip, "CLIP")):
        if scored and net is None:
            raise StepFailed(f"{metric} is to be scored, but its network was not loaded",
                             fix="load the backbones with the metrics to score")
    if reference is not None and fid_scored:
        check_statistics_backbone(reference, backbones.info)


def _feed(batches: Iterable[_Batch], metrics: list[ScoreMetric[Any]], progress: Progress
          ) -> list[int]:
    """Feeds every batch to every metric, on this (the scoring) thread; the ids scored, in
    order."""
    import torch

    ids: list[int] = []
    for batch in batches:
        with torch.no_grad():
            for metric in metrics:
                metric.update(batch)
        ids.extend(batch.ids)
        progress.update(len(ids))
    progress.finish()
    return ids


def score_samples(samples: Iterable[tuple[int, np.ndarray]], captions: CaptionLookup,
                  settings: ScoreSettings, backbones: Backbones,
                  reference: FidStatistics | None, total: int | None = None
                  ) -> AccuracyResult:
    """On a GPU, reading, decoding, checking and preprocessing run on a loader thread (and
    the sample store's reader threads) a bounded number of batches ahead, so the forward
    passes never wait for them; memory holds a few batches whatever N is."""
    _check_settings(settings, backbones, reference)
    fid_scored = "fid" in settings.metrics
    fid = FidMetric(backbones, reference, settings) if fid_scored else None
    clip = ClipMetric(backbones) if "clip" in settings.metrics else None
    metrics: list[ScoreMetric[Any]] = [m for m in (fid, clip) if m is not None]
    # A 1024x1024 image passes through 12 MB float tensors; fresh mmap()s for each cost
    # page faults worth ~10% of the forward passes on CPU (see keep_freed_memory).
    keep_freed_memory()
    start = time.perf_counter()
    depth = settings.prefetch if settings.prefetch is not None else (
        0 if backbones.device == "cpu" else 2)  # see reader_jobs
    progress = Progress("scoring", total, unit="images", enabled=settings.progress)
    batcher = _Batcher(captions, settings, metrics)
    ids = _feed(prefetch(batcher.batches(samples), depth), metrics, progress)
    if len(ids) < (2 if fid_scored else 1):
        raise BadInput(f"{len(ids)} image(s) to score"
                       + ("; FID needs at least 2" if fid_scored else ""),
                       fix="check the run dir holds the run's images")
    seconds = time.perf_counter() - start
    fid_score = None if fid is None else fid.compute()
    clip_score = None if clip is None else clip.compute()
    frechet = None if fid_score is None else fid_score.frechet
    return AccuracyResult(
        fid=None if frechet is None else frechet.value,
        clip=None if clip_score is None else clip_score.mean, n=len(ids),
        sample_ids=tuple(ids), duplicates=batcher.duplicates,
        clip_per_sample=() if clip_score is None else clip_score.per_sample,
        frechet=frechet, frechet_check=None if fid_score is None else fid_score.check,
        backbones=backbones.info,
        statistics_path=None if reference is None else reference.path,
        statistics_sha256=None if reference is None else reference.sha256,
        batch_size=settings.batch_size, device=backbones.device,
        seconds=seconds, frechet_seconds=time.perf_counter() - start - seconds,
        mu=None if fid_score is None else fid_score.mu,
        sigma=None if fid_score is None else fid_score.sigma,
        frechet_cached=fid_score is not None and fid_score.cached)

"""`runner aggregate`: every worker's samples -> one dataset, whatever the layout.

Writes the MLPerf accuracy log (streaming), `dataset.json` (per-sample sha256, worker,
device, verified against the pixels) and the review PNGs for MLPerf's sample ids.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from runner.base.errors import BadInput, StepFailed
from runner.base.fileio import atomic_write_json
from runner.base.progress import Progress
from runner.config.mlperf_data import load_review_ids
from runner.rundir.directory import RunDir
from runner.rundir.mlperf_log import LOG_NAME, PositionalLog
from runner.rundir.parallel import keep_freed_memory
from runner.rundir.store import (
    CORRUPT_DIR,
    CorruptSample,
    Loaded,
    SampleStore,
    failures_error,
)

DATASET = "dataset.json"
REVIEW_DIR = "review"


@dataclass(frozen=True)
class AggregateResult:
    log: str
    samples: int
    log_bytes: int
    raw_bytes: int
    seconds: float
    review: list[str]
    direct_io: bool  # the log's whole blocks bypassed the page cache (`PositionalLog`)

    @property
    def mb_per_s(self) -> float:
        return self.raw_bytes / 1e6 / max(self.seconds, 1e-9)


def samples_to_aggregate(run_dir: Path, allow_incomplete: bool = False,
                         sample_ids: Iterable[int] | None = None
                         ) -> tuple[list[int], list[int], dict]:
    """The samples a log will hold, the missing ones and the failed ones, checked before
    any is read: every requested one is there (unless `allow_incomplete`) and none failed.
    `sample_ids` defaults to the run manifest's."""
    store = SampleStore(run_dir)
    requested = sorted(RunDir(run_dir).load().sample_ids if sample_ids is None
                       else sample_ids)
    missing = sorted(set(requested) - store.done_ids())
    failed = store.failures(missing)
    if failed and not allow_incomplete:
        raise failures_error(failed, len(requested), str(run_dir), "no dataset is written")
    if missing and not allow_incomplete:
        raise StepFailed(f"{len(missing)} of {len(requested)} samples are missing "
                         f"(first: {missing[:5]})", where=str(run_dir),
                         fix=f"`runner run --resume {run_dir}` completes them")
    return sorted(set(requested) - set(missing)), missing, failed


def aggregate_plan(run_dir: Path, allow_incomplete: bool = False) -> list[str]:
    """What `runner aggregate --dry-run` prints: the inputs checked as the real aggregation
    checks them, then the files it would write."""
    present, _, _ = samples_to_aggregate(run_dir, allow_incomplete)
    review = [i for i in load_review_ids() if i in set(present)]
    return [f"# runner aggregate: {len(present)} samples of {run_dir} (each read and its "
            "sha256 verified when aggregated)",
            f"# would write {run_dir / LOG_NAME}, {run_dir / DATASET} and {len(review)} "
            f"review image(s) into {run_dir / REVIEW_DIR}/"]


def _write_log(run_dir: Path, store: SampleStore, present: list[int], jobs: int | None,
               progress: bool) -> tuple[list[dict], PositionalLog, int]:
    """The accuracy log of the samples, each read and written in its place on the reading
    threads (all of one image size, which one log holds); each sample's dataset.json
    record in the order of `present`, the closed log, and a sample's size in bytes."""
    records: list[dict] = []
    shape = store.read(present[0]).image.shape if present else (0,)
    size = int(np.prod(shape))
    with PositionalLog(run_dir / LOG_NAME, present, size) as log:

        def write(loaded: Loaded) -> dict:
            if loaded.image.shape != shape:
                qsl_idx = loaded.record.qsl_idx
                raise BadInput(
                    f"sample {qsl_idx} is {_dims(loaded.image.shape)} but sample "
                    f"{present[0]} is {_dims(shape)}: one accuracy log holds one image "
                    "size", where=str(store.path(qsl_idx)),
                    fix="aggregate the samples of one profile only")
            log.write(loaded.record.qsl_idx, loaded.image)
            return loaded.record.to_dict()

        with Progress("aggregate", len(present), unit="samples",
                      enabled=progress) as shown:
            for _, record in store.iter_mapped(present, write, jobs):
                records.append(record)
                shown.update(len(records))
    return records, log, size


def _copy_review_images(run_dir: Path, store: SampleStore, present: list[int]) -> list[str]:
    """The review samples among those aggregated, copied as PNGs into the run's review
    dir (for a person to look at); their file names."""
    review, aggregated = [], set(present)
    for qsl_idx in load_review_ids():
        if qsl_idx in aggregated:
            target = run_dir / REVIEW_DIR / f"{qsl_idx:05d}.png"
            target.parent.mkdir(exist_ok=True)
            shutil.copyfile(store.path(qsl_idx), target)
            review.append(target.name)
    return review


def aggregate(run_dir: Path, allow_incomplete: bool = False, jobs: int | None = None,
              sample_ids: Iterable[int] | None = None, progress: bool = True
              ) -> AggregateResult:
    """Each of `jobs` threads (default: every core) reads, decodes, verifies (sha256) and
    hex-encodes a sample and hands its record to the log's writer thread, which puts it in
    its place (`PositionalLog`) while the reading threads go on; a bounded window ahead of
    the thread collecting dataset.json's records. So the log's bytes are the same whatever
    `jobs` is. A corrupt sample stops it with the file moved aside (see
    `SampleStore.read`) and no log written. `sample_ids` defaults to the run manifest's."""
    keep_freed_memory()
    store = SampleStore(run_dir)
    present, missing, failed = samples_to_aggregate(run_dir, allow_incomplete, sample_ids)
    start = time.perf_counter()
    try:
        records, log, size = _write_log(run_dir, store, present, jobs, progress)
        stats = log.stats()
    except CorruptSample as first:
        # Find (and move aside) every other bad file now, so one resume fixes them all.
        bad = sorted(set(present) - store.verified_ids(present, report=lambda _: None))
        raise StepFailed(
            f"{len(bad)} corrupt sample(s) (qsl_idx {bad[:20]}) moved aside to "
            f"{store.dir / CORRUPT_DIR}; no accuracy log written. First: sample "
            f"{first.qsl_idx} is corrupt ({first.reason}), kept as {first.moved_to}",
            where=str(store.dir),
            fix=f"`runner run --resume {run_dir}` regenerates them, then aggregate again"
        ) from first
    seconds = time.perf_counter() - start
    result = AggregateResult(str(run_dir / LOG_NAME), stats.records, stats.bytes,
                             size * len(present), seconds,
                             _copy_review_images(run_dir, store, present), log.direct)
    atomic_write_json(run_dir / DATASET, {"samples": records, "missing": missing,
                                          "failed": [f.to_dict() for f in failed.values()],
                                          "aggregate": asdict(result)})
    return result


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))

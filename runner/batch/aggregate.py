"""`runner aggregate`: every worker's samples -> one dataset, whatever the layout.

Writes the MLPerf accuracy log (streaming), `dataset.json` (per-sample sha256, worker,
device, verified against the pixels) and the review PNGs for MLPerf's sample ids.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from runner.errors import RunnerError
from runner.fileio import atomic_write_json
from runner.mlperf_data import load_review_ids
from runner.mlperf_log import LOG_NAME, Buffer, hex_upper, write_hex_log
from runner.parallel import keep_freed_memory
from runner.rundir import RunDir
from runner.store import CORRUPT_DIR, CorruptSample, Loaded, SampleStore

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

    @property
    def mb_per_s(self) -> float:
        return self.raw_bytes / 1e6 / max(self.seconds, 1e-9)


def aggregate(run_dir: Path, allow_incomplete: bool = False, jobs: int | None = None,
              sample_ids: Iterable[int] | None = None) -> AggregateResult:
    """Decoding, sha256 verification and hex encoding run on `jobs` threads (default: every
    core) a bounded window ahead of the one thread writing the log in qsl_idx order, so the
    log's bytes are the same whatever `jobs` is. A corrupt sample stops it with the file
    moved aside (see `SampleStore.read`) and no log written. `sample_ids` defaults to the
    run manifest's."""
    keep_freed_memory()
    store = SampleStore(run_dir)
    requested = sorted(RunDir(run_dir).load().sample_ids if sample_ids is None
                       else sample_ids)
    missing = sorted(set(requested) - store.done_ids())
    if missing and not allow_incomplete:
        raise RunnerError(f"{len(missing)} of {len(requested)} samples are missing "
                          f"(first: {missing[:5]})", where=str(run_dir),
                          fix=f"`runner run --resume {run_dir}` completes them")
    present = [i for i in requested if i not in set(missing)]
    records, raw_bytes = [], 0

    def encoded(loaded: Loaded) -> tuple[dict, Buffer, int]:
        return loaded.record.to_dict(), hex_upper(loaded.image), loaded.image.nbytes

    def log_records() -> Iterator[tuple[int, Buffer, int]]:
        nonlocal raw_bytes
        for qsl_idx, (record, data, size) in store.iter_mapped(present, encoded, jobs):
            records.append(record)
            raw_bytes += size
            yield qsl_idx, data, size

    start = time.perf_counter()
    try:
        stats = write_hex_log(run_dir / LOG_NAME, log_records())
    except CorruptSample as first:
        # Find (and move aside) every other bad file now, so one resume fixes them all.
        bad = sorted(set(present) - store.verified_ids(present, report=lambda _: None))
        raise RunnerError(
            f"{len(bad)} corrupt sample(s) (qsl_idx {bad[:20]}) moved aside to "
            f"{store.dir / CORRUPT_DIR}; no accuracy log written. First: sample "
            f"{first.qsl_idx} is corrupt ({first.reason}), kept as {first.moved_to}",
            where=str(store.dir),
            fix=f"`runner run --resume {run_dir}` regenerates them, then aggregate again"
        ) from first
    seconds = time.perf_counter() - start
    review = []
    for qsl_idx in load_review_ids():
        if qsl_idx in set(present):
            target = run_dir / REVIEW_DIR / f"{qsl_idx:05d}.png"
            target.parent.mkdir(exist_ok=True)
            shutil.copyfile(store.path(qsl_idx), target)
            review.append(target.name)
    result = AggregateResult(str(run_dir / LOG_NAME), stats.records, stats.bytes, raw_bytes,
                             seconds, review)
    atomic_write_json(run_dir / DATASET, {"samples": records, "missing": missing,
                                          "aggregate": asdict(result)})
    return result

"""`runner aggregate`: every worker's samples -> one dataset, whatever the layout.

Writes the MLPerf accuracy log (streaming), `dataset.json` (per-sample sha256, worker,
device, verified against the pixels) and the review PNGs for MLPerf's sample ids.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from runner.batch.run import read_manifest
from runner.errors import RunnerError
from runner.fileio import atomic_write_json
from runner.mlperf_data import load_review_ids
from runner.mlperf_log import LOG_NAME, write_log
from runner.store import SampleStore

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


def aggregate(run_dir: Path, allow_incomplete: bool = False) -> AggregateResult:
    manifest = read_manifest(run_dir)
    store = SampleStore(run_dir)
    requested = sorted(manifest["sample_ids"])
    missing = sorted(set(requested) - store.done_ids())
    if missing and not allow_incomplete:
        raise RunnerError(f"{len(missing)} of {len(requested)} samples are missing "
                          f"(first: {missing[:5]})", where=str(run_dir),
                          fix=f"`runner run --resume {run_dir}` completes them")
    present = [i for i in requested if i not in set(missing)]
    records, raw_bytes = [], 0

    def samples() -> Iterator[tuple[int, np.ndarray]]:
        nonlocal raw_bytes
        for qsl_idx, image in store.iter_samples(present):  # verifies each sha256
            record = store.record(qsl_idx)
            if record.qsl_idx != qsl_idx:
                raise RunnerError(f"file says sample {record.qsl_idx}",
                                  where=str(store.path(qsl_idx)))
            records.append(record.to_dict())
            raw_bytes += image.nbytes
            yield qsl_idx, image

    start = time.perf_counter()
    stats = write_log(run_dir / LOG_NAME, samples())
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

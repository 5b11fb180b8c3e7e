"""Free space for what a run writes: its samples (PNGs stored without compression, so the
raw RGB bytes), the MLPerf accuracy log the aggregation writes beside them (the same bytes
in hex, twice as many) with the review images it copies out, and the workers' logs. A disk
that fills at the aggregation stops a run of hours at its end; one that fills under the
workers stops it half-way."""

from __future__ import annotations

import shutil
from pathlib import Path

from runner.config.layout import Plan
from runner.config.mlperf_data import load_review_ids
from runner.config.profile import Profile
from runner.preflight.check import CheckState, PreflightCheck

HEX_FACTOR = 2  # the accuracy log holds each image's bytes as hex
RUN_FILES_BYTES = 1 << 20  # run.json, the queue, dataset.json, the reports
WORKER_LOG_BYTES = 1 << 20  # a worker's log over a whole run
GB = 1e9


def image_bytes(profile: Profile) -> int:
    """One image's RGB bytes: a stored sample's size, and half its accuracy log record."""
    size = profile.model.image_size
    return size * size * 3


def existing(path: Path) -> Path:
    """The nearest directory that exists: where a run dir not made yet will be made."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def disk_check(run_dir: Path, profile: Profile, plan: Plan, samples: int, logged: int
               ) -> PreflightCheck:
    """`samples` still to store, `logged` in the MLPerf log the aggregation writes (a
    resume stores only the missing ones, and logs them all)."""
    raw = image_bytes(profile)
    review = min(logged, len(load_review_ids()))  # copied out of the store by aggregate
    need = ((samples + HEX_FACTOR * logged + review) * raw + RUN_FILES_BYTES
            + WORKER_LOG_BYTES * len(plan.workers))
    where = existing(run_dir)
    free = shutil.disk_usage(where).free
    size = f"{profile.model.image_size}x{profile.model.image_size}"
    detail = (f"{need / GB:.2f} GB needed for {samples} sample(s) of {size}, an MLPerf log "
              f"of {logged} and logs; {free / GB:.2f} GB free")
    if free < need:
        return PreflightCheck("disk", CheckState.FAILED, detail, str(where),
                              f"free {(need - free) / GB:.2f} GB there, or choose another "
                              "--out")
    return PreflightCheck("disk", CheckState.OK, detail, str(where))

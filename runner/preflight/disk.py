"""Free space for what a run writes: its samples (PNGs stored without compression, so the
raw RGB bytes), the MLPerf accuracy log the aggregation writes beside them (the same bytes
in hex, twice as many), and the workers' logs. A disk that fills at the aggregation stops a
run of hours at its end; one that fills under the workers stops it half-way."""

from __future__ import annotations

import shutil
from pathlib import Path

from runner.config.layout import Plan
from runner.config.profile import Profile
from runner.preflight.check import CheckState, PreflightCheck

HEX_FACTOR = 2  # the accuracy log holds each image's bytes as hex
LOG_BYTES = 64 << 20  # the driver's and status files, the review images
WORKER_LOG_BYTES = 1 << 20  # a worker's log over a whole run
GB = 1e9


def sample_bytes(profile: Profile) -> int:
    """One stored sample plus its record in the accuracy log."""
    size = profile.model.image_size
    raw = size * size * 3
    return raw * (1 + HEX_FACTOR)


def existing(path: Path) -> Path:
    """The nearest directory that exists: where a run dir not made yet will be made."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def disk_check(run_dir: Path, profile: Profile, plan: Plan, samples: int) -> PreflightCheck:
    need = samples * sample_bytes(profile) + LOG_BYTES + WORKER_LOG_BYTES * len(plan.workers)
    where = existing(run_dir)
    free = shutil.disk_usage(where).free
    detail = (f"{need / GB:.2f} GB needed for {samples} sample(s) of "
              f"{profile.model.image_size}x{profile.model.image_size}, their MLPerf log and "
              f"logs; {free / GB:.2f} GB free")
    if free < need:
        return PreflightCheck("disk", CheckState.FAILED, detail, str(where),
                              f"free {(need - free) / GB:.2f} GB there, or choose another "
                              "--out")
    return PreflightCheck("disk", CheckState.OK, detail, str(where))

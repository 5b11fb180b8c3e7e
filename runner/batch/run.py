"""Pieces of a batch run that every driver shares: sample ids, progress, reproduce.sh.

The run's lifecycle (plan -> compile -> queue -> workers -> aggregate -> score -> report,
and resume) is runner/lifecycle.py; the run dir's layout and manifest are runner/rundir/directory.py
and runner/rundir/manifest.py; executors are runner/batch/executors.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.base.errors import BadInput
from runner.base.fileio import atomic_write_text
from runner.batch.reproduce import reproduce_script
from runner.config.layout import LayoutSpec, Plan, plan_workers
from runner.config.mlperf_data import CAPTIONS_FILE, load_captions
from runner.config.profile import Profile, profile_from_raw
from runner.rundir.directory import REPRODUCE
from runner.rundir.manifest import RunManifest
from runner.rundir.store import SampleFailure

LOG_TAIL_LINES = 20



@dataclass
class RunOutcome:
    run_dir: Path
    requested: int
    done: int
    seconds: float
    deaths: list[dict[str, Any]] = field(default_factory=list)
    # Samples the pipeline could not make (qsl_idx -> record): their decoder's output was
    # not finite. They count as not done.
    failed: dict[int, SampleFailure] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return self.done == self.requested


def validate_ids(ids: list[int], where: str, captions_path: Path | None = None) -> list[int]:
    if not ids:
        raise BadInput("no samples requested", where=where, fix="use --count N or --ids FILE")
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise BadInput(f"sample {dup} is requested twice", where=where,
                       fix="list each sample id once")
    captions = load_captions(captions_path or CAPTIONS_FILE)
    bad = [i for i in ids if not 0 <= i < len(captions)]
    if bad:
        raise BadInput(f"sample ids {bad[:5]} are outside the captions file "
                       f"{captions.path} (0..{len(captions) - 1})", where=where,
                       fix=f"use ids from 0 to {len(captions) - 1}")
    return sorted(ids)


def read_ids_file(path: Path, where: str = "--ids") -> list[int]:
    """The sample ids of an `--ids FILE`: whole numbers, whitespace-separated; a bad one
    is named with its line."""
    from runner.inputs.paths import no_such_path

    if not path.exists():
        raise no_such_path(path, where, what="ids file")
    if path.is_dir():
        raise BadInput(f"{path} is a directory, not an ids file", where=where,
                       fix="give a file of sample ids, whitespace-separated, e.g. `0 1 2`")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise BadInput(f"cannot read the ids file: {e.strerror or e}", where=f"{where} {path}",
                       fix="check that the file is readable") from e
    ids = []
    for number, line in enumerate(text.splitlines(), 1):
        for token in line.split():
            if not token.isascii() or not token.isdigit() or len(token) > 18:
                raise BadInput(f"{token[:40]!r} is not a sample id (a whole number, MLPerf's "
                               "qsl_idx)", where=f"{where} {path}: line {number}",
                               fix="write sample ids as whole numbers, whitespace-separated, "
                               "e.g. `0 1 2` or one per line")
            ids.append(int(token))
    return ids


def log_tail(path: Path) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
    except OSError:
        return "(no log)"


def write_reproduce(run_dir: Path, manifest: RunManifest) -> Path:
    text = reproduce_script(
        run_dir.resolve().name, argv=manifest.argv, profile=manifest.profile,
        samples=len(manifest.sample_ids), iree_version=manifest.iree_version,
        image=manifest.image, slurm_jobs=(manifest.slurm or {}).get("jobs", []),
        worker_commands=list(manifest.worker_commands.values()), cwd=manifest.cwd)
    path = run_dir / REPRODUCE
    atomic_write_text(path, text)
    path.chmod(0o755)
    return path


def recorded_profile(profile_config: dict[str, Any], profile_path: str,
                     layout: dict[str, Any], where: str) -> Profile:
    """The profile and layout a run was made with, from its manifest's fields."""
    profile = profile_from_raw(profile_config, Path(profile_path))
    spec = LayoutSpec.from_dict(layout, profile.target.backend, where)
    return dataclasses.replace(profile, layout=spec)


def plan_for(profile: Profile) -> Plan:
    return plan_workers(profile.layout, where=str(profile.path))

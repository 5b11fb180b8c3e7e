"""The run manifest (`run.json`) as typed dataclasses.

Every module that needs something from a run's record reads a field of `RunManifest`
instead of indexing a dict by string, so a renamed or missing field is one place to fix and
a type checker sees it. The JSON shape is unchanged from the dict it replaces (reports,
`runner status` and older runs read it); keys this version does not know are kept in
`extra` and written back untouched, so a newer runner's fields survive an older resume.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from runner.base.errors import BadInput
from runner.base.steps import StepStatus


def now_text() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


@dataclass
class Attempt:
    """One driver's go at a run: a new run, or one `--resume`. Its status is written
    `running` when it starts, so a driver killed with SIGKILL leaves it behind; the next
    driver (holding the lock) settles it as `interrupted` (runner/base/steps.py)."""

    status: StepStatus = StepStatus.RUNNING
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    started_at: str = field(default_factory=now_text)
    finished_at: str | None = None
    seconds: float | None = None
    deaths: list[dict[str, Any]] = field(default_factory=list)
    executor: str = ""
    error: str | None = None  # why an attempt failed (a full disk)
    # what else the machine did while its workers ran (runner.base.conditions)
    conditions: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Attempt:
        # Runs made before attempts were recorded at start have no status: they finished.
        # An older runner's `killed` reads as `interrupted`, and is written so from then on.
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in raw.items() if k in known}
        values["status"] = StepStatus.read(raw.get("status", StepStatus.FINISHED))
        values.setdefault("host", "?")
        values.setdefault("pid", 0)
        values.setdefault("started_at", raw.get("finished_at") or "?")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Fields not known (a killed attempt's end and duration) are left out, not null."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass
class RunManifest:
    """What a run is (profile, layout, samples, modules, provenance) and where it stands."""

    argv: list[str]
    profile: str
    profile_path: str
    profile_config: dict[str, Any]
    layout: dict[str, Any]
    plan: dict[str, Any]
    sample_ids: list[int]
    captions: str
    compiled: dict[str, Any]
    host: dict[str, Any]
    iree: dict[str, Any]
    executor: str
    image: dict[str, Any] | None = None
    kind: str = "run"
    status: str = "running"  # running | incomplete | complete
    score: bool = True  # whether the run ends with FID/CLIP (False: made with --no-score)
    started_at: str = field(default_factory=now_text)
    attempts: list[Attempt] = field(default_factory=list)
    workers: dict[str, Any] = field(default_factory=dict)
    worker_commands: dict[str, str] = field(default_factory=dict)
    missing: list[int] = field(default_factory=list)
    unexpected: list[int] = field(default_factory=list)
    # Samples the pipeline could not make, as their failure records (runner.rundir.store):
    # also in `missing`, but no resume of the same model will make them.
    failed: list[dict[str, Any]] = field(default_factory=list)
    # The model the run's modules are: name, source, precisions (`dtype`, `vae_dtype`),
    # what reports and the MLPerf system description show.
    model: dict[str, Any] = field(default_factory=dict)
    slurm: dict[str, Any] | None = None
    cwd: str = ""  # where the driver ran: `argv`'s relative paths (--ids FILE) are from here
    # What was checked before the first batch (runner/preflight): one record per check.
    preflight: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str) -> RunManifest:
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        values = {k: v for k, v in raw.items() if k in names}
        values["attempts"] = [Attempt.from_dict(a) for a in raw.get("attempts", [])]
        try:
            return cls(**values, extra={k: v for k, v in raw.items() if k not in names})
        except TypeError as e:  # a required field is missing
            raise BadInput(f"run manifest lacks a field: {e}", where=where,
                           fix="this is not a run.json this runner wrote; start a new "
                           "--out") from e

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("extra", "attempts")}
        out["attempts"] = [a.to_dict() for a in self.attempts]
        return {**self.extra, **out}

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def compiled_keys(self) -> list[str]:
        return [c["key"] for c in self.compiled["compiled"]]

    @property
    def iree_version(self) -> str:
        return str(self.iree.get("iree.runtime", {}).get("version", "?"))

    @property
    def image_ref(self) -> str | None:
        return (self.image or {}).get("ref")

    @property
    def slurm_options(self) -> dict[str, Any]:
        return (self.slurm or {}).get("options", {})

    def last_attempt_seconds(self) -> float:
        finished = [a.seconds for a in self.attempts if a.seconds is not None]
        return finished[-1] if finished else 0.0

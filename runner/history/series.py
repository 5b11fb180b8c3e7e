"""Results as series: one metric of one subject, on one machine, device and layout (a
batch size changes a stage's time), for one profile and command, ordered by when each
result finished. A series is what a chart draws and what
change points are found in; its points carry the build each result measured."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime

from runner.history.model import Metric, Result


@dataclass(frozen=True)
class Point:
    when: datetime
    value: float
    result: Result
    metric: Metric

    @property
    def build(self) -> str:
        """The IREE build this point measured, as the history shows it."""
        return self.result.build or self.result.iree


@dataclass(frozen=True)
class Series:
    command: str
    profile: str
    machine: str
    device: str
    layout: str
    sku: str
    metric: str
    subject: str
    points: tuple[Point, ...]

    @property
    def label(self) -> str:
        """`run cpu on vm (cpu:host): stage_ms unet`."""
        where = self.machine + (f" ({self.device})" if self.device else "") + (
            f" [{self.layout}]" if self.layout else "")
        what = self.metric + (f" {self.subject}" if self.subject else "")
        sku = f" sku {self.sku}" if self.sku else ""
        return f"{self.command} {self.profile}{sku} on {where}: {what}".replace("  ", " ")

    @property
    def unit(self) -> str:
        return self.points[0].metric.unit if self.points else ""

    def key(self) -> dict[str, str]:
        return {"command": self.command, "profile": self.profile, "machine": self.machine,
                "device": self.device, "layout": self.layout, "sku": self.sku,
                "metric": self.metric, "subject": self.subject}


def series_key(key: dict[str, str]) -> str:
    """A series' identity (`Series.key()`) as one indexed column of the store."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def series_of(results: list[Result]) -> list[Series]:
    """Every series in `results` (oldest first within each), in a stable order."""
    groups: dict[tuple[str, ...], list[Point]] = {}
    for r in results:
        for m in r.metrics:
            key = (r.command, r.profile, r.machine, r.device, r.layout, r.sku, m.name,
                   m.subject)
            groups.setdefault(key, []).append(Point(r.finished_at, m.value, r, m))
    return [Series(command, profile, machine, device, layout, sku, metric, subject,
                   tuple(sorted(points, key=lambda p: (p.when, p.result.key))))
            for (command, profile, machine, device, layout, sku, metric, subject), points
            in sorted(groups.items())]

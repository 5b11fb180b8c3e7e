"""A new build's first night: measured against the build this machine measured before it,
interleaved, that very night.

The history needs several nights on each side of a step before it can tell a 10% change
from a shared machine's night-to-night spread, which on a small VM is wider than that. The
A/B does not wait: on the night the build changes, the previous build and the new one run
the night's bench goldens tests in turn (good, bad, bad, good, ...; `runner history
confirm`'s machinery, runner.history.confirm, every series judged from the same rounds),
and each series' finding is stored as a confirmation. One that holds is a regression of
the new build on its first night (the night bisects it as any confirmed regression); one
that does not hold, or stays undecided, ends the night as before.
"""

from __future__ import annotations

import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.base.errors import RunnerError
from runner.base.fileio import atomic_write_json, atomic_write_text
from runner.history.changes import MIN_CHANGE, build_spec
from runner.history.judge import CONFIRMABLE
from runner.history.series import Point, Series

AB_DIR = "ab"  # under the night's dir: confirm.json, confirm.md, rounds/
COMMAND = "bench goldens"


@dataclass(frozen=True)
class ABPlan:
    """The build the new one is measured against, and the series the night's rounds judge."""

    good: str  # the previous build's spec, as pip installs it
    series: tuple[Series, ...]


def _tonight(point: Point, night: Path | None) -> bool:
    return night is not None and Path(point.result.out_dir).parent == night


def previous_build(series: Series, build: str, night: Path | None) -> str | None:
    """The spec of the build this machine measured last in the series before tonight, where
    it is another build than tonight's and can be installed again from an index."""
    before = [p for p in series.points if not _tonight(p, night)]
    spec = build_spec(before[-1]) if before else None
    if spec is None or "--repo" in spec[1] or spec[0] == build:
        return None
    return spec[0]


def ab_plan(req: Any, night: Path | None) -> ABPlan | None:
    """The A/B tonight calls for, or None: this machine's bench goldens time series of the
    profile (those `runner history confirm` measures), each measured tonight (`night`; None
    in a dry run, before anything is), whose last build before it is another one. The
    store is read as it is (a dry run's store is not upgraded); one that cannot be read
    calls for none."""
    from runner.history.series import series_of
    from runner.history.store import Query, open_store
    from runner.history.url import resolve

    url = resolve(req.results)
    if url.path is not None and not url.path.is_file():
        return None
    try:
        with open_store(url, upgrade=False) as store:
            results = store.query(Query(command=COMMAND, machine=socket.gethostname(),
                                        metrics=CONFIRMABLE[COMMAND]))
    except (RunnerError, ImportError) as e:
        print(f"nightly: no A/B: the history could not be read ({str(e).splitlines()[0]})",
              file=sys.stderr)
        return None
    mine = [r for r in results if r.profile in (req.profile, "")]
    chosen: dict[str, list[Series]] = {}
    for s in series_of(mine):
        measured = night is None or any(_tonight(p, night) for p in s.points)
        good = previous_build(s, req.build.spec, night) if measured else None
        if good is not None:
            chosen.setdefault(good, []).append(s)
    if not chosen:
        return None
    good = max(chosen, key=lambda g: len(chosen[g]))  # one previous build: the last night's
    return ABPlan(good, tuple(chosen[good]))


def request(req: Any, ab: ABPlan, out: Path):
    """`runner history confirm`'s request for the A/B: the night's package sources and
    rounds, every series' subject."""
    from runner.bisect.builds import parse_build
    from runner.history.confirm import ConfirmRequest

    first = ab.series[0]
    return ConfirmRequest(parse_build(ab.good, req.sources, "--iree"), req.build, COMMAND,
                          first.metric, "*", first.profile or None, first.sku, req.rounds,
                          MIN_CHANGE, out, req.sources, req.max_rounds)


def measure_ab(req: Any, ab: ABPlan, out: Path) -> dict[str, Any]:
    """The A/B measured and each series' confirmation stored: what the night keeps of it."""
    from runner.history.confirm import CONFIRM_JSON, CONFIRM_MD, confirm_all, confirmation_summary
    from runner.history.store import opened
    from runner.history.url import resolve

    if out.exists():  # a night killed during its A/B measures it again from the start
        shutil.rmtree(out)
    found = confirm_all(request(req, ab, out), list(ab.series))
    with opened(resolve(req.results)) as store:
        for c in found:
            store.add_confirmation(c)
    lines = [confirmation_summary(c, s) for c, s in zip(found, ab.series, strict=True)]
    atomic_write_json(out / CONFIRM_JSON, [c.to_dict() for c in found])
    atomic_write_text(out / CONFIRM_MD, "".join(lines))
    return {"good": ab.good, "bad": req.build.spec, "out": str(out),
            "series": [{"label": s.label, "subject": s.subject, "holds": c.holds,
                        "line": line.strip(), **c.details["verdict"]}
                       for c, s, line in zip(found, ab.series, lines, strict=True)]}


def ab_dry_run_lines(req: Any, out: Path) -> list[str]:
    """What the night's A/B would run, as far as the store tells before the night."""
    from runner.history.confirm import confirm_dry_run

    ab = ab_plan(req, None)
    if ab is None:
        return ["# no A/B: this machine's last bench goldens build in the store is tonight's, "
                "or none"]
    return confirm_dry_run(request(req, ab, out), list(ab.series), req.results or "the store")

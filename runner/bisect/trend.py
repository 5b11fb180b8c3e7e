"""`runner trend`: the same steps over every build of a list or range, no bisection.

Each build is measured in full (two timed generate passes, the compile statistics, FID
and CLIP when the profile has ranges) and judged against the first build with `--test`;
the points where the image bytes changed from the build before are marked, and each
build's dispatch profile is compared with the one before it (which dispatches moved, which
were added or removed: runner.bench.dispatch_diff). IREE's own dashboards track single
modules; this tracks the SDXL pipeline across builds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from runner.base.outcome import Outcome
from runner.base.progress import echo
from runner.bench.dispatch_diff import compare_stages
from runner.bisect.builds import Build
from runner.bisect.judge import sample_digests
from runner.bisect.ledger import Ledger
from runner.bisect.measure import (
    MeasurePlan,
    build_dry_run_lines,
    dispatch_note,
    dispatch_profiles,
)
from runner.bisect.preflight import check_machine
from runner.bisect.search import Stepper

TREND_STATE = "trend.json"


@dataclass(frozen=True)
class TrendRequest:
    builds: list[Build]
    plan: MeasurePlan
    argv: list[str]
    inputs: dict[str, Any]
    dry_run: bool = False


def _digests(m: dict[str, Any]) -> dict[int, str] | None:
    from pathlib import Path

    if not (m.get("probe", {}).get("run")):
        return None
    return sample_digests(Path(m["dir"]))


def point(step: dict[str, Any], previous: dict[int, str] | None) -> dict[str, Any]:
    """One build's row of the trend: every number a chart draws."""
    m = step["measurement"]
    probe = m.get("probe") or {}
    compile_ = probe.get("compile") or {}
    run = probe.get("run") or {}
    score = m.get("score") or {}
    rates = run.get("samples_per_s") or []
    digests = _digests(m)
    return {
        "build": step["build"], "label": step["label"], "verdict": step["verdict"]["state"],
        "metric": step["verdict"]["metric"], "seconds": step["seconds"],
        "fid": score.get("fid"), "clip": score.get("clip"),
        "score_from": score.get("same_images_as"),
        "samples_per_s": sum(rates) / len(rates) if rates else None,
        "samples_per_s_passes": rates,
        "compile_s": compile_.get("seconds"), "dispatch_count": compile_.get("dispatch_count"),
        "vmfb_bytes": compile_.get("vmfb_bytes"),
        "images_changed": (None if digests is None or previous is None
                           else digests != previous),
        "error": m.get("unavailable") or probe.get("error") or score.get("error"),
    }


def _dispatch_point(p: dict[str, Any], m: dict[str, Any],
                    last: tuple[str, dict[str, Any]] | None
                    ) -> tuple[str, dict[str, Any]] | None:
    """Adds the build's dispatch time per stage and what moved since the last build with
    a profile (the build before it, unless that one has none); returns the new last."""
    profiles = dispatch_profiles(m)
    p["dispatch_ms"] = {stage: prof["per_call_ms"]["dispatch_sum"]
                        for stage, prof in (profiles or {}).items() if prof["status"] == "ok"}
    p["dispatch_note"] = None if profiles else dispatch_note(m)
    p["dispatch_against"] = last[0] if profiles and last else None
    p["dispatch_changes"] = compare_stages(last[1], profiles) if profiles and last else None
    return (p["build"], profiles) if profiles else last


def trend(req: TrendRequest) -> dict[str, Any]:
    plan = req.plan
    ledger = Ledger(plan.out / TREND_STATE, "trend", req.inputs, req.argv)
    builds = ledger.candidates or req.builds
    check_machine(plan, len(builds), req.dry_run)  # exit 2 before any build
    if req.dry_run:
        print(f"# {len(builds)} builds:")
        for i, b in enumerate(builds):
            print(f"{i:4d}  {b.spec}" + (f"  {b.subject}" if b.subject else ""))
        print("# the first step:")
        for line in build_dry_run_lines(plan, 0, builds[0]):
            print(line)
        return ledger.state
    ledger.set_candidates(builds)
    ledger.save()
    start = time.perf_counter()
    stepper = Stepper(ledger, plan, builds, "trend")
    echo(f"trend: {len(builds)} builds, test {plan.test.text} against {builds[0].label}")
    reference = None
    for i in range(len(builds)):
        verdict = stepper.run(i, reference)
        if reference is None and verdict.state != Outcome.SKIP:
            reference = i  # the first build that could be measured is the reference
    points, previous = [], None
    profiled: tuple[str, dict[str, Any]] | None = None  # the last build with a profile
    for i in range(len(builds)):
        step = ledger.step(i)
        assert step is not None
        p = point(step, previous)
        profiled = _dispatch_point(p, step["measurement"], profiled)
        points.append(p)
        previous = _digests(step["measurement"]) or previous
    ledger.state["points"] = points
    ledger.state["reference"] = builds[reference].spec if reference is not None else None
    ledger.state["seconds"] = round(ledger.state.get("seconds", 0.0)
                                    + time.perf_counter() - start, 3)
    ledger.save()
    return ledger.state

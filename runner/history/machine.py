"""Whether a step in a series coincides with a change of the machine rather than of IREE.

A series' points carry, besides the build each measured, the runner that measured it and
the conditions it was timed under (runner.base.conditions, kept in a result's details per
subject). A step is the machine's when, across it:

- the build is the same on both sides (nothing of IREE changed at all);
- the runner's version or commit, the kernel, the GPU driver or the CPU governor changed
  between the last point before and the first after;
- the share of points timed beside foreign load (others took at least
  runner.base.conditions.FOREIGN_SHARE of the machine) differs by LOAD_SHIFT or more
  between the two sides: the numbers moved with the neighbours.

A partition or memory mode is part of a series' layout, so a change of it starts another
series rather than a step in this one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from runner.history.series import Point

LOAD_SHIFT = 0.5  # half of one side's points beside foreign load and none of the other's
TIMED = frozenset({"stage_ms", "dispatch_ms", "time_ms", "latency_ms", "samples_per_s",
                   "wall_s"})


def conditions_of(point: Point) -> dict[str, Any] | None:
    """The conditions the point's number was timed under, where its result kept them;
    None for a number that is not a time (a count, a size, a score)."""
    if point.metric.name not in TIMED:
        return None
    kept = point.result.details.get("conditions")
    if not isinstance(kept, dict):
        return None
    own = kept.get(point.metric.subject)
    if isinstance(own, dict):
        return own
    return kept if "kernel" in kept else None


def _runner(p: Point) -> str:
    r = p.result
    return r.runner_version + (f" @ {r.runner_commit[:7]}" if r.runner_commit else "")


def _condition(name: str) -> Callable[[Point], str]:
    def get(p: Point) -> str:
        c = conditions_of(p) or {}
        return str(c.get(name) or "")
    return get


def _gpu_driver(p: Point) -> str:
    gpus = (conditions_of(p) or {}).get("gpu", {}).get("gpus") or []
    return ",".join(sorted({str(g.get("driver") or "") for g in gpus if isinstance(g, dict)}))


CHANGED = (("runner", _runner), ("kernel", _condition("kernel")),
           ("GPU driver", _gpu_driver), ("CPU governor", _condition("governor")))


def loaded_share(points: Sequence[Point]) -> float | None:
    """The share of `points` timed beside foreign load; None where none says."""
    flags = [c.get("beside_foreign_load") for c in map(conditions_of, points) if c]
    known = [f for f in flags if isinstance(f, bool)]
    return sum(known) / len(known) if known else None


def what_changed(before: Sequence[Point], after: Sequence[Point]) -> list[str]:
    """Why the step between `before` and `after` is the machine's; [] when nothing but
    the build changed (see the module docstring)."""
    last, first = before[-1], after[0]
    reasons = []
    if last.build == first.build:
        reasons.append("the same build on both sides: the machine, its load or the inputs "
                       "changed, not IREE")
    for label, get in CHANGED:
        old, new = get(last), get(first)
        if old and new and old != new:
            reasons.append(f"the {label} changed with it: {old} -> {new}")
    shares = loaded_share(before), loaded_share(after)
    if None not in shares and abs(shares[0] - shares[1]) >= LOAD_SHIFT:  # type: ignore[operator]
        reasons.append(f"foreign load changed with it: {shares[0]:.0%} of the results before "
                       f"were timed beside other processes' load, {shares[1]:.0%} after")
    return reasons

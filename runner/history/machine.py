"""Whether a step in a series coincides with a change of the machine rather than of IREE.

A series' points carry, besides the build each measured, the environment it was measured in
(runner.history.environment: the runner, kernel, GPU driver, ROCm and CUDA releases, VBIOS,
partition modes, the compiled modules' hashes) and the conditions it was timed under
(runner.base.conditions, kept in a result's details per subject). Across a step:

- the same build on both sides: nothing of IREE changed, the step is the machine's;
- the CPU governor changed, or the share of points timed beside foreign load (others took
  at least runner.base.conditions.FOREIGN_SHARE of the machine) differs by LOAD_SHIFT or
  more between the two sides: the numbers moved with the machine, whatever the build;
- a field of the environment changed between the last point before and the first after
  (`environment_changed`): named; the step is the machine's where the build is the same,
  and where the build changed too it stays the build's to confirm: a build and a driver
  changing together cannot be told apart without measuring both builds again on one
  machine. The compiled modules changing under the same build (its flags or inputs
  changed) are named the same way.

A result from before environments were kept has its kernel and GPU driver in its
conditions, read in their place. The GPUs' power cap is read from the conditions (each
timed number's, runner.base.gpu_sensors): a cap changed between two points is named and
drawn as a driver change is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from runner.history.environment import FIELD_LABELS
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


def _gpu_power_cap(p: Point) -> str:
    """The GPUs' power caps the point was timed under (`700 W`; several comma-separated),
    from its conditions (runner.base.gpu_sensors); "" where none was kept."""
    gpus = (conditions_of(p) or {}).get("gpu", {}).get("gpus") or []
    caps = {g.get("power_cap_w") for g in gpus if isinstance(g, dict)}
    return ",".join(f"{c:g} W" for c in sorted(c for c in caps if isinstance(c, int | float)))


def _environment(name: str, fallback: Callable[[Point], str] | None = None
                 ) -> Callable[[Point], str]:
    """The environment's field `name`, else (a result from before environments were kept)
    what `fallback` reads from its conditions."""
    def get(p: Point) -> str:
        env = p.result.environment
        value = getattr(env, name) if env is not None else None
        return str(value) if value else (fallback(p) if fallback else "")
    return get


MACHINE = (("CPU governor", _condition("governor")),)
# The power cap is a setting of the machine, like its driver: a change is named and drawn,
# and judged as the driver's is. The GPU's temperature and clocks are kept beside it but
# not compared: they move from run to run with the room and the load.
ENVIRONMENT = (("runner", _runner),
               *((label, _environment(name, {"kernel": _condition("kernel"),
                                             "gpu_driver": _gpu_driver}.get(name)))
                 for name, label in FIELD_LABELS.items()),
               ("GPU power cap", _gpu_power_cap))


def _changed(fields: Sequence[tuple[str, Callable[[Point], str]]], last: Point, first: Point
             ) -> list[tuple[str, str]]:
    """(label, `the X changed with it: old -> new`) of each field known on both sides that
    differs."""
    out = []
    for label, get in fields:
        old, new = get(last), get(first)
        if old and new and old != new:
            out.append((label, f"the {label} changed with it: {old} -> {new}"))
    return out


def modules_changed(last: Point, first: Point) -> str | None:
    """The compiled modules whose hashes differ across the step under the same build: its
    flags or inputs changed, not IREE's version."""
    old, new = (p.result.environment.modules if p.result.environment else {}
                for p in (last, first))
    differ = sorted(m for m in old.keys() & new.keys() if old[m] != new[m])
    if last.build != first.build or not differ:
        return None
    return (f"the compiled modules changed with it under the same IREE ({last.build}): "
            f"{', '.join(differ)} (other flags or inputs)")


def environment_changes(last: Point, first: Point) -> list[tuple[str, str]]:
    """(label, reason) of each field of the environment that differs between two points
    (what a chart marks between them)."""
    modules = modules_changed(last, first)
    return _changed(ENVIRONMENT, last, first) + (
        [("compiled modules", modules)] if modules else [])


def environment_changed(before: Sequence[Point], after: Sequence[Point]) -> list[str]:
    """Each field of the environment that changed between the last point before the step
    and the first after, as `the X changed with it: old -> new`."""
    return [reason for _, reason in environment_changes(before[-1], after[0])]


def loaded_share(points: Sequence[Point]) -> float | None:
    """The share of `points` timed beside foreign load; None where none says."""
    flags = [c.get("beside_foreign_load") for c in map(conditions_of, points) if c]
    known = [f for f in flags if isinstance(f, bool)]
    return sum(known) / len(known) if known else None


def what_changed(before: Sequence[Point], after: Sequence[Point]) -> list[str]:
    """Why the step between `before` and `after` is the machine's whatever the build: the
    same build on both sides, the governor or foreign load changed (see the module
    docstring); [] when none of these. The environment is `environment_changed`'s."""
    last, first = before[-1], after[0]
    reasons = []
    if last.build == first.build:
        reasons.append("the same build on both sides: the machine, its load or the inputs "
                       "changed, not IREE")
    reasons += [reason for _, reason in _changed(MACHINE, last, first)]
    shares = loaded_share(before), loaded_share(after)
    if None not in shares and abs(shares[0] - shares[1]) >= LOAD_SHIFT:  # type: ignore[operator]
        reasons.append(f"foreign load changed with it: {shares[0]:.0%} of the results before "
                       f"were timed beside other processes' load, {shares[1]:.0%} after")
    return reasons

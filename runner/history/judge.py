"""What each change point is: a build's regression, the machine's, or not known yet.

A step found in a series (runner/history/changes.py) is only where the numbers moved. It
becomes a regression, the one kind `runner history` exits 1 on, only when confirmed: the
last good and first bad builds measured again, interleaved on one machine (`runner
history confirm`, as Chromium's Pinpoint measures A B A B), and the difference held with
its interval. Before that:

- `machine`: the same build on both sides, or a change of the governor or foreign load
  coincides with it (runner/history/machine.py): not IREE, so no alert; a confirmation
  whose difference did not hold says the same;
- `unconfirmed`: worse across two builds, listed with the command that confirms it; where
  the environment (runner, kernel, driver, ROCm/CUDA, VBIOS, partition) changed with the
  build, both are named: only measuring the two builds again on one machine tells them
  apart;
- `improvement` and `change` (a metric with no worse direction) as they were.
"""

from __future__ import annotations

from dataclasses import replace

from runner.base import shellscript
from runner.base.outcome import Outcome
from runner.history.changes import NIGHTLIES, SNAP, Change, build_spec, slug
from runner.history.machine import environment_changed, what_changed
from runner.history.model import Confirmation
from runner.history.series import series_key

CONFIRMABLE = {"bench goldens": ("time_ms",)}  # what `runner history confirm` measures again
KIND_ORDER = (Outcome.REGRESSION, Outcome.UNCONFIRMED, Outcome.MACHINE,
              Outcome.IMPROVEMENT, Outcome.CHANGE)


def confirm_command(change: Change) -> str | None:
    """The `runner history confirm` command for this change, where both builds can be
    installed again from a package index (a commit's packages need `runner bisect`'s
    --repo) and the series is one confirm measures."""
    s = change.series
    good, bad = build_spec(change.last_before), build_spec(change.first_after)
    if (good is None or bad is None or "--repo" in good[1] + bad[1]
            or s.metric not in CONFIRMABLE.get(s.command, ())):
        return None
    argv: list[shellscript.Word] = ["runner", "history", "confirm", "--good", good[0],
                                    "--bad", bad[0], "--command", s.command, "--metric",
                                    s.metric, "--stage", s.subject]
    for flag, value in (("--profile-match", s.profile), ("--sku", s.sku)):
        if value:
            argv += [flag, value]
    if "--pre" in good[1] + bad[1]:
        argv += ["--pre", "--find-links", NIGHTLIES]
    argv += ["--out", f"runs/confirm-{slug(s.metric, s.subject)}"]
    return shellscript.join(argv)


def _confirmed(change: Change, confirmation: Confirmation) -> Change:
    when = f"{confirmation.confirmed_at:%Y-%m-%d %H:%M}"
    rounds = f"{len(confirmation.good_values)} interleaved rounds on {confirmation.machine}"
    if (confirmation.details.get("verdict") or {}).get("undecided"):
        return replace(change, kind=Outcome.UNCONFIRMED, confirmation=confirmation.to_dict(),
                       reasons=(
            f"measured again {when}: {confirmation.good} and {confirmation.bad}, {rounds}; "
            "undecided: the estimate is past --min-change but its interval takes in no "
            "change: confirm it with more rounds (--max-rounds)",), confirm=confirm_command(
                change))
    if confirmation.holds:
        return replace(change, kind=Outcome.REGRESSION, confirmation=confirmation.to_dict(),
                       reasons=(f"confirmed {when}: {confirmation.good} and "
                                f"{confirmation.bad} measured again, {rounds}; the "
                                "bad/good ratio's interval lay wholly on the worse side",))
    return replace(change, kind=Outcome.MACHINE, confirmation=confirmation.to_dict(),
                   reasons=(f"measured again {when}: {confirmation.good} and "
                            f"{confirmation.bad}, {rounds}; the difference did not hold: the "
                            "machine, not IREE",))


def snapped(change: Change) -> Change:
    """The change moved onto a build boundary within SNAP points of it, where it found none
    at its own place: a step's place is itself uncertain by a point or two (one noisy run
    either side), and a build that changed beside it is the likelier cause. It can only
    make a change unconfirmed, never an alert: that needs the builds measured again."""
    points = change.series.points
    if not change.same_build:
        return change
    near = sorted((abs(i - change.index), i) for i in range(
        max(1, change.index - SNAP), min(len(points), change.index + SNAP + 1))
        if points[i - 1].build != points[i].build)
    return replace(change, index=near[0][1]) if near else change


def judge_one(change: Change, confirmations: dict[tuple[str, str, str], Confirmation]
              ) -> Change:
    change = snapped(change)
    before, after = change.sides
    machine, environment = what_changed(before, after), environment_changed(before, after)
    if machine:
        return replace(change, kind=Outcome.MACHINE, reasons=tuple(machine + environment))
    if environment:  # and the build: named both, and judged as the build's step below
        environment.append(f"the build changed as well ({change.last_before.build} -> "
                           f"{change.first_after.build}): a build and its environment "
                           "changing together cannot be told apart without measuring both "
                           "builds again on one machine")
    boundary = ([f"found at the build boundary after {change.n_after} result(s) of "
                 f"{change.first_after.build}, beyond the interval of the previous build's"]
                if change.at_boundary else [])
    change = replace(change, reasons=(*boundary, *environment))
    if change.regression is not True:
        return replace(change, kind=Outcome(change.direction))
    command = confirm_command(change)
    good, bad = build_spec(change.last_before), build_spec(change.first_after)
    if good is not None and bad is not None:
        found = confirmations.get((series_key(change.series.key()), good[0], bad[0]))
        if found is not None:
            return _confirmed(change, found)
    why = ("not measured again yet: confirm it before it counts" if command else
           "not measured again: `runner history confirm` measures bench goldens times of "
           "builds that can be installed again; `runner bisect` pins it")
    return replace(change, kind=Outcome.UNCONFIRMED, reasons=(*change.reasons, why),
                   confirm=command)


def judge_changes(changes: list[Change], confirmations: list[Confirmation]) -> list[Change]:
    """Each change with its kind (see the module docstring), confirmed regressions first,
    then by kind and size. The newest confirmation of a series and pair of builds counts."""
    latest = {(series_key(c.series), c.good, c.bad): c
              for c in sorted(confirmations, key=lambda c: c.confirmed_at)}
    judged = [judge_one(c, latest) for c in changes]
    return sorted(judged, key=lambda c: (KIND_ORDER.index(Outcome(c.kind)), -abs(c.relative)))


def alerts(changes: list[Change]) -> list[Change]:
    """The changes `runner history` exits 1 on: confirmed regressions only."""
    return [c for c in changes if c.kind == Outcome.REGRESSION]

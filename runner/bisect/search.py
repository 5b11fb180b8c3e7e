"""The bisection: the first bad build between a good and a bad one.

Both ends are measured first: the good one is the reference the others are compared with
(and must pass a test that judges builds on their own), the bad one must fail, or there is
nothing to find. Then git bisect's rule: test the untested build nearest the middle of the
range still open; a build that cannot be judged is skipped and its neighbour nearest the
middle is tried instead. When only skipped builds are left between the last good and the
first bad, the answer is that range: the skips hide which of them it was.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.base.errors import BadInput, RunnerError
from runner.base.outcome import Outcome
from runner.base.progress import duration, echo
from runner.bench.dispatch_diff import compare_stages
from runner.bisect.builds import Build
from runner.bisect.judge import BuildVerdict, TestSpec, image_diffs, judge_build
from runner.bisect.ledger import Ledger
from runner.bisect.measure import (
    MeasurePlan,
    ScoredImages,
    build_dry_run_lines,
    dispatch_note,
    dispatch_profiles,
    measure,
)
from runner.bisect.preflight import bisect_steps, check_machine

STATE = "bisect.json"


@dataclass
class Bisection:
    """The open range over the candidates, from what the verdicts so far say."""

    builds: list[Build]
    verdicts: dict[int, str] = field(default_factory=dict)

    @property
    def first_bad(self) -> int:
        return min((i for i, v in self.verdicts.items() if v == Outcome.BAD),
                   default=len(self.builds) - 1)

    @property
    def last_good(self) -> int:
        hi = self.first_bad
        return max((i for i, v in self.verdicts.items() if v == Outcome.GOOD and i < hi), default=0)

    def untested(self) -> list[int]:
        return [i for i in range(self.last_good + 1, self.first_bad) if i not in self.verdicts]

    def skipped(self) -> list[int]:
        return [i for i in range(self.last_good + 1, self.first_bad)
                if self.verdicts.get(i) == Outcome.SKIP]

    def next(self) -> int | None:
        """The untested build nearest the middle (the lower one of two as near)."""
        left = self.untested()
        if not left:
            return None
        mid = (self.last_good + self.first_bad) / 2
        return min(left, key=lambda i: (abs(i - mid), i))

    def steps_left(self) -> int:
        """About how many steps remain: log2 of the untested builds, rounded up."""
        n = len(self.untested())
        return math.ceil(math.log2(n + 1)) if n else 0

    def range_text(self) -> str:
        lo, hi = self.builds[self.last_good], self.builds[self.first_bad]
        return (f"{lo.label} (good) .. {hi.label} (bad): {len(self.untested())} untested "
                f"between, ~{self.steps_left()} step(s) left")


@dataclass(frozen=True)
class BisectRequest:
    good: Build
    bad: Build
    plan: MeasurePlan
    argv: list[str]
    inputs: dict[str, Any]
    candidates: list[Build] | None = None  # listed already (None: from the ledger)
    dry_run: bool = False


class Stepper:
    """Measures and judges builds, reusing every step the ledger already holds."""

    def __init__(self, ledger: Ledger, plan: MeasurePlan, builds: list[Build],
                 name: str = "bisect"):
        self.ledger, self.plan, self.builds, self.name = ledger, plan, builds, name
        self.backbones: dict[str, Any] = {}
        self.scored = ScoredImages()
        for step in ledger.state["steps"]:
            self.scored.add(step["measurement"])
        self.order = len(ledger.state["steps"])

    def measurement(self, index: int) -> dict[str, Any]:
        step = self.ledger.step(index)
        assert step is not None
        return step["measurement"]

    def run(self, index: int, reference: int | None, why: str = "") -> BuildVerdict:
        build = self.builds[index]
        done = self.ledger.finished(index, build)
        if done is not None:
            verdict = BuildVerdict(**done["verdict"])
            echo(f"{self.name}: {build.label}: {verdict.state.upper()} (from "
                 f"{self.ledger.path.name}, not run again): {verdict.metric}")
            return verdict
        self.order += 1
        echo(f"{self.name}: step {self.order}: {build.label}{why} ...")
        m = measure(self.plan, index, build, self.backbones, self.scored)
        ref = self.measurement(reference) if reference is not None else None
        verdict = judge_build(self.plan.test, ref, m)
        self.ledger.record(index, build, m["seconds"], label=build.label, order=self.order,
                           verdict=verdict.to_dict(), measurement=m)
        echo(f"{self.name}: step {self.order}: {build.label}: {verdict.state.upper()}: "
             f"{verdict.metric} ({duration(m['seconds'])})")
        return verdict


def _check_ends(stepper: Stepper, test: TestSpec, n: int) -> BuildVerdict:
    builds = stepper.builds
    good = stepper.run(0, None, " (the good end: the reference)")
    if good.state != Outcome.GOOD:
        what = "cannot be measured" if good.state == Outcome.SKIP else f"fails {test.text}"
        raise BadInput(f"the good build {builds[0].label} {what}: {good.metric}",
                       where="--good", fix="pick a good build that passes the test "
                       "(see builds/000-*/ in --out for its logs)")
    bad = stepper.run(n - 1, 0, " (the bad end)")
    if bad.state == Outcome.SKIP:
        raise BadInput(f"the bad build {builds[-1].label} cannot be measured: {bad.metric}",
                       where="--bad", fix="pick a bad build that installs and compiles")
    return bad


def run_bisection(req: BisectRequest) -> dict[str, Any]:
    """The first bad build of a request `runner.bisect.bisect` made; resumes from its out.

    Args:
        req: the good and bad builds, the `MeasurePlan` (test, profile, samples, out),
            the recorded argv and inputs, the candidates and `dry_run`.

    Returns:
        The state written to bisect.json (its `answer`: first bad build or no change).

    Raises:
        BadInput: the good end fails its test or cannot be measured, or the bad end
            cannot be measured (each build's logs are under `builds/` in the out dir).
    """
    plan = req.plan
    ledger = Ledger(plan.out / STATE, "bisect", req.inputs, req.argv)
    builds = ledger.candidates or req.candidates
    assert builds is not None
    check_machine(plan, bisect_steps(len(builds)), req.dry_run)  # exit 2 before any build
    if req.dry_run:
        _print_dry_run(plan, builds)
        return ledger.state
    ledger.set_candidates(builds)
    ledger.state.pop("answer", None)
    ledger.save()
    start = time.perf_counter()
    state = Bisection(builds)
    echo(f"bisect: {len(builds)} builds from {builds[0].label} (good) to {builds[-1].label} "
         f"(bad), test {plan.test.text}; {len(builds) - 2} between: about "
         f"{bisect_steps(len(builds)) - 2} step(s) after the two ends"
         + (f"; resuming {len(ledger.state['steps'])} finished step(s)" if ledger.resumed else ""))
    stepper = Stepper(ledger, plan, builds)
    bad = _check_ends(stepper, plan.test, len(builds))
    state.verdicts.update({0: Outcome.GOOD, len(builds) - 1: bad.state})
    if bad.state == Outcome.GOOD:
        answer = {"no_change": True, "text": f"{builds[-1].label} passes {plan.test.text} "
                  f"like {builds[0].label}: no build between them changed it"}
    else:
        echo(f"bisect: {state.range_text()}")
        while (index := state.next()) is not None:
            verdict = stepper.run(index, 0)
            state.verdicts[index] = verdict.state
            echo(f"bisect: {state.range_text()}")
        answer = _answer(state, stepper)
    ledger.state["answer"] = answer
    ledger.state["seconds"] = round(ledger.state.get("seconds", 0.0)
                                    + time.perf_counter() - start, 3)
    ledger.save()
    echo(f"bisect: {answer['text']}")
    return ledger.state


def _answer(state: Bisection, stepper: Stepper) -> dict[str, Any]:
    builds = state.builds
    lo, hi = state.last_good, state.first_bad
    skipped = state.skipped()
    answer: dict[str, Any] = {
        "no_change": False, "first_bad": builds[hi].spec, "last_good": builds[lo].spec,
        "exact": not skipped, "skipped": [builds[i].spec for i in skipped],
        "range": [b.spec for b in builds[lo + 1: hi + 1]]}
    if skipped:
        between = ", ".join(b.label for b in builds[lo + 1: hi + 1])
        answer["text"] = (f"the first bad build is one of {between}"
                          f" (after {builds[lo].label}, the last good): "
                          f"{len(skipped)} skipped build(s) hide which")
    else:
        answer["text"] = (f"{builds[hi].label} is the first bad build "
                          f"({builds[lo].label} is the last good one)")
    answer["evidence"] = evidence(stepper.plan.test, stepper.measurement(lo),
                                  stepper.measurement(hi))
    return answer


def evidence(test: TestSpec, last_good: dict[str, Any], culprit: dict[str, Any]
             ) -> dict[str, Any]:
    """What changed from the last good build to the first bad one, in the test's terms
    and in every other number both measured."""
    out: dict[str, Any] = {"against": last_good["build"]["spec"],
                           "verdict": judge_build(test, last_good, culprit).to_dict()}
    if last_good.get("probe", {}).get("run") and culprit.get("probe", {}).get("run"):
        good_dir, bad_dir = Path(last_good["dir"]), Path(culprit["dir"])
        out["changed_samples"] = image_diffs(good_dir, bad_dir)
        if out["changed_samples"]:
            out["psnr_ssim"] = _psnr_ssim(good_dir, bad_dir)
    if "score" in last_good and "score" in culprit and "fid" in culprit["score"] \
            and "fid" in last_good["score"]:
        out["fid_delta"] = culprit["score"]["fid"] - last_good["score"]["fid"]
        out["clip_delta"] = culprit["score"]["clip"] - last_good["score"]["clip"]
    for name in ("goldens", "script"):
        if name in culprit:
            out[name] = culprit[name]
    if "dispatches" in (culprit.get("probe") or {}):
        before, after = dispatch_profiles(last_good), dispatch_profiles(culprit)
        if before and after:
            out["dispatch_changes"] = compare_stages(before, after)
        else:
            missing = culprit if before else last_good
            out["dispatch_note"] = f"{missing['build']['spec']}: {dispatch_note(missing)}"
    if culprit.get("probe", {}).get("error"):
        out["error"] = culprit["probe"]["error"]
    return out


def _psnr_ssim(good_dir: Path, bad_dir: Path) -> dict[str, Any] | None:
    """Per-image PSNR/SSIM (runner compare), when the metrics extra is installed."""
    try:
        from runner.accuracy.compare import compare_runs
    except ImportError:
        return None
    try:
        comparison = compare_runs(good_dir, bad_dir)
    except (ImportError, RunnerError) as e:
        return {"error": str(e)}
    return {"summary": comparison.summary(), "worst": [d.to_dict() for d in comparison.worst(5)]}


def _print_dry_run(plan: MeasurePlan, builds: list[Build]) -> None:
    """Every candidate, then the exact commands of the first step (the good end)."""
    print(f"# {len(builds)} candidate builds, good .. bad:")
    for i, b in enumerate(builds):
        mark = " (good)" if i == 0 else " (bad)" if i == len(builds) - 1 else ""
        print(f"{i:4d}  {b.spec}{mark}" + (f"  {b.subject}" if b.subject else ""))
    print("# the first step: measure the good build (the reference)")
    for line in build_dry_run_lines(plan, 0, builds[0]):
        print(line)
    sys.stdout.flush()

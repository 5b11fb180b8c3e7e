"""Change points in a series: the build where a metric moved, by how much, how sure.

The method, in the spirit of MongoDB's E-Divisive work and asv's step detection, and robust
to the noise of shared machines (one slow run, a busy neighbour):

0. Judge the quiet points (`judged_points`): a time taken beside foreign load is left out
   where such times are a minority, so a CPU hog beside every third night neither makes a
   step nor hides one; it stays drawn, ringed.
1. Locate candidate steps by penalized optimal partitioning (PELT's objective, Killick et al.
   2012: the least sum of within-segment squared deviations plus PENALTY x ln n per segment,
   as BIC charges) of the series' *ranks*, not its values, so one outlier moves one rank and
   cannot make a step. This is what `ruptures.KernelCPD(kernel="linear").predict(pen)` finds
   (tests/test_history.py checks that they agree); written here in numpy, exact for the
   WINDOW points searched, since importing ruptures (and scipy with it) alone takes longer
   than a whole `runner history`.
2. Test each candidate: the points between it and its neighbours before against those after,
   two-sided Mann-Whitney U (rank-based, no normality assumed; the normal approximation with
   tie and continuity corrections, as scipy's `method="asymptotic"`). Its p-value,
   Bonferroni-corrected for the candidates tested, is the change's uncertainty:
   `confidence` = 1 - p.
3. Keep a change when p <= `alpha` and the medians of the two sides differ by at least
   `min_change` (relative): a real but tiny step is noise to a golden update.
4. The newest build boundary is a candidate known without a search (`build_step`): where
   steps 1-3 found nothing there, the new build's few quiet points are tested against the
   previous build's at a size where a rank test cannot reach `alpha`: each timed point
   carries its repetitions' median and interval (runner.base.spread), and the step is kept
   when the new build's intervals lie wholly beyond the previous build's nights' interval of
   the median, by `min_change`: the rule `runner history confirm` judges its rounds by,
   applied to nights. A size or a dispatch count (no noise: one build compiles the same
   module) steps at one point. Such a change is at most unconfirmed (runner/history/judge.py):
   only measuring both builds again makes it a regression.

A change in the direction model.WORSE_WHEN calls worse is a regression. Each change names the
builds on both sides; where they differ and both can be installed again (a release or
nightly version, a commit), it carries the `runner bisect` command that pins the change
between them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from runner.base import shellscript
from runner.base.spread import Spread, spread
from runner.history.machine import conditions_of
from runner.history.model import WORSE_WHEN
from runner.history.series import Point, Series

PENALTY = 0.25  # x ln(n): no step in 99% of 60-point noise series with 5% outliers
MIN_SIZE = 3  # points on each side of a step
ALPHA = 0.01
MIN_CHANGE = 0.02
WINDOW = 200  # the newest points of a series searched
RELEASE = re.compile(r"^\d+\.\d+\.\d+(rc\d{8})?$")
SHA = re.compile(r"^[0-9a-f]{7,40}$")
NIGHTLIES = "https://iree.dev/pip-release-links.html"
SNAP = 2  # points between a found step and a build boundary it is taken to be at
NOISELESS = frozenset({"size_bytes", "dispatch_count"})  # one build compiles one module


@dataclass(frozen=True)
class Change:
    series: Series
    index: int  # the first point after the step, in series.points
    before: float  # median of the side before
    after: float  # median of the side after
    p_value: float
    n_before: int
    n_after: int
    # what the step is judged to be (runner/history/judge.py): "" until judged
    kind: str = ""
    reasons: tuple[str, ...] = ()
    confirm: str | None = None  # the `runner history confirm` command, where it can run
    confirmation: dict[str, Any] | None = None  # the confirmation judged by, as stored
    at_boundary: bool = False  # found by `build_step` at the newest build boundary

    @property
    def relative(self) -> float:
        return (self.after / self.before - 1.0) if self.before else math.inf

    @property
    def confidence(self) -> float:
        return 1.0 - self.p_value

    @property
    def last_before(self) -> Point:
        return self.series.points[self.index - 1]

    @property
    def first_after(self) -> Point:
        return self.series.points[self.index]

    @property
    def regression(self) -> bool | None:
        """True: worse; False: better; None: a metric with no worse direction."""
        worse = WORSE_WHEN.get(self.series.metric)
        if worse is None:
            return None
        return (self.after - self.before) * worse > 0

    @property
    def same_build(self) -> bool:
        return self.last_before.build == self.first_after.build

    @property
    def sides(self) -> tuple[tuple[Point, ...], tuple[Point, ...]]:
        """The points the step was tested on: those before it, those after."""
        points = self.series.points
        return (points[max(0, self.index - self.n_before):self.index],
                points[self.index:self.index + self.n_after])

    @property
    def direction(self) -> str:
        return {True: "regression", False: "improvement", None: "change"}[self.regression]

    def bisect(self) -> str | None:
        """The `runner bisect` command between the builds on each side, or None."""
        good, bad = build_spec(self.last_before), build_spec(self.first_after)
        if self.same_build or good is None or bad is None:
            return None
        argv: list[shellscript.Word] = ["runner", "bisect", "--good", good[0], "--bad", bad[0],
                                        "--test", self.test()]
        if self.series.profile:
            argv += ["--profile", self.series.profile]
        if "--pre" in good[1] + bad[1]:
            argv += ["--pre", "--find-links", NIGHTLIES]
        if "--repo" in good[1] + bad[1]:
            argv += ["--repo", shellscript.Var("IREE_CHECKOUT")]
        argv += ["--out", f"runs/bisect-{slug(self.series.metric, self.series.subject)}"]
        return shellscript.join(argv)

    def test(self) -> str:
        """The bisect test that sees this change."""
        metric = self.series.metric
        if metric in ("fid", "clip"):
            return "accuracy"
        if metric in ("dispatch_count", "size_bytes"):
            return "compstat"
        return throughput_test(self.relative)

    def why_no_bisect(self) -> str:
        if self.same_build:
            return ("the same build on both sides: the machine, its load or the inputs "
                    "changed, not IREE")
        return "a build that cannot be installed again (no release version or commit)"

    def to_dict(self) -> dict[str, Any]:
        b, a = self.last_before, self.first_after
        return {"series": self.series.key(), "label": self.series.label,
                "before": self.before, "after": self.after, "relative": self.relative,
                "p_value": self.p_value, "confidence": self.confidence,
                "n_before": self.n_before, "n_after": self.n_after,
                "regression": self.regression, "kind": self.kind or self.direction,
                "reasons": list(self.reasons), "confirm": self.confirm,
                "confirmation": self.confirmation, "at_boundary": self.at_boundary,
                "last_before": {"build": b.build, "finished_at": b.when.isoformat() + "Z",
                                "out_dir": b.result.out_dir},
                "first_after": {"build": a.build, "finished_at": a.when.isoformat() + "Z",
                                "out_dir": a.result.out_dir},
                "bisect": self.bisect(), "no_bisect": None if self.bisect() else
                self.why_no_bisect()}

    def line(self) -> str:
        """One sentence for the console and the Markdown."""
        kind = {"unconfirmed": "unconfirmed regression", "machine": f"machine ({self.direction})"
                }.get(self.kind, self.kind or self.direction)
        unit = self.series.unit
        return (f"{kind}: {self.series.label} from {self.before:.4g} to {self.after:.4g}"
                f"{' ' + unit if unit else ''} ({self.relative:+.1%}) between "
                f"{self.last_before.build} ({self.last_before.when:%Y-%m-%d %H:%M}) and "
                f"{self.first_after.build} ({self.first_after.when:%Y-%m-%d %H:%M}); "
                f"confidence {self.confidence:.3f}")


def slug(*parts: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(p for p in parts if p)).strip("-")[:60]


def throughput_test(relative: float) -> str:
    """The bisect test of a time or rate that moved by `relative`: a probe counts as bad past
    half the change."""
    return f"throughput:{max(1, round(abs(relative) * 50))}"


def build_spec(point: Point) -> tuple[str, str] | None:
    """(`--good`/`--bad` build, extra flags it needs) for the build `point` measured."""
    r = point.result
    if r.build and ":" in r.build and "," not in r.build:
        return r.build, ""
    version = r.compiler_version or r.runtime_version
    commit = r.compiler_commit or r.runtime_commit
    if version and RELEASE.match(version):
        return f"wheels:{version}", "--pre" if "rc" in version else ""
    if commit and SHA.match(commit):
        return f"commit:{commit}", "--repo"
    return None


def ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing their average rank."""
    order = np.argsort(values, kind="mergesort")
    raw = np.empty(len(values), dtype=float)
    raw[order] = np.arange(1, len(values) + 1)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    return (np.bincount(inverse, weights=raw) / counts)[inverse]


def steps(signal: np.ndarray, penalty: float, min_size: int) -> list[int]:
    """The segmentation of `signal` minimizing the within-segment sums of squared
    deviations plus `penalty` per segment, each segment at least `min_size` long: the
    indexes where segments start (0 and the end left out)."""
    n = len(signal)
    c1 = np.concatenate([[0.0], np.cumsum(signal)])
    c2 = np.concatenate([[0.0], np.cumsum(signal * signal)])
    best = np.full(n + 1, np.inf)
    best[0] = -penalty
    start = np.zeros(n + 1, dtype=int)
    for t in range(min_size, n + 1):
        s = np.arange(0, t - min_size + 1)
        cost = c2[t] - c2[s] - (c1[t] - c1[s]) ** 2 / (t - s)
        total = best[s] + cost + penalty
        k = int(np.argmin(total))
        best[t], start[t] = total[k], s[k]
    out, t = [], n
    while t > 0:
        t = int(start[t])
        if t > 0:
            out.append(t)
    return out[::-1]


def mann_whitney(left: np.ndarray, right: np.ndarray) -> float:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation, tie- and
    continuity-corrected)."""
    n1, n2 = len(left), len(right)
    both = np.concatenate([left, right])
    r = ranks(both)
    u = float(r[:n1].sum()) - n1 * (n1 + 1) / 2
    n = n1 + n2
    _, counts = np.unique(both, return_counts=True)
    ties = float((counts ** 3 - counts).sum())
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = max(abs(u - n1 * n2 / 2) - 0.5, 0.0) / math.sqrt(var)
    return math.erfc(z / math.sqrt(2))


def judged_points(series: Series, window: int = WINDOW, min_size: int = MIN_SIZE
                  ) -> list[int]:
    """The indexes of the points a step is looked for in: the newest `window`, less those
    timed beside foreign load where those are fewer than half and the quiet ones still make
    two sides of `min_size` (a busy neighbour slows a night by more than the step a golden
    update cares about; the busy points stay drawn, ringed). Where half or more are busy,
    all are judged, and a change of the busy share is the machine's
    (runner/history/machine.py)."""
    newest = range(max(0, len(series.points) - window), len(series.points))
    quiet = [i for i in newest
             if (conditions_of(series.points[i]) or {}).get("beside_foreign_load") is not True]
    if 2 * len(quiet) > len(newest) and len(quiet) >= 2 * min_size:
        return quiet
    return list(newest)


def detect(series: Series, *, alpha: float = ALPHA, min_change: float = MIN_CHANGE,
           window: int = WINDOW, min_size: int = MIN_SIZE) -> list[Change]:
    """The significant steps in `series` (its judged points, `judged_points`), oldest
    first; a step's index is that of the first judged point after it."""
    judged = judged_points(series, window, min_size)
    values = np.array([series.points[i].value for i in judged], dtype=float)
    if len(values) < 2 * min_size or np.ptp(values) == 0:
        return []
    n = len(values)
    found = steps((ranks(values) - 0.5) / n, PENALTY * math.log(n), min_size)
    bounds = [0, *found, n]
    out = []
    for i, step in enumerate(found, start=1):
        left, right = values[bounds[i - 1]:step], values[step:bounds[i + 1]]
        p = min(1.0, mann_whitney(left, right) * len(found))
        before, after = float(np.median(left)), float(np.median(right))
        relative = abs(after / before - 1.0) if before else math.inf
        if p <= alpha and relative >= min_change:
            out.append(Change(series, judged[step], before, after, p, len(left), len(right)))
    return out


def newest_builds(series: Series, judged: list[int]
                  ) -> tuple[list[int], list[int], int] | None:
    """(the previous build's judged indexes, the newest build's, the index of the newest
    build's first point) where the series' newest judged point is of a build other than the
    one before it; None where it is not."""
    points = series.points
    if not judged:
        return None
    new_build = points[judged[-1]].build
    start = len(points)
    while start > 0 and points[start - 1].build == new_build:
        start -= 1
    if start == 0 or start < judged[0]:
        return None
    old_build = points[start - 1].build
    first_old = start
    while first_old > 0 and points[first_old - 1].build == old_build:
        first_old -= 1
    return ([i for i in judged if first_old <= i < start], [i for i in judged if i >= start],
            start)


def point_spread(point: Point) -> Spread | None:
    """The point's repetitions (median and interval) as its result kept them; a noiseless
    metric's number is its own interval; None for a time kept without its repetitions."""
    if point.metric.name in NOISELESS:
        return Spread(1, point.value, point.value, point.value, 1.0)
    kept = (point.result.details.get("spread") or {})
    return Spread.from_dict(kept.get(point.metric.subject) if isinstance(kept, dict) else None)


def beyond_p(old: list[float], bound: float, higher: bool, n_new: int) -> float:
    """Two-sided chance that `n_new` nights alike to the `old` ones all land beyond `bound`
    (the previous build's interval edge): the exact permutation count, nights exchangeable.
    It counts nights alone (the repetitions' intervals are the rule's other half), so one
    night after many gives a modest confidence, and `alpha` does not gate it."""
    k = sum(1 for v in old if (v >= bound if higher else v <= bound))
    m = len(old)
    return min(1.0, 2 * math.comb(n_new + k - 1, n_new) / math.comb(m + n_new, n_new))


def build_step(series: Series, *, min_change: float = MIN_CHANGE, window: int = WINDOW,
               min_size: int = MIN_SIZE) -> Change | None:
    """The step at the series' newest build boundary, tested as the module docstring's
    step 4 says, or None. A noiseless metric needs one point each side, alike within each
    build; a timed one `min_size` quiet points of the previous build and a kept interval on
    every point of the new one."""
    sides = newest_builds(series, judged_points(series, window, min_size))
    if sides is None or not sides[0] or not sides[1]:
        return None
    points = series.points
    old = [points[i].value for i in sides[0]]
    new = [points[i].value for i in sides[1]]
    spreads = [point_spread(points[i]) for i in sides[1]]
    noiseless = series.metric in NOISELESS
    if noiseless and (np.ptp(old) != 0 or np.ptp(new) != 0):
        return None  # a build that compiled two modules: not this test's to judge
    if any(s is None for s in spreads) or (not noiseless and len(old) < min_size):
        return None
    good = spread(old)
    bad = Spread(len(new), float(np.median(new)), min(s.low for s in spreads if s),
                 max(s.high for s in spreads if s), 0.0)
    relative = abs(bad.median / good.median - 1.0) if good.median else math.inf
    if not bad.apart_from(good) or relative < min_change:
        return None
    higher = bad.low > good.high
    p = 0.0 if noiseless else beyond_p(old, good.high if higher else good.low, higher,
                                        len(new))
    boundary = sides[2]
    n_before = boundary - min(sides[0])
    return Change(series, boundary, good.median, bad.median, p, n_before,
                  len(points) - boundary, at_boundary=True)


def detect_all(all_series: list[Series], **kwargs: Any) -> list[Change]:
    """Every series' changes, the newest build boundary's (`build_step`) where the search
    found none there; regressions first, then the largest moves."""
    changes = []
    for s in all_series:
        found = detect(s, **kwargs)
        step = build_step(s, **{k: v for k, v in kwargs.items() if k != "alpha"})
        if step is not None and not any(abs(c.index - step.index) <= SNAP for c in found):
            found.append(step)
        changes += found
    return sorted(changes, key=lambda c: (c.regression is not True, -abs(c.relative)))

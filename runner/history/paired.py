"""The judgement of an interleaved A/B: is the bad build slower than the good one, beyond
the machine's own noise?

On a shared machine a timed number moves with time (the neighbours, the CPU's frequency):
one `bench goldens` run's median can differ from the next run's by more than 10%, and the
repetitions inside one run spread as widely. So a round is not judged by its median alone,
nor the two builds by the overlap of their medians' intervals. Each round pairs a good run
with the bad run beside it (their order alternating, so neither build is always second);
a pair's value is the Hodges-Lehmann shift of its log times, the median of log(bad) -
log(good) over every repetition of one against every repetition of the other. The pairs'
values are then judged by the Wilcoxon signed-rank test: the estimate is the median of their
Walsh averages, the interval the distribution-free one from the signed-rank distribution
(exact, no normal noise assumed, only that a pair is as likely to come out either way when
the builds are alike). Exponentiated, both are bad/good ratios.

Rounds are added while the estimate is past the change asked for but its interval still
takes in 1 (`Looks`): each look is at the level that keeps the chance of any look holding a
difference that is not there at 1% (a Bonferroni split), so looking again costs no false
confirmations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

LEVEL = 0.99  # over every look together
LOOK_EVERY = 4  # rounds added between two looks
# --rounds and --max-rounds: with them, a 10% step on the tiny model's CPU bench goldens held
# in nearly every seeded A/B of that VM's noise (tests/test_history_paired.py)
DEFAULT_ROUNDS, DEFAULT_MAX_ROUNDS = 10, 30


@dataclass(frozen=True)
class Looks:
    """When an A/B is judged: after `first` rounds, then every LOOK_EVERY more up to `most`."""

    first: int
    most: int

    def at(self) -> list[int]:
        return sorted({*range(self.first, self.most, LOOK_EVERY), self.most})

    def level(self) -> float:
        """Each look's confidence: LEVEL shared among the looks."""
        return 1 - (1 - LEVEL) / len(self.at())


@dataclass(frozen=True)
class PairedVerdict:
    """The bad/good ratio, its interval and what that makes the difference."""

    ratio: float
    low: float
    high: float
    confidence: float  # what [low, high] holds the ratio with (reached, at most the level)
    rounds: int  # pairs judged
    repetitions: int  # every timed repetition they hold, both builds
    holds: bool  # the interval wholly on the worse side of 1, the estimate by `min_change`
    undecided: bool  # neither: the estimate is past `min_change`, its interval takes in 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pair_shift(good: Sequence[float], bad: Sequence[float]) -> float:
    """log(bad/good) for one round: the median over every repetition pair."""
    diffs = sorted(math.log(b) - math.log(g) for g in good for b in bad)
    mid = len(diffs) // 2
    return diffs[mid] if len(diffs) % 2 else (diffs[mid - 1] + diffs[mid]) / 2


def _signed_rank_counts(n: int) -> list[int]:
    """How many of the 2**n sign choices give each signed-rank sum 0..n(n+1)/2."""
    counts = [1] + [0] * (n * (n + 1) // 2)
    for rank in range(1, n + 1):
        for total in range(len(counts) - 1, rank - 1, -1):
            counts[total] += counts[total - rank]
    return counts


def signed_rank_interval(values: Sequence[float], level: float
                         ) -> tuple[float, float, float, float]:
    """(estimate, low, high, confidence reached) of the centre of `values`: the median of
    the Walsh averages and the widest-rank interval of them holding it at `level` (the whole
    range, with the confidence it reaches, where too few values allow no more)."""
    n = len(values)
    walsh = sorted((values[i] + values[j]) / 2 for i in range(n) for j in range(i, n))
    m = len(walsh)
    mid = m // 2
    estimate = walsh[mid] if m % 2 else (walsh[mid - 1] + walsh[mid]) / 2
    counts, total = _signed_rank_counts(n), 2 ** n
    k, below = 1, counts[0]  # k-th smallest and largest: P(T <= k-1) each side
    while k < (m + 1) // 2 and 2 * (below + counts[k]) / total <= 1 - level:
        below += counts[k]
        k += 1
    return estimate, walsh[k - 1], walsh[m - k], 1 - 2 * below / total


def judge_pairs(rounds: Sequence[tuple[Sequence[float], Sequence[float]]], worse: int,
          min_change: float, level: float) -> PairedVerdict:
    """The rounds' (good repetitions, bad repetitions), judged. `worse` is 1 where a higher
    value is worse (a time), -1 where lower is."""
    shifts = [pair_shift(g, b) for g, b in rounds]
    estimate, low, high, reached = signed_rank_interval(shifts, level)
    direction = worse or 1
    past = (estimate * direction) >= math.log1p(min_change) if direction > 0 else (
        -estimate >= -math.log1p(-min_change))
    beyond = low > 0 if direction > 0 else high < 0
    holds = beyond and past and reached >= level
    return PairedVerdict(math.exp(estimate), math.exp(low), math.exp(high), round(reached, 6),
                   len(shifts), sum(len(g) + len(b) for g, b in rounds), holds,
                   not holds and past)

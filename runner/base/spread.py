"""A timed number as what it is: a distribution of repetitions, its median and an interval.

The interval is the distribution-free confidence interval of the median from order
statistics (the binomial argument: the median lies between the k-th smallest and k-th
largest of n values with probability 1 - 2 P(Binomial(n, 1/2) < k)), so it assumes no
normal noise, as a shared machine's times are not. Too few values for the confidence asked
give the whole range, and say so with the confidence actually reached.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Spread:
    n: int
    median: float
    low: float
    high: float
    confidence: float  # what [low, high] holds the median with

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Any) -> Spread | None:
        if not isinstance(raw, dict):
            return None
        try:
            return cls(int(raw["n"]), float(raw["median"]), float(raw["low"]),
                       float(raw["high"]), float(raw["confidence"]))
        except (KeyError, TypeError, ValueError):
            return None

    def apart_from(self, other: Spread) -> bool:
        """The two intervals do not overlap: the difference holds with its noise."""
        return self.low > other.high or self.high < other.low


def _below(n: int, k: int) -> float:
    """P(Binomial(n, 1/2) < k)."""
    return sum(math.comb(n, i) for i in range(k)) / 2 ** n


def spread(values: Sequence[float], confidence: float = CONFIDENCE) -> Spread:
    """The median of `values` and the widest-rank interval holding it with at least
    `confidence` (the whole range where fewer values allow no more)."""
    if not values:
        raise ValueError("no values")
    xs = sorted(float(v) for v in values)
    n = len(xs)
    mid = n // 2
    median = xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2
    k, reached = 1, 1 - 2 * _below(n, 1)
    while k + 1 <= (n + 1) // 2 and 1 - 2 * _below(n, k + 1) >= confidence:
        k += 1
        reached = 1 - 2 * _below(n, k)
    return Spread(n, median, xs[k - 1], xs[n - k], round(reached, 4))

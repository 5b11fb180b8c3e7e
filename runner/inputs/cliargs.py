"""argparse `type=` functions for the CLI's numbers: finite, in range, integer where an
integer is meant. argparse reports a refusal as a usage error naming the option (exit 2,
no traceback), e.g. `argument --min-duration: nan is not a number from 0.001 to 86400`."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

MAX_COUNT = 10_000_000
_INTEGER = re.compile(r"^[+-]?[0-9]{1,19}$")
_DECIMAL = re.compile(r"^[+-]?([0-9]{1,15}(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?$")


def integer(lo: int = 1, hi: int = MAX_COUNT) -> Callable[[str], int]:
    """A decimal integer from `lo` to `hi` (counts, sizes, seeds)."""
    def parse(text: str) -> int:
        value = int(text) if _INTEGER.match(text.strip()) else None
        if value is None or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number from {lo} "
                                             f"to {hi}")
        return value
    parse.__name__ = "integer"  # what argparse calls it in "invalid integer value"
    return parse


def number(lo: float, hi: float, *, low_open: bool = False) -> Callable[[str], float]:
    """A finite decimal number from `lo` (excluded when `low_open`) to `hi` (seconds,
    rates, percents)."""
    def parse(text: str) -> float:
        value = float(text) if _DECIMAL.match(text.strip()) else math.nan
        ok = math.isfinite(value) and (lo < value if low_open else lo <= value) and value <= hi
        if not ok:
            raise argparse.ArgumentTypeError(
                f"{text[:40]!r} is not a number from {lo:g}{' (excluded)' if low_open else ''} "
                f"to {hi:g}")
        return value
    parse.__name__ = "number"
    return parse


def count_list(text: str) -> list[int]:
    """A comma list of counts (`--batch-sizes 1,8,32`), sorted and unique."""
    parts = text.split(",")
    try:
        values = sorted({COUNT(part) for part in parts})
    except argparse.ArgumentTypeError:
        values = []
    if not values or len(parts) > 64:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a comma list of whole numbers "
                                         f"from 1 to {MAX_COUNT}, e.g. 1,8,32")
    return values


count_list.__name__ = "list"
COUNT = integer(1, MAX_COUNT)  # samples, repetitions, nodes, batch sizes...
COUNT_OR_ZERO = integer(0, MAX_COUNT)
SEED = integer(0, (1 << 63) - 1)
SECONDS = number(0, 7 * 24 * 3600, low_open=True)  # durations and timeouts: at most a week
DURATION = number(0, 7 * 24 * 3600)  # a warm-up: zero allowed
TEST_SECONDS = number(1e-3, 24 * 3600)  # a LoadGen test's minimum duration (userconf's bound)
RATE = number(1e-3, 1e6)  # queries per second (LoadGen settings: runner.inputs.userconf)
PERCENT = number(0, 100)
SCALE = number(0, 1e6)  # guidance, noise, tolerances: finite and non-negative

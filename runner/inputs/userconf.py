"""LoadGen user.conf / audit.config values, typed the way LoadGen reads them.

LoadGen parses an integer setting with `strtoull(value, nullptr, 0)` and a decimal one with
`strtod`, and never says when it stops early: `-5` becomes 2^64-5 queries, `1e3` becomes 1,
`010` is octal 8, `0x10` is 16. So every value is checked here against what its key means:
integer settings are plain non-negative decimal integers within the range that key can
sensibly take, decimal settings are finite decimals; the value is returned in the spelling
LoadGen reads as written. A bound also keeps a test from never ending (a minimum duration
of years, a query count no system finishes, a target rate of one query a week).
"""

from __future__ import annotations

import math
import re

from runner.base.errors import BadInput
from runner.inputs.cliargs import MAX_COUNT  # queries/samples too: far above any SDXL run's

# Keys LoadGen reads with strtod (see loadgen/test_settings_internal.cc). `target_latency`
# is a double for SingleStream/MultiStream and an integer for Server: checked as decimal.
DECIMAL_KEYS = frozenset({"accuracy_log_probability", "target_latency_percentile",
                          "target_qps", "target_latency"})
DAY_MS = 24 * 3600 * 1000
# key -> (lowest, highest) for integer settings; the rest: 0 .. 2^64-1 (seeds), flags 0/1.
INT_RANGES = {
    "min_duration": (0, DAY_MS), "max_duration": (0, 7 * DAY_MS),
    "min_query_count": (0, MAX_COUNT), "max_query_count": (0, MAX_COUNT),
    "performance_sample_count_override": (0, MAX_COUNT),
    "accuracy_log_sampling_target": (0, MAX_COUNT),
    "performance_issue_same_index": (0, MAX_COUNT), "samples_per_query": (1, MAX_COUNT),
    "max_async_queries": (0, MAX_COUNT), "mode": (0, 3),
    "print_timestamps": (0, 1), "performance_issue_unique": (0, 1),
    "performance_issue_same": (0, 1), "sample_concatenate_permutation": (0, 1),
    "coalesce_queries": (0, 1), "test05": (0, 1), "use_token_latencies": (0, 1),
    "infer_token_latencies": (0, 1),
}
DECIMAL_RANGES = {
    "accuracy_log_probability": (0.0, 1.0), "target_latency_percentile": (0.0, 100.0),
    "target_qps": (1e-3, 1e6),  # below one query in ~17 minutes a test never ends
    "target_latency": (0.0, DAY_MS),
}
UINT64_MAX = (1 << 64) - 1
_INTEGER = re.compile(r"^[0-9]{1,20}$")
# strtod reads exponents right (`1e3` is 1000.0), so decimal settings may use them.
_DECIMAL = re.compile(r"^[+-]?([0-9]{1,15}(\.[0-9]{0,15})?|\.[0-9]{1,15})([eE][+-]?[0-9]{1,3})?$")


def conf_value(key: str, value: str, where: str) -> str:
    """The checked value of setting `key` (canonical decimal spelling), or RunnerError."""
    if key in DECIMAL_KEYS:
        if not _DECIMAL.match(value):
            raise BadInput(f"value {value[:40]!r} of {key} is not a number in decimal "
                           "notation", where=where,
                           fix=f"write {key} like 0.5 or 2e-3 (no hex, nan or inf)")
        number = float(value)
        lo, hi = DECIMAL_RANGES[key]
        if not (math.isfinite(number) and lo <= number <= hi):
            raise BadInput(f"{key} = {value} is out of range", where=where,
                           fix=f"use a value from {lo:g} to {hi:g}")
        return value
    if not _INTEGER.match(value):
        raise BadInput(f"value {value[:40]!r} of {key} is not a number in plain decimal "
                       "digits (LoadGen would read it as another number)", where=where,
                       fix=f"write {key} in decimal digits, e.g. "
                       f"{'600000' if 'duration' in key else '1'} (no sign, exponent, hex "
                       "or leading zero)")
    number = int(value)
    if len(value) > 1 and value.startswith("0"):
        raise BadInput(f"{key} = {value} has a leading zero (LoadGen reads it as octal)",
                       where=where, fix=f"write {number}")
    lo, hi = INT_RANGES.get(key, (0, UINT64_MAX))
    if not lo <= number <= hi:
        unit = " ms" if "duration" in key else ""
        raise BadInput(f"{key} = {value}{unit} is out of range", where=where,
                       fix=f"use {lo} to {hi}{unit}"
                       + (" (a test must end)" if "duration" in key or "count" in key
                          else ""))
    return value

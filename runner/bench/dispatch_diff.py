"""Which dispatches moved between two profiles of the same stage (two IREE builds, or
the two arms of an A/B), and by how much.

Dispatches are matched by key (runner.bench.dispatch_names.key: the name with its ordinal
blanked out, since ordinals shift between IREE versions); the dispatch functions sharing a
key are summed, so their count is compared too. All times are milliseconds per stage call,
so profiles of different call counts compare. A change is `beyond_noise` when it exceeds
twice the combined standard error of the two per-call times, estimated from each dispatch
function's spread over its profiled calls (the profile's own variation, no assumption).
Keys only one side has are `added` / `removed`: a fusion or codegen change renames them.
Beside each mean-based change is the same at each dispatch's median (`median_*`): on a
machine whose OS preempts the profiled workers, a few outliers move the mean, not it.
"""

from __future__ import annotations

import math
from typing import Any

MOVED = 20  # the largest |changes| kept per stage


def _keyed(profile: dict[str, Any]) -> dict[str, dict[str, Any]]:
    calls = profile["calls"]
    out: dict[str, dict[str, Any]] = {}
    for r in profile["dispatches"]:
        k = out.setdefault(r["key"], {"key": r["key"], "kind": r["kind"], "ms": 0.0,
                                      "median": 0.0, "functions": 0, "var": 0.0})
        k["ms"] += r["ms_per_call"]
        k["median"] += r["median_ms_per_call"]
        k["functions"] += 1
        k["var"] += r["count"] * r["stddev_ms"] ** 2 / calls ** 2
    return out


def _pct(before: float, after: float) -> float | None:
    return round(100 * (after - before) / before, 3) if before > 0 else None


def _change(before: float, after: float) -> dict[str, Any]:
    return {"before_ms": round(before, 6), "after_ms": round(after, 6),
            "change_ms": round(after - before, 6), "change_pct": _pct(before, after)}


def _median_change(before: float, after: float) -> dict[str, Any]:
    """The same at each dispatch's median: what moved without the preempted outliers."""
    return {"median_before_ms": round(before, 6), "median_after_ms": round(after, 6),
            "median_change_pct": _pct(before, after)}


def _only(keys: set[str], side: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = [{"key": k, "kind": side[k]["kind"], "ms_per_call": round(side[k]["ms"], 6),
             "functions": side[k]["functions"]} for k in keys]
    return sorted(rows, key=lambda r: (-r["ms_per_call"], r["key"]))


def compare_profiles(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Two `ok` stage profiles (runner.bench.dispatch_profile) -> what changed."""
    a, b = _keyed(before), _keyed(after)
    moved = []
    for k in a.keys() & b.keys():
        row = {"key": k, "kind": b[k]["kind"], **_change(a[k]["ms"], b[k]["ms"]),
               **_median_change(a[k]["median"], b[k]["median"]),
               "functions": [a[k]["functions"], b[k]["functions"]]}
        noise = 2 * math.sqrt(a[k]["var"] + b[k]["var"])
        row.update(noise_ms=round(noise, 6), beyond_noise=abs(row["change_ms"]) > noise)
        moved.append(row)
    moved.sort(key=lambda r: (-abs(r["change_ms"]), r["key"]))
    kinds_a = {k["kind"]: k for k in before["kinds"]}
    kinds_b = {k["kind"]: k for k in after["kinds"]}

    def kind_ms(side: dict[str, dict[str, Any]], kind: str, field: str) -> float:
        return side[kind][field] if kind in side else 0.0

    kinds = [{"kind": k, **_change(kind_ms(kinds_a, k, "ms_per_call"),
                                   kind_ms(kinds_b, k, "ms_per_call")),
              **_median_change(kind_ms(kinds_a, k, "median_ms_per_call"),
                               kind_ms(kinds_b, k, "median_ms_per_call"))}
             for k in sorted(kinds_a.keys() | kinds_b.keys())]
    kinds.sort(key=lambda r: (-abs(r["change_ms"]), r["kind"]))
    pa, pb = before["per_call_ms"], after["per_call_ms"]
    return {"dispatch_ms": {**_change(pa["dispatch_sum"], pb["dispatch_sum"]),
                            **_median_change(pa["dispatch_median_sum"],
                                             pb["dispatch_median_sum"])},
            "wall_ms": _change(pa["wall"], pb["wall"]),
            "functions": [before["functions"], after["functions"]],
            "matched_keys": len(moved), "kinds": kinds, "moved": moved[:MOVED],
            "added": _only(b.keys() - a.keys(), b), "removed": _only(a.keys() - b.keys(), a)}


def compare_stages(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]
                   ) -> dict[str, dict[str, Any]]:
    """Stage -> compare(), or a note where one side has no profile of the stage."""
    out: dict[str, dict[str, Any]] = {}
    for stage in [*before, *(s for s in after if s not in before)]:
        a, b = before.get(stage), after.get(stage)
        missing = [(side, p) for side, p in (("before", a), ("after", b))
                   if p is None or p.get("status") != "ok"]
        if missing:
            side, p = missing[0]
            out[stage] = {"note": f"no dispatch profile {side}: "
                          + (p.get("note", p.get("status", "?")) if p else "not profiled")}
        else:
            assert a is not None and b is not None
            out[stage] = compare_profiles(a, b)
    return out

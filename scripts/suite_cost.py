"""What a run of the test suite cost, against its budget: the total wall time against the
tier's limit (the whole suite 20 minutes, `-m "not slow"` 5 minutes, on 2 cores), and each
test file's wall and CPU seconds against what tests/suite_budget.json records for it. It
names each file that grew (by more than GREW_PCT and GREW_S), each new file that costs more
than GREW_S, and the tests inside them that cost most.

    bash scripts/test.sh --suite-cost /tmp/cost.json     # any run of the suite
    python3 scripts/suite_cost.py /tmp/cost.json           # compared with the budget

Exit 0 within budget, 1 over it (a report, not a test: a loaded machine can be over). With
`--update` the budget's per-file numbers become this run's (the whole suite only); with
`--record` the run's totals also go into docs/measurements.json (`suite_full` or
`suite_fast`), which docs/CONTRIBUTING.md shows.

CPU seconds (the pytest processes' and their finished children's) change little when other
work loads the machine; wall seconds can double, so a file's growth is judged on both.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Any

from measured import REPO, add_record_option, emit

BUDGET = REPO / "tests" / "suite_budget.json"
LIMIT_S = {"full": 20 * 60, "fast": 5 * 60}
GREW_PCT, GREW_S = 25.0, 5.0


def tier(cost: dict[str, Any]) -> str:
    return "fast" if "not slow" in cost.get("markexpr", "") else "full"


def per_file(cost: dict[str, Any]) -> dict[str, dict[str, float]]:
    files: dict[str, dict[str, float]] = collections.defaultdict(
        lambda: {"wall_s": 0.0, "cpu_s": 0.0, "tests": 0})
    for test in cost["tests"]:
        entry = files[test["file"]]
        entry["wall_s"] += test["wall_s"]
        entry["cpu_s"] += test["cpu_s"]
        entry["tests"] += 1
    return {name: {k: round(v, 1) for k, v in entry.items()} for name, entry in files.items()}


def grown(now: dict[str, float], then: dict[str, float] | None) -> list[str]:
    """How a file's cost grew past the budget's (empty: it did not)."""
    if then is None:
        return [f"new, {now['wall_s']:.0f} s"] if now["wall_s"] > GREW_S else []
    out = []
    for key, unit in (("wall_s", "s wall"), ("cpu_s", "s CPU")):
        extra = now[key] - then[key]
        if extra > GREW_S and extra > then[key] * GREW_PCT / 100:
            out.append(f"{then[key]:.0f} -> {now[key]:.0f} {unit}")
    return out


def compare(cost: dict[str, Any], budget: dict[str, Any]) -> tuple[list[str], bool]:
    """The report's lines, and whether the run is within budget."""
    which = tier(cost)
    limit = LIMIT_S[which]
    files = per_file(cost)
    cpu = sum(f["cpu_s"] for f in files.values())
    ok = cost["wall_s"] <= limit
    lines = [f"{which} suite: {len(cost['tests'])} tests, {cost['wall_s']:.0f} s wall "
             f"({'within' if ok else 'OVER'} its {limit // 60} min), {cpu:.0f} s CPU, "
             f"{cost.get('workers') or 1} process(es)"]
    slowest: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for test in sorted(cost["tests"], key=lambda t: -t["wall_s"]):
        slowest[test["file"]].append(test)
    known = budget.get("files", {})
    for name, now in sorted(files.items(), key=lambda kv: -kv[1]["wall_s"]):
        how = grown(now, known.get(name))
        if not how:
            continue
        ok = False
        top = ", ".join(f"{t['nodeid'].split('::', 1)[1]} {t['wall_s']:.0f} s"
                        for t in slowest[name][:3])
        lines.append(f"grew: {name}: {'; '.join(how)} (most: {top})")
    if ok:
        lines.append("every file within its budget")
    return lines, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cost", type=Path, help="the JSON a run wrote (pytest --suite-cost)")
    parser.add_argument("--budget", type=Path, default=BUDGET,
                        help=f"the budget (default: {BUDGET.relative_to(REPO)})")
    parser.add_argument("--update", action="store_true",
                        help="make this run's per-file numbers the budget (whole suite only)")
    add_record_option(parser)
    args = parser.parse_args(argv)
    try:
        cost = json.loads(args.cost.read_text())
        budget = json.loads(args.budget.read_text()) if args.budget.is_file() else {}
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    lines, ok = compare(cost, budget)
    print("\n".join(lines))
    if args.update:
        if tier(cost) != "full":
            print("error: --update takes a run of the whole suite", file=sys.stderr)
            return 2
        budget["files"] = dict(sorted(per_file(cost).items()))
        args.budget.write_text(json.dumps(budget, indent=1) + "\n")
    if args.record:
        files = per_file(cost)
        emit(f"suite_{tier(cost)}", {
            "tests": len(cost["tests"]), "wall_s": round(cost["wall_s"]),
            "wall_min": round(cost["wall_s"] / 60, 1),
            "cpu_s": round(sum(f["cpu_s"] for f in files.values())),
            "passed": sum(t["outcome"] == "passed" for t in cost["tests"]),
            "workers": cost.get("workers") or 1}, True, cost.get("load"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: what the history's judgement costs in false alarms, how soon it flags a step
that comes with a new build, and whether the step's confirmation holds.

1. False alarms: `--nights` real `runner bench goldens tiny-bench --sku cpu` runs ("nights"),
   all with the one installed IREE build, each recorded into a fresh store; beside every
   `--hog-every`th night, one busy-loop process per core (`python3 -c 'while 1: pass'`)
   competes for the CPU. Then `runner history --json` reads the store, as a nightly job's
   morning check would, and the changes are counted by kind: a `regression` is a false
   alarm (nothing of IREE changed); `machine` and `unconfirmed` are listed, not alerts (on
   one build no build boundary exists, so an `unconfirmed` there is one too many as well).
2. A 10% step that comes with a new build: after those nights, nights of another build are
   added whose times are the real nights' (cycled, hogged ones included), each 10% slower,
   repetitions and all, written through the store's API (no real IREE build is 10% slower
   on demand). After each added night `runner history --json` runs again; a series is
   flagged on the first night its step is listed across the two builds as `unconfirmed`,
   with the `runner history confirm` command, or as `regression`.
3. The confirmation: that synthetic build cannot be installed, so `runner history confirm`'s
   own judgement (`runner.history.confirm.holds`) is fed what it would measure: `--rounds`
   real bench goldens rounds, interleaved good, bad, good, bad, ... (a hog beside both
   sides of every `--confirm-hog-every`th round), the bad rounds' times 10% slower; and the
   same rounds with no step, where it must not hold (a false confirmation).

The time from the first bad night to the culprit over real releases is
scripts/bench_nightly_culprit.py's.

    python3 scripts/bench_history_alarms.py                 # ~12 minutes on 2 cores
    python3 scripts/bench_history_alarms.py --nights 9 --step-nights 4 --rounds 3 -k unet
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from measured import add_record_option, emit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runner.base.spread import spread  # noqa: E402
from runner.history.changes import MIN_CHANGE  # noqa: E402
from runner.history.confirm import holds  # noqa: E402
from runner.history.extract import extract  # noqa: E402
from runner.history.model import Result  # noqa: E402
from runner.history.series import series_of  # noqa: E402
from runner.history.store import open_store  # noqa: E402
from runner.history.url import resolve  # noqa: E402

HOG = "while 1: pass"
STEP_VERSION, STEP_COMMIT = "3.99.0", "feedfacefeedfacefeedfacefeedfacefeedface"
FLAGGED = ("unconfirmed", "regression")
EDGES = ("median", "low", "high")  # a step night's repetitions are `step` slower too


def beside_hog(i: int, every: int) -> bool:
    """Whether the i-th night (or round) runs beside the hog: every `every`th, none at 0."""
    return every > 0 and i % every == every - 1


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def runner(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", *argv], capture_output=True,
                          text=True, env=_env(), check=False, cwd=REPO)


def night(out: Path, url: str, hog: bool, keyword: str | None) -> float:
    """One real nightly bench goldens, recorded into `url`; its wall seconds."""
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(
        len(os.sched_getaffinity(0)) if hog else 0)]
    start = time.perf_counter()
    try:
        proc = runner("bench", "goldens", "tiny-bench", "--sku", "cpu", "--out", str(out),
                      "--results", url, *(["-k", keyword] if keyword else []))
    finally:
        for p in hogs:
            p.kill()
            p.wait()
    if proc.returncode not in (0, 1):
        raise SystemExit(f"bench goldens failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start


def changes(url: str) -> list[dict[str, Any]]:
    """The changes `runner history` finds in the store's time_ms series, judged."""
    proc = runner("history", "--json", "--metric", "time_ms", "--results", url)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"runner history failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    found: list[dict[str, Any]] = json.loads(proc.stdout)["changes"]
    return found


def slower(template: Result, k: int, after: Result, step: float) -> Result:
    """Night `k` of the new build: `template`'s numbers with every time `step` slower,
    finishing `k` minutes after `after`."""
    metrics = tuple(replace(m, value=m.value * (1 + step)) if m.name == "time_ms" else m
                    for m in template.metrics)
    spreads = {name: {**kept, **{edge: kept[edge] * (1 + step) for edge in EDGES}}
               for name, kept in (template.details.get("spread") or {}).items()}
    return replace(template, key=f"{template.key}-step{k}", out_dir=f"{template.out_dir}-step{k}",
                   details={**template.details, "spread": spreads},
                   finished_at=after.finished_at + timedelta(minutes=k),
                   compiler_version=STEP_VERSION, compiler_commit=STEP_COMMIT,
                   runtime_version=STEP_VERSION, runtime_commit=STEP_COMMIT, build="",
                   metrics=metrics)


def is_step(change: dict[str, Any]) -> bool:
    return (change["kind"] in FLAGGED and change["first_after"]["build"].startswith(STEP_VERSION)
            and not change["last_before"]["build"].startswith(STEP_VERSION))


def nights_to_flag(url: str, real: list[Result], nights: int, step: float
                   ) -> tuple[dict[str, int | None], list[str]]:
    """Per time_ms series, the step night on which the history first flags the step (None:
    not within `nights`); the confirm commands it listed."""
    subjects = sorted({m.subject for r in real for m in r.metrics if m.name == "time_ms"})
    flagged: dict[str, int | None] = dict.fromkeys(subjects)
    commands: list[str] = []
    last = max(real, key=lambda r: r.finished_at)
    with open_store(resolve(url)) as store:
        for k in range(1, nights + 1):
            store.add(slower(real[(k - 1) % len(real)], k, last, step))
            found = changes(url)
            print(f"step night {k}: " + "; ".join(
                f"{c['kind']} {c['series']['subject']} {c['relative']:+.1%} at "
                f"{c['first_after']['build']}" for c in found), file=sys.stderr)
            for c in filter(is_step, found):
                subject = c["series"]["subject"]
                if flagged.get(subject, 0) is None:
                    flagged[subject] = k
                    commands += [c["confirm"]] if c["confirm"] else []
            if all(v is not None for v in flagged.values()):
                break
    return flagged, commands


def false_alarms(base: Path, url: str, args: argparse.Namespace
                 ) -> tuple[list[Result], list[float], Counter[str]]:
    real, walls = [], []
    for i in range(args.nights):
        hog = beside_hog(i, args.hog_every)
        out = base / f"night-{i:02d}"
        walls.append(night(out, url, hog, args.k))
        real += extract(out)
        times = ", ".join(f"{m.subject} {m.value:.3g}" for m in real[-1].metrics
                          if m.name == "time_ms")
        print(f"night {i + 1}/{args.nights}{' beside the hog' if hog else ''}: "
              f"{walls[-1]:.1f} s; time_ms {times}", file=sys.stderr)
    kinds = Counter(c["kind"] for c in changes(url))
    return real, walls, kinds


def rounds(base: Path, args: argparse.Namespace) -> dict[str, list[Result]]:
    """Real interleaved rounds, good then bad, as `runner history confirm` runs them, each
    recorded in a store of its own (as confirm's rounds are), not the nights' history."""
    url = f"sqlite:///{base / 'rounds.sqlite'}"
    got: dict[str, list[Result]] = {"good": [], "bad": []}
    for i in range(args.rounds):
        hog = beside_hog(i, args.confirm_hog_every)
        for side in ("good", "bad"):
            out = base / "rounds" / f"{i + 1:02d}-{side}"
            night(out, url, hog, args.k)
            got[side] += extract(out)
        print(f"confirmation round {i + 1}/{args.rounds}{' beside the hog' if hog else ''}",
              file=sys.stderr)
    return got


def confirmations(got: dict[str, list[Result]], step: float) -> dict[str, bool]:
    """Per time_ms series, whether confirm's judgement holds with the bad rounds `step`
    slower."""
    out = {}
    for series in series_of(got["good"]):
        if series.metric != "time_ms":
            continue
        good = [p.value for p in series.points]
        bad = [m.value * (1 + step) for r in got["bad"] for m in r.metrics
               if (m.name, m.subject) == (series.metric, series.subject)]
        out[series.subject] = holds(series, spread(good), spread(bad), MIN_CHANGE)
    return out


def beside_foreign_load(real: list[Result]) -> int:
    """The nights whose timing recorded others' load beside it (runner.base.conditions: the
    hog's, or the machine's other jobs'), in any of its tests."""
    return sum(any(isinstance(c, dict) and c.get("beside_foreign_load") is True
                   for c in (r.details.get("conditions") or {}).values()) for r in real)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nights", type=int, default=30, help="nights of one build (30)")
    parser.add_argument("--hog-every", type=int, default=3,
                        help="a CPU hog beside every Nth night (3; 0: none)")
    parser.add_argument("--step", type=float, default=0.10, help="the new build's slowdown (0.10)")
    parser.add_argument("--step-nights", type=int, default=8,
                        help="the most nights of the new build added (8)")
    parser.add_argument("-k", help="bench goldens' -k, to time fewer tests (default: all)")
    confirmation = parser.add_argument_group(
        "the confirmation", "real rounds of the installed build, interleaved as `runner history "
        "confirm` measures two builds; the second side's times made --step slower")
    confirmation.add_argument("--rounds", type=int, default=5, help="rounds a build (5, confirm's)")
    confirmation.add_argument("--confirm-hog-every", type=int, default=0,
                              help="a CPU hog beside both sides of every Nth round (0: none)")
    add_record_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        url = f"sqlite:///{base / 'history.sqlite'}"
        real, walls, kinds = false_alarms(base, url, args)
        flagged, commands = nights_to_flag(url, real, args.step_nights, args.step)
        got = rounds(base, args)
    held, false_held = confirmations(got, args.step), confirmations(got, 0.0)
    hogged = sum(beside_hog(i, args.hog_every) for i in range(args.nights))
    found = [v for v in flagged.values() if v is not None]
    print(f"{args.nights} nights ({hogged} beside the hog): changes by kind {dict(kinds)}; "
          f"a {args.step:.0%} step flagged after {flagged} nights; its confirmation held: "
          f"{held}, with no step: {false_held}", file=sys.stderr)
    confirmed = {s: n if held.get(s) else None for s, n in flagged.items()}
    confirmed_at = [n for n in confirmed.values() if n is not None]
    emit("bench_history_alarms", {
        "nights": args.nights, "hogged_nights": hogged,
        "nights_beside_foreign_load": beside_foreign_load(real), "night_s_median": round(
            sorted(walls)[len(walls) // 2], 1),
        "false_alarms": kinds.get("regression", 0), "unconfirmed": kinds.get("unconfirmed", 0),
        "machine": kinds.get("machine", 0), "improvements": kinds.get("improvement", 0),
        "step": args.step, "step_series": len(flagged),
        "step_flagged_series": len(found),
        "nights_to_flag_max": max(found) if len(found) == len(flagged) else None,
        "nights_to_flag": flagged, "step_confirm_listed": len(commands),
        "rounds": args.rounds, "confirm_hogged_rounds": sum(
            beside_hog(i, args.confirm_hog_every) for i in range(args.rounds)),
        "confirmation_held": held, "confirmation_held_series": sum(held.values()),
        "false_confirmations": sum(false_held.values()),
        "nights_to_flag_confirmed": confirmed,
        "nights_to_flag_confirmed_max": max(confirmed_at) if len(confirmed_at) == len(
            confirmed) else None}, args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())

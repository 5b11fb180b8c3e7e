"""Benchmark: what the history's judgement costs in false alarms, and how soon the nightly
flags and confirms a step that comes with a new build.

1. False alarms: `--nights` real `runner bench goldens tiny-bench --sku cpu` runs ("nights"),
   all with the one installed IREE build, each recorded into a fresh store; beside every
   `--hog-every`th night, one busy-loop process per core (`python3 -c 'while 1: pass'`)
   competes for the CPU. Then `runner history --json` reads the store, as a nightly job's
   morning check would, and the changes are counted by kind: a `regression` is a false
   alarm (nothing of IREE changed); `machine` and `unconfirmed` are listed, not alerts (on
   one build no build boundary exists, so an `unconfirmed` there is one too many as well).
2. The new build's first night, as `runner nightly` runs it: the new build measured against
   the previous one, interleaved (runner/nightly/ab.py). The synthetic build cannot be
   installed, so its rounds are real `runner bench goldens` rounds of the installed build,
   in the A/B's order (good, bad, bad, good, ...; a hog beside both sides of every
   `--confirm-hog-every`th round), the bad side's every repetition `--step` slower, judged
   by the A/B's own `runner.history.confirm.sequential` (rounds added while undecided, up
   to `--max-rounds`). The same rounds with no step are the control, where it must not
   hold (a false confirmation). A series whose A/B held is flagged and confirmed on night 1.
3. The history alone: nights of the new build are added whose times are the real nights'
   (cycled, hogged ones included), each `--step` slower, repetitions and all, written
   through the store's API; after each `runner history --json` runs again, and a series is
   flagged on the first night its step is listed across the two builds. A series the A/B
   did not hold is confirmed where the history flags it and `runner history confirm` (a
   new A/B of real rounds) then holds.

The time from the first bad night to the culprit over real releases is
scripts/bench_nightly_culprit.py's. On the quiet 2-core VM a night of the three tests takes
about 15 s, and so does each side of an A/B round: 30 nights and an A/B decided within 15
rounds take about 15 minutes; one that takes all 30 rounds, about 22.

    python3 scripts/bench_history_alarms.py                 # ~15 minutes on 2 cores, quiet
    python3 scripts/bench_history_alarms.py --nights 6 --step-nights 3 -k unet
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
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from measured import add_record_option, emit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runner.history.changes import MIN_CHANGE  # noqa: E402
from runner.history.confirm import repetitions, sequential  # noqa: E402
from runner.history.extract import extract  # noqa: E402
from runner.history.model import Result  # noqa: E402
from runner.history.paired import DEFAULT_MAX_ROUNDS, DEFAULT_ROUNDS, Looks, PairedVerdict  # noqa: E402
from runner.history.series import Series  # noqa: E402
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


class Rounds:
    """Real interleaved rounds, taken as an A/B asks for them and kept, so the step and the
    no-step control judge the same rounds; each recorded in a store of its own (as
    confirm's rounds are), not the nights' history."""

    def __init__(self, base: Path, hog_every: int, keyword: str | None):
        self.base, self.hog_every, self.keyword = base, hog_every, keyword
        self.taken: dict[tuple[int, str], dict[str, dict[str, Any]]] = {}

    def real(self, i: int, side: str) -> dict[str, dict[str, Any]]:
        if (i, side) not in self.taken:
            out = self.base / "rounds" / f"{i + 1:02d}-{side}"
            hog = beside_hog(i, self.hog_every)
            night(out, f"sqlite:///{self.base / 'rounds.sqlite'}", hog, self.keyword)
            self.taken[i, side] = {m.subject: {"value": m.value, "times_ms": repetitions(
                out, m.subject) or [m.value]} for r in extract(out) for m in r.metrics
                if m.name == "time_ms"}
            print(f"A/B round {i + 1}, {side}{' beside the hog' if hog else ''}",
                  file=sys.stderr)
        return self.taken[i, side]

    def slower(self, step: float) -> Callable[[int, str], dict[str, dict[str, Any]]]:
        """The rounds with the bad side's every repetition `step` slower."""
        def take(i: int, side: str) -> dict[str, dict[str, Any]]:
            got = self.real(i, side)
            if side == "good":
                return got
            return {s: {"value": v["value"] * (1 + step),
                        "times_ms": [t * (1 + step) for t in v["times_ms"]]}
                    for s, v in got.items()}
        return take


def ab(rounds: Rounds, subjects: list[str], step: float, plan: Looks) -> dict[str, PairedVerdict]:
    """Per series, the A/B's verdict with the bad side `step` slower."""
    series = [Series("bench goldens", "", "", "", "", "cpu", "time_ms", s, ()) for s in subjects]
    return sequential(plan, series, MIN_CHANGE, rounds.slower(step))[1]


def confirmed_nights(held: dict[str, PairedVerdict], flagged: dict[str, int | None], base: Path,
                     args: argparse.Namespace, plan: Looks) -> dict[str, int | None]:
    """Per series, the night its step is flagged and confirmed: the first where the A/B
    held, else the night the history flagged it where its own confirmation (a new A/B of
    real rounds) holds; None: not within the nights."""
    out: dict[str, int | None] = {}
    for subject, verdict in held.items():
        k = flagged.get(subject)
        if verdict.holds:
            out[subject] = 1
        elif k is not None:
            again = Rounds(base / f"confirm-{k}-{subject.replace('/', '_')}",
                           args.confirm_hog_every, args.k)
            out[subject] = k if ab(again, [subject], args.step, plan)[subject].holds else None
        else:
            out[subject] = None
    return out


def beside_foreign_load(real: list[Result]) -> int:
    """The nights whose timing recorded others' load beside it (runner.base.conditions: the
    hog's, or the machine's other jobs'), in any of its tests."""
    return sum(any(isinstance(c, dict) and c.get("beside_foreign_load") is True
                   for c in (r.details.get("conditions") or {}).values()) for r in real)


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nights", type=int, default=30, help="nights of one build (30)")
    parser.add_argument("--hog-every", type=int, default=3,
                        help="a CPU hog beside every Nth night (3; 0: none)")
    parser.add_argument("--step", type=float, default=0.10, help="the new build's slowdown (0.10)")
    parser.add_argument("--step-nights", type=int, default=3,
                        help="the most nights of the new build added (3)")
    parser.add_argument("-k", help="bench goldens' -k, to time fewer tests (default: all)")
    confirmation = parser.add_argument_group(
        "the A/B", "real rounds of the installed build, interleaved as `runner nightly` "
        "measures a new build on its first night; the bad side's times made --step slower")
    confirmation.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                              help=f"rounds a build before the first look ({DEFAULT_ROUNDS}, "
                              "the nightly's)")
    confirmation.add_argument("--max-rounds", type=int, default=DEFAULT_MAX_ROUNDS,
                              help=f"the most rounds a build ({DEFAULT_MAX_ROUNDS}, the "
                              "nightly's)")
    confirmation.add_argument("--confirm-hog-every", type=int, default=0,
                              help="a CPU hog beside both sides of every Nth round (0: none)")
    add_record_option(parser)
    return parser.parse_args()


def ab_result(held: dict[str, PairedVerdict], control: dict[str, PairedVerdict], rounds: Rounds,
              plan: Looks) -> dict[str, Any]:
    return {"rounds": plan.first, "max_rounds": plan.most, "ab_level": round(plan.level(), 6),
            "confirm_hogged_rounds": sum(beside_hog(i, rounds.hog_every)
                                         for i, side in rounds.taken if side == "good"),
            "ab_rounds_taken": len(rounds.taken) // 2,
            "ab_rounds": {s: v.rounds for s, v in held.items()},
            "ab_ratio": {s: round(v.ratio, 4) for s, v in held.items()},
            "ab_interval": {s: [round(v.low, 4), round(v.high, 4)] for s, v in held.items()},
            "confirmation_held": {s: v.holds for s, v in held.items()},
            "confirmation_held_series": sum(v.holds for v in held.values()),
            "false_confirmations": sum(v.holds for v in control.values()),
            "control_ratio": {s: round(v.ratio, 4) for s, v in control.items()}}


def main() -> int:
    args = options()
    plan = Looks(args.rounds, max(args.rounds, args.max_rounds))
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        url = f"sqlite:///{base / 'history.sqlite'}"
        real, walls, kinds = false_alarms(base, url, args)
        subjects = sorted({m.subject for r in real for m in r.metrics if m.name == "time_ms"})
        rounds = Rounds(base / "ab", args.confirm_hog_every, args.k)
        held, control = (ab(rounds, subjects, args.step, plan),
                         ab(rounds, subjects, 0.0, plan))
        flagged, commands = nights_to_flag(url, real, args.step_nights, args.step)
        confirmed = confirmed_nights(held, flagged, base, args, plan)
    hogged = sum(beside_hog(i, args.hog_every) for i in range(args.nights))
    found = [v for v in flagged.values() if v is not None]
    confirmed_at = [n for n in confirmed.values() if n is not None]
    print(f"{args.nights} nights ({hogged} beside the hog): changes by kind {dict(kinds)}; "
          f"the first night's A/B of a {args.step:.0%} step held: "
          f"{ {s: (v.holds, v.rounds) for s, v in held.items()} } (held, rounds), "
          f"with no step: { {s: v.holds for s, v in control.items()} }; the history "
          f"flagged it after {flagged} nights; flagged and confirmed: {confirmed}",
          file=sys.stderr)
    emit("bench_history_alarms", {
        "nights": args.nights, "hogged_nights": hogged,
        "nights_beside_foreign_load": beside_foreign_load(real), "night_s_median": round(
            sorted(walls)[len(walls) // 2], 1),
        "false_alarms": kinds.get("regression", 0), "unconfirmed": kinds.get("unconfirmed", 0),
        "machine": kinds.get("machine", 0), "improvements": kinds.get("improvement", 0),
        "step": args.step, "step_series": len(subjects),
        "step_flagged_series": len(found),
        "nights_to_flag_max": max(found) if len(found) == len(flagged) else None,
        "nights_to_flag": flagged, "step_confirm_listed": len(commands),
        **ab_result(held, control, rounds, plan),
        "nights_to_flag_confirmed": confirmed,
        "nights_to_flag_confirmed_max": max(confirmed_at) if len(confirmed_at) == len(
            confirmed) else None}, args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`runner history confirm`: a change across two builds measured again before it counts.

A step in the history compares runs made on different nights, beside whatever else the
machine did each night. Confirming it measures the last good and first bad builds again on
this machine, interleaved (good, bad, bad, good, good, bad, ...: Chromium's Pinpoint
interleaves its A/B runs too; the order alternates so neither build is always the second of
its pair), so both see the same neighbours and the same machine state. Each round is a real
`runner bench goldens` of the series' test file with that build's IREE tools (installed once
per build in a cached venv by the bisect machinery, runner/bisect/envs.py), read back by the
same extraction the history records with, every repetition kept. The rounds are judged by
runner.history.paired: the bad/good ratio from every repetition of each pair of rounds, its
interval, and more rounds while the estimate is past `--min-change` but the interval still
takes in no change, up to `--max-rounds`. The confirmation is stored, and `runner history`
judges the change by it (runner/history/judge.py). `runner nightly` measures a new build
against the previous one the same way on its first night (`confirm_all`, every series of
the night's bench goldens from the same rounds).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from runner.base import shellscript
from runner.base.errors import BadInput, StepFailed
from runner.base.paths import GOLDENS_DIR
from runner.base.spread import spread
from runner.bisect.builds import Build, Sources
from runner.history.extract import extract
from runner.history.judge import CONFIRMABLE
from runner.history.model import WORSE_WHEN, Confirmation, Result
from runner.history.paired import Looks, PairedVerdict, judge_pairs
from runner.history.series import Series, series_of

CONFIRM_JSON, CONFIRM_MD = "confirm.json", "confirm.md"
ROUNDS_DIR = "rounds"
ROUNDS_STORE = "rounds.sqlite"  # where each round's own bench goldens records: not the history


@dataclass(frozen=True)
class ConfirmRequest:
    good: Build
    bad: Build
    command: str
    metric: str
    subject: str
    profile: str | None
    sku: str | None
    rounds: int  # before the first look
    min_change: float
    out: Path
    sources: Sources
    max_rounds: int = 0  # the most, rounds added while undecided (0: `rounds`)


def find_series(results: list[Result], req: ConfirmRequest, machine: str) -> Series:
    """The one series the flags name, of this machine (a confirmation measures here)."""
    def named(s: Series, on_this: bool = True) -> bool:
        return (s.command == req.command and s.metric == req.metric
                and s.subject == req.subject and (req.profile in (None, s.profile))
                and (req.sku in (None, s.sku)) and (not on_this or s.machine == machine))

    if req.metric not in CONFIRMABLE.get(req.command, ()):
        raise BadInput(f"confirm measures bench goldens' time_ms, not {req.command} "
                       f"{req.metric}", where="--metric", fix="pin this change with the "
                       "`runner bisect` command the history prints instead")
    everywhere = [s for s in series_of(results) if named(s, on_this=False)]
    found = [s for s in everywhere if s.machine == machine]
    what = f"--command {req.command!r} --metric {req.metric} --stage {req.subject!r}"
    if not found:
        elsewhere = sorted({s.machine for s in everywhere})
        raise BadInput(f"the store holds no series {what} of this machine ({machine})"
                       + (f"; it has one of {', '.join(elsewhere)}" if elsewhere else ""),
                       where="--stage", fix="run the command the history printed, on the "
                       "machine whose series it is (its numbers are that machine's)")
    if len(found) > 1:
        raise BadInput(f"{len(found)} series match {what}: "
                       + "; ".join(s.label for s in found), where="--profile-match/--sku",
                       fix="name the series' --profile-match and --sku as the history printed them")
    return found[0]


def golden_file(series: Series) -> Path:
    """The golden test file the series' newest result measured: as it was named, relative
    to where that command ran (its attempt record's cwd), else to here."""
    from runner.base.outdir import read_record

    newest = series.points[-1].result
    named = str((newest.details.get("files") or {}).get(series.subject) or "")
    record = read_record(Path(newest.out_dir)) if Path(newest.out_dir).is_dir() else None
    ran_in = Path(str((record or {}).get("cwd") or Path.cwd()))
    for path in (ran_in / named, Path.cwd() / named, GOLDENS_DIR.parent / named):
        if named and path.is_file():
            return path.resolve()
    raise BadInput(f"the test file of {series.subject} is not here ({named or 'unknown'})",
                   where="--stage", fix="run confirm where the series' test files are (the "
                   "checkout or suite its bench goldens ran from)")


def round_argv(tools: str, files: list[Path], sku: str, out: Path, store: Path) -> list[str]:
    """One round: bench goldens of the series' files with the build's tools, recording into
    the confirmation's own store, not the history."""
    return [sys.executable, "-m", "runner", "--iree-tools", tools, "bench", "goldens",
            *map(str, files), "--sku", sku, "--out", str(out), "--results", str(store)]


def sides(i: int) -> tuple[str, str]:
    """Round i's order (from 0): good first, then bad first, and so on, so a machine that
    warms up or slows down across a pair favours neither build."""
    return ("good", "bad") if i % 2 == 0 else ("bad", "good")


def tools_dir(build: Build, sources: Sources, dry_run: bool) -> str:
    from runner.bisect.envs import ensure_env, plan_setup

    if dry_run:
        setup = plan_setup(build, sources)
        return str((setup.root or Path("?")) / "venv" / "bin")
    env = ensure_env(build, sources)
    if not env.bin_dir:
        raise StepFailed(f"{build.spec} has no tools directory", where="--good/--bad",
                         fix="name a wheels: or commit: build")
    return env.bin_dir


def repetitions(round_dir: Path, subject: str) -> list[float]:
    """Each repetition's time of one golden test in a round's bench.json (none where the
    round kept none: its one value is then the round's)."""
    try:
        bench = json.loads((round_dir / "bench.json").read_text())
        (golden,) = [g for g in bench.get("goldens") or [] if g.get("name") == subject]
        return [float(t) for t in golden["latency_ms"]["times_ms"] if float(t) > 0]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return []


def measure_round(round_dir: Path, series: list[Series], argv: list[str]
                  ) -> dict[str, dict[str, Any]]:
    """Each series' number in the round, read as the history reads it, its repetitions and
    its conditions, by subject."""
    from runner.bisect.envs import runner_source_dir

    # this very runner in the round, whatever else is on the path
    path = os.pathsep.join(p for p in (str(runner_source_dir()), os.environ.get("PYTHONPATH"))
                           if p)
    proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": path})
    (round_dir.parent / f"{round_dir.name}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode not in (0, 1):
        raise StepFailed(f"a round exited {proc.returncode}: "
                         f"{(proc.stderr or proc.stdout).strip()[-600:]}",
                         where=str(round_dir), fix=f"run it by hand: {shellscript.join(argv)}")
    (result,) = extract(round_dir)
    got = {}
    for s in series:
        value = next((m.value for m in result.metrics
                      if m.name == s.metric and m.subject == s.subject), None)
        if value is None:
            raise StepFailed(f"the round measured no {s.metric} {s.subject}",
                             where=str(round_dir), fix=f"run it by hand: {shellscript.join(argv)}")
        got[s.subject] = {"value": value, "times_ms": repetitions(round_dir, s.subject) or [value],
                          **dict(result.details.get("conditions", {}).get(s.subject) or {})}
    return got


def looks(req: ConfirmRequest) -> Looks:
    return Looks(req.rounds, max(req.rounds, req.max_rounds or req.rounds))


def pairs(measured: list[dict[str, Any]], subject: str) -> list[tuple[list[float], list[float]]]:
    """Each round's (good repetitions, bad repetitions) of one series."""
    by_round: dict[int, dict[str, list[float]]] = {}
    for m in measured:
        by_round.setdefault(m["round"], {})[m["side"]] = m["subjects"][subject]["times_ms"]
    return [(r["good"], r["bad"]) for _, r in sorted(by_round.items()) if len(r) == 2]


def holds(series: Series, measured: list[dict[str, Any]], min_change: float, level: float
          ) -> PairedVerdict:
    """The bad build worse than the good one beyond the machine's noise: the bad/good ratio
    from every repetition of every pair of rounds, its interval wholly on the worse side of
    1 at `level` and the ratio by at least `min_change` (runner.history.paired)."""
    return judge_pairs(pairs(measured, series.subject), WORSE_WHEN.get(series.metric, 1),
                 min_change, level)


def sequential(plan: Looks, series: list[Series], min_change: float,
               take: Callable[[int, str], dict[str, dict[str, Any]]]
               ) -> tuple[list[dict[str, Any]], dict[str, PairedVerdict]]:
    """Rounds taken (`take(i, side)`, in `sides` order) and judged at each of `plan`'s
    looks until every series is decided (it holds, or its estimate is short of
    `min_change`) or `plan.most` are taken: every round's values and each series' verdict,
    from the look that decided it (or the last)."""
    measured: list[dict[str, Any]] = []
    verdicts: dict[str, PairedVerdict] = {}
    for n in plan.at():
        for i in range(len(measured) // 2, n):
            measured += [{"round": i + 1, "side": side, "subjects": take(i, side)}
                         for side in sides(i)]
        for s in series:
            if s.subject not in verdicts or verdicts[s.subject].undecided:
                verdicts[s.subject] = holds(s, measured, min_change, plan.level())
        if not any(v.undecided for v in verdicts.values()):
            break
    return measured, verdicts


def interleaved(req: ConfirmRequest, series: list[Series], files: list[Path],
                tools: dict[str, str]) -> tuple[list[dict[str, Any]], dict[str, PairedVerdict]]:
    """Real rounds of the two builds, `sequential`ly judged."""
    plan = looks(req)

    def take(i: int, side: str) -> dict[str, dict[str, Any]]:
        round_dir = req.out / ROUNDS_DIR / f"{i + 1:02d}-{side}"
        argv = round_argv(tools[side], files, series[0].sku, round_dir, req.out / ROUNDS_STORE)
        print(f"confirm: round {i + 1} (at most {plan.most}), {side} "
              f"({getattr(req, side).spec}) ...", file=sys.stderr, flush=True)
        return measure_round(round_dir, series, argv)

    return sequential(plan, series, req.min_change, take)


def confirm_all(req: ConfirmRequest, series: list[Series]) -> list[Confirmation]:
    """Measures the two builds interleaved and judges each series from the same rounds."""
    file_of = {s.subject: golden_file(s) for s in series}
    tools = {"good": tools_dir(req.good, req.sources, False),
             "bad": tools_dir(req.bad, req.sources, False)}
    measured, verdicts = interleaved(req, series, list(dict.fromkeys(file_of.values())), tools)
    when = datetime.now(timezone.utc).replace(tzinfo=None, microsecond=0)
    return [confirmation(req, s, file_of[s.subject], measured, verdicts[s.subject], when)
            for s in series]


def confirm(req: ConfirmRequest, series: Series) -> Confirmation:
    (found,) = confirm_all(req, [series])
    return found


def confirmation(req: ConfirmRequest, series: Series, file: Path,
                 measured: list[dict[str, Any]], verdict: PairedVerdict, when: datetime
                 ) -> Confirmation:
    """One series' finding, every round's value, repetitions and conditions kept."""
    rounds = [{"round": m["round"], "side": m["side"], **m["subjects"][series.subject]}
              for m in measured if m["round"] <= verdict.rounds]
    values = {side: [r["value"] for r in sorted(rounds, key=lambda r: r["round"])
                     if r["side"] == side] for side in ("good", "bad")}
    plan = looks(req)
    return Confirmation(
        series.key(), req.good.spec, req.bad.spec, tuple(values["good"]), tuple(values["bad"]),
        verdict.holds, when, socket.gethostname(), str(req.out),
        {"good": spread(values["good"]).to_dict(), "bad": spread(values["bad"]).to_dict(),
         "verdict": verdict.to_dict(), "level": plan.level(), "looks": plan.at(),
         "file": str(file), "min_change": req.min_change, "rounds": rounds,
         "beside_foreign_load": sum(bool(r.get("beside_foreign_load")) for r in rounds)})


def confirmation_summary(c: Confirmation, series: Series) -> str:
    """One line for the console and confirm.md: the bad/good ratio with its interval, from
    how many rounds and repetitions, how many ran beside foreign load, and what that makes
    the change."""
    v = c.details["verdict"]
    verdict = ("the difference holds: a regression of IREE's" if c.holds else
               "undecided: the estimate is past --min-change, its interval takes in no "
               "change (more rounds: --max-rounds)" if v["undecided"] else
               "the difference does not hold: the machine's, not IREE's")
    return (f"{series.label}: {c.bad} / {c.good} = {v['ratio']:.4f} [{v['low']:.4f}, "
            f"{v['high']:.4f}] at {v['confidence']:.2%} ({v['ratio'] - 1:+.1%}; "
            f"{v['rounds']} interleaved rounds each, {v['repetitions']} repetitions, on "
            f"{c.machine}; {c.details['beside_foreign_load']} run(s) beside foreign load): "
            f"{verdict}\n")


def confirm_dry_run(req: ConfirmRequest, series: list[Series], store: str) -> list[str]:
    """The exact commands a confirmation runs: each build's setup where it is not cached,
    then the rounds before the first look in their order, and when more are added."""
    from runner.bisect.envs import plan_setup, setup_lines

    files = list(dict.fromkeys(golden_file(s) for s in series))
    plan = looks(req)
    lines = [f"# confirm {', '.join(s.label for s in series)}: {req.good.spec} and "
             f"{req.bad.spec}, {req.rounds} interleaved round(s) each on "
             f"{socket.gethostname()}, judged at {plan.level():.2%}"]
    tools = {}
    for side in ("good", "bad"):
        build = getattr(req, side)
        setup = plan_setup(build, req.sources)
        cached = setup.root is not None and (setup.root / "build.json").is_file()
        lines += [f"# {build.spec}: cached in {setup.root}"] if cached else setup_lines(setup)
        tools[side] = tools_dir(build, req.sources, dry_run=True)
    for i in range(req.rounds):
        for side in sides(i):
            lines.append(shellscript.join(round_argv(
                tools[side], files, series[0].sku, req.out / ROUNDS_DIR / f"{i + 1:02d}-{side}",
                req.out / ROUNDS_STORE)))
    if plan.most > req.rounds:
        lines.append(f"# then, while a series is undecided, the same rounds again, judged "
                     f"after {', '.join(map(str, plan.at()[1:]))} rounds")
    lines.append(f"# would store the confirmation in {store} and write "
                 f"{req.out / CONFIRM_JSON}, {req.out / CONFIRM_MD}")
    return lines

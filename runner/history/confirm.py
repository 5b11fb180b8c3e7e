"""`runner history confirm`: a change across two builds measured again before it counts.

A step in the history compares runs made on different nights, beside whatever else the
machine did each night. Confirming it measures the last good and first bad builds again on
this machine, interleaved (good, bad, good, bad, ... as Chromium's Pinpoint does), so both
see the same neighbours and the same machine state. Each round is a real `runner bench
goldens` of the series' test file with that build's IREE tools (installed once per build
in a cached venv by the bisect machinery, runner/bisect/envs.py), read back by the same
extraction the history records with. The change holds when the bad build's interval of the
median (runner.base.spread) lies wholly on the worse side of the good build's, by at least
`--min-change`; the confirmation is stored, and `runner history` judges the change by it
(runner/history/judge.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from runner.base import shellscript
from runner.base.errors import BadInput, StepFailed
from runner.base.paths import GOLDENS_DIR
from runner.base.spread import Spread, spread
from runner.bisect.builds import Build, Sources
from runner.history.extract import extract
from runner.history.judge import CONFIRMABLE
from runner.history.model import WORSE_WHEN, Confirmation, Result
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
    rounds: int
    min_change: float
    out: Path
    sources: Sources


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


def round_argv(tools: str, file: Path, sku: str, out: Path, store: Path) -> list[str]:
    """One round: bench goldens of the one file with the build's tools, recording into the
    confirmation's own store, not the history."""
    return [sys.executable, "-m", "runner", "--iree-tools", tools, "bench", "goldens", str(file),
            "--sku", sku, "--out", str(out), "--results", str(store)]


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


def measure_round(round_dir: Path, series: Series, argv: list[str]) -> tuple[float, dict[str, Any]]:
    """The round's number, read as the history reads it, and its conditions."""
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
    value = next((m.value for m in result.metrics
                  if m.name == series.metric and m.subject == series.subject), None)
    if value is None:
        raise StepFailed(f"the round measured no {series.metric} {series.subject}",
                         where=str(round_dir), fix=f"run it by hand: {shellscript.join(argv)}")
    return value, dict(result.details.get("conditions", {}).get(series.subject) or {})


def holds(series: Series, good: Spread, bad: Spread, min_change: float) -> bool:
    """The bad build's interval wholly on the worse side of the good's, by `min_change`."""
    worse = WORSE_WHEN.get(series.metric, 1)
    relative = bad.median / good.median - 1.0 if good.median else float("inf")
    return bad.apart_from(good) and relative * worse >= min_change


def interleaved(req: ConfirmRequest, series: Series, file: Path, tools: dict[str, str]
                ) -> dict[str, Any]:
    """Good, bad, good, bad, ...: `req.rounds` of each, every value and its conditions."""
    values: dict[str, list[float]] = {"good": [], "bad": []}
    conditions: list[dict[str, Any]] = []
    for i in range(req.rounds):
        for side in ("good", "bad"):
            round_dir = req.out / ROUNDS_DIR / f"{i + 1:02d}-{side}"
            argv = round_argv(tools[side], file, series.sku, round_dir, req.out / ROUNDS_STORE)
            print(f"confirm: round {i + 1}/{req.rounds}, {side} "
                  f"({getattr(req, side).spec}) ...", file=sys.stderr, flush=True)
            value, cond = measure_round(round_dir, series, argv)
            values[side].append(value)
            conditions.append({"round": i + 1, "side": side, "value": value, **cond})
    return {"values": values, "conditions": conditions}


def confirm(req: ConfirmRequest, series: Series) -> Confirmation:
    """Measures the two builds interleaved and judges the difference."""
    file = golden_file(series)
    tools = {"good": tools_dir(req.good, req.sources, False),
             "bad": tools_dir(req.bad, req.sources, False)}
    got = interleaved(req, series, file, tools)
    good, bad = spread(got["values"]["good"]), spread(got["values"]["bad"])
    busy = sum(bool(c.get("beside_foreign_load")) for c in got["conditions"])
    return Confirmation(
        series.key(), req.good.spec, req.bad.spec, tuple(got["values"]["good"]),
        tuple(got["values"]["bad"]), holds(series, good, bad, req.min_change),
        datetime.now(timezone.utc).replace(tzinfo=None, microsecond=0), socket.gethostname(),
        str(req.out), {"good": good.to_dict(), "bad": bad.to_dict(), "file": str(file),
                       "min_change": req.min_change, "rounds": got["conditions"],
                       "beside_foreign_load": busy})


def confirmation_summary(c: Confirmation, series: Series) -> str:
    """One line for the console and confirm.md: both medians with their intervals, the
    rounds and how many ran beside foreign load, and what that makes the change."""
    good, bad = Spread.from_dict(c.details["good"]), Spread.from_dict(c.details["bad"])
    assert good is not None and bad is not None
    unit = f" {series.unit}" if series.unit else ""
    verdict = ("the difference holds: a regression of IREE's" if c.holds else
               "the difference does not hold: the machine's, not IREE's")
    return (f"{series.label}: {c.good} median {good.median:.4g}{unit} [{good.low:.4g}, "
            f"{good.high:.4g}], {c.bad} median {bad.median:.4g}{unit} [{bad.low:.4g}, "
            f"{bad.high:.4g}] ({bad.median / good.median - 1:+.1%}; {good.n} interleaved "
            f"rounds each on {c.machine}, intervals at {good.confidence:.0%}; "
            f"{c.details['beside_foreign_load']} round(s) beside foreign load): {verdict}\n")


def confirm_dry_run(req: ConfirmRequest, series: Series, store: str) -> list[str]:
    """The exact commands a confirmation runs: each build's setup where it is not cached,
    then the rounds in their order."""
    from runner.bisect.envs import plan_setup, setup_lines

    file = golden_file(series)
    lines = [f"# confirm {series.label}: {req.good.spec} and {req.bad.spec}, "
             f"{req.rounds} interleaved round(s) each on {socket.gethostname()}"]
    tools = {}
    for side in ("good", "bad"):
        build = getattr(req, side)
        setup = plan_setup(build, req.sources)
        cached = setup.root is not None and (setup.root / "build.json").is_file()
        lines += [f"# {build.spec}: cached in {setup.root}"] if cached else setup_lines(setup)
        tools[side] = tools_dir(build, req.sources, dry_run=True)
    for i in range(req.rounds):
        for side in ("good", "bad"):
            lines.append(shellscript.join(round_argv(
                tools[side], file, series.sku, req.out / ROUNDS_DIR / f"{i + 1:02d}-{side}",
                req.out / ROUNDS_STORE)))
    lines.append(f"# would store the confirmation in {store} and write "
                 f"{req.out / CONFIRM_JSON}, {req.out / CONFIRM_MD}")
    return lines

"""One night: the build's steps into a dated dir, each recorded in the history, a new build
measured against the previous one on its first night (runner/nightly/ab.py: a step the
history could only tell after several nights is confirmed that night), the history judged,
and a regression between two nights' builds confirmed and bisected.

The night dir's `nightly.json` holds every step through `runner.base.steps.Steps`, so the
same night run again (a scheduler's retry, a killed job) skips what finished. A regression
is the history's own judgement (`runner.history.changes.detect_all`, as `runner history`
makes it) over this machine's results of the profile, handled once, by the first night
that sees it. A series `runner history confirm` measures (bench goldens times) is confirmed
first: its two builds measured again, interleaved, the finding stored; one that did not
hold is the machine's and is not bisected. The bisect measures both ends again before it
searches too (runner/bisect/search.py): an end that no longer differs answers
`no_change`, and the night names no culprit.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from runner.base.errors import EXIT_FAILED, EXIT_OK, RunnerError, StepFailed
from runner.base.fileio import atomic_write_json
from runner.base.outcome import Outcome
from runner.base.steps import Steps
from runner.bisect.builds import Build, Sources
from runner.history.paired import DEFAULT_MAX_ROUNDS, DEFAULT_ROUNDS
from runner.nightly.pick import measured_here, measured_in_store, night_dir_name, unfinished
from runner.nightly.plan import NightStep, night_steps

NIGHT_STATE = "nightly.json"
WORSE_ACROSS_BUILDS = (Outcome.REGRESSION, Outcome.UNCONFIRMED)  # what a night bisects


@dataclass(frozen=True)
class NightRequest:
    """What the scheduler asked for, checked (runner/nightly/cli.py)."""

    root: Path  # --out: the nights live under it, one dir each
    build: Build
    sources: Sources
    profile: str
    day: str  # UTC date, the night dir's prefix
    results: str | None = None
    bisect: bool = True
    count: int | None = None  # --count: the run's and the bench's samples (None: the profile's)
    ab: bool = True  # a new build measured against the previous one on its first night
    rounds: int = DEFAULT_ROUNDS  # --rounds, --max-rounds: the A/B's and the confirmations'
    max_rounds: int = DEFAULT_MAX_ROUNDS


def summary_of(req: NightRequest, status: str, night: Path | None, **more: Any
               ) -> dict[str, Any]:
    """The summary printed, kept in nightly.json and posted to the webhook."""
    head = {"skipped": f"nightly {req.build.label}: already measured on this machine",
            "passed": f"nightly {req.build.label}: measured, no regression",
            "failed": f"nightly {req.build.label}: a check failed",
            "regression": f"nightly {req.build.label}: regression",
            "error": f"nightly {req.build.label}: the night stopped on an error"}[status]
    ab = more.get("new_build")
    if ab:
        held = [x for x in ab["series"] if x["holds"]]
        head += (f"; against {ab['good']}, interleaved: slower in {len(held)} of "
                 f"{len(ab['series'])} series" + "".join(
                     f", {x['subject']} {x['ratio'] - 1:+.1%}" for x in held))
    culprit = more.get("culprit")
    if culprit:
        head += f"; first bad build {culprit['first_bad']}"
    return {"headline": head, "status": status, "build": req.build.spec,
            "profile": req.profile, "machine": socket.gethostname(), "day": req.day,
            "night_dir": str(night) if night else None, **more}


def skip_reason(req: NightRequest) -> str | None:
    """Where this machine measured tonight's build before, or None. The results of a
    night that did not finish do not count: that night goes on."""
    found = measured_here(req.root, req.build)
    if found is not None:
        return str(found)
    stored = [d for d in measured_in_store(req.results, req.build, req.profile)
              if not unfinished(Path(d).parent)]
    return stored[-1] if stored else None


def _load(night: Path, req: NightRequest) -> dict[str, Any]:
    path = night / NIGHT_STATE
    state = json.loads(path.read_text()) if path.is_file() else {}
    state.setdefault("steps", {})
    state.update(build=req.build.to_dict(), profile=req.profile, day=req.day)
    return state


def _run_step(step: NightStep, python: str, environ: dict[str, str], night: Path
              ) -> dict[str, Any]:
    """Runs one step, its output into logs/; exit 0 and 1 are measured (1: a verdict
    failed), any other code fails the night (run it again: finished steps are kept)."""
    argv = step.argv(python, night)
    log = night / "logs" / f"{step.name.replace(' ', '-')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        rc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False,
                            stdin=subprocess.DEVNULL, env=environ).returncode
    if rc not in (EXIT_OK, EXIT_FAILED):
        tail = log.read_text(errors="replace")[-800:]
        raise StepFailed(f"`{shlex.join(argv[1:])}` exited {rc}:\n{tail}",
                         where=f"nightly step {step.name}", fix=f"see {log}; the same "
                         "command again goes on from this step")
    return {"exit_code": rc, "out": str(night / step.subdir), "log": str(log)}


def measure_night(req: NightRequest, night: Path, steps: Steps) -> list[dict[str, Any]]:
    """Every step of the night with the build's IREE; each step's results recorded."""
    from runner.bisect.envs import ensure_env
    from runner.history.record import RECORD_ENV, RECORD_OFF, record

    env = ensure_env(req.build, req.sources)
    python, environ = env.python, env.environ()
    environ[RECORD_ENV] = RECORD_OFF  # the night records each step itself, below
    key = f"{req.build.spec} {req.profile}" + (f" --count {req.count}" if req.count else "")
    done = []
    for step in night_steps(req.profile, req.count):
        detail, skipped = steps.run(step.name, key, partial(_run_step, step, python, environ,
                                                            night), say="nightly")
        if step.records and not skipped:
            record(step.records, Path(detail["out"]), req.results, build=req.build.spec)
        done.append({"step": step.name, **detail})
    return done


def night_build(out_dir: str) -> str | None:
    """The build a night measured, read from the nightly.json above a step's out dir: the
    spec pip installs it by (`wheels:3.13.0`), where the history holds the version its
    wheels report (`3.13.0rc20261016`)."""
    record = Path(out_dir).parent / NIGHT_STATE
    try:
        spec = json.loads(record.read_text())["build"]["spec"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return spec if isinstance(spec, str) else None


def new_regressions(req: NightRequest) -> list[Any]:
    """The history's regressions on this machine, of the profile (and of the goldens, which
    have none), whose first point after the step is a night's under `--out`, and which no
    night has bisected yet (`runner.history.changes.Change`). A step at the newest build
    boundary is named on the new build's own night where it shows beyond both builds'
    spread (`changes.build_step`: a size or dispatch count at once); any other once MIN_SIZE
    points lie on each side of it, so the night that sees it may come after the night of
    the build that brought it."""
    from runner.history.changes import detect_all
    from runner.history.judge import judge_changes
    from runner.history.series import series_of
    from runner.history.store import Query, opened
    from runner.history.url import resolve

    try:
        with opened(resolve(req.results)) as store:
            results = store.query(Query(machine=socket.gethostname()))
            confirmations = store.confirmations()
    except (RunnerError, ImportError) as e:  # an unreachable store judges nothing, fails nothing
        print(f"nightly: the history could not be judged ({str(e).splitlines()[0]})",
              file=sys.stderr)
        return []
    mine = [r for r in results if r.profile in (req.profile, "")]
    done = bisected(req.root)
    # The history's judgement, as `runner history` gives it: a step of the machine's (one
    # build on both sides, or its conditions changed) is not IREE's and is not bisected; one
    # worse across two builds is, and the bisect measures both ends again first.
    judged = judge_changes(detect_all(series_of(mine)), confirmations)
    return [c for c in judged if c.kind in WORSE_ACROSS_BUILDS
            and Path(c.first_after.result.out_dir).parent.parent == req.root
            and tuple(ends(c)) not in done]


def ends(change: Any) -> list[str | None]:
    """The builds on each side of a change, as the nights that measured them name them."""
    return [night_build(change.last_before.result.out_dir),
            night_build(change.first_after.result.out_dir)]


def bisected(root: Path) -> set[tuple[str | None, ...]]:
    """The (good, bad) pairs the nights under `root` bisected already (a night with
    --no-bisect names a regression and leaves it to the next)."""
    pairs = set()
    for record in root.glob(f"*/{NIGHT_STATE}"):
        try:
            found = json.loads(record.read_text()).get("summary", {}).get("regressions", [])
        except (OSError, ValueError, AttributeError):
            continue
        pairs |= {tuple(r["ends"]) for r in found
                  if isinstance(r, dict) and r.get("ends") and r.get("bisected")}
    return pairs


def bisect_argv(req: NightRequest, change: Any, out: Path) -> list[str] | None:
    """`runner bisect` from the build before the step to the one after, with the test that sees
    the change (`Change.test()`: accuracy, compstat, or throughput with its repeats), or
    None where the build before cannot be installed again."""
    good, bad = ends(change)
    return bisect_between(req, good, bad, change.test(), out)


def bisect_between(req: NightRequest, good: str | None, bad: str | None, test: str, out: Path
                   ) -> list[str] | None:
    """`runner bisect` from `good` to `bad` with `test`, or None where a side is unknown."""
    if good is None or bad is None or good == bad:
        return None
    argv = [sys.executable, "-m", "runner", "bisect", "--good", good, "--bad", bad,
            "--test", test, "--profile", req.profile, "--out", str(out)]
    if req.sources.find_links:
        argv += ["--find-links", req.sources.find_links]
    if req.sources.pre:
        argv.append("--pre")
    return argv


def no_bisect_reason(pair: list[str | None]) -> str:
    if None in pair:
        return "a side was measured outside the nights under --out: no nightly.json names its build"
    return "the same build on both sides: the machine, its load or the inputs changed, not IREE"


def _bisect(argv: list[str], out: Path, log: Path) -> dict[str, Any]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as sink:
        rc = subprocess.run(argv, stdout=sink, stderr=subprocess.STDOUT, check=False,
                            stdin=subprocess.DEVNULL).returncode
    state = out / "bisect.json"
    if rc != EXIT_OK or not state.is_file():
        raise StepFailed(f"the bisect exited {rc}: "
                         f"{log.read_text(errors='replace')[-800:]}",
                         where="nightly step bisect", fix=f"see {log}; the same command "
                         "again resumes the bisect")
    answer = json.loads(state.read_text()).get("answer", {})
    return {"answer": answer, "out": str(out), "log": str(log)}


def confirm_argv(req: NightRequest, change: Any, out: Path) -> list[str] | None:
    """`runner history confirm` as the history prints it for the change (`Change.confirm`:
    a series it measures again, CONFIRMABLE, of two builds an index serves), into `out`,
    from the night's package sources; None where the history has none for it. The store is
    passed in the environment (`confirm_env`): its URL may hold a password, and the argv is
    kept in nightly.json."""
    if not change.confirm:
        return None
    argv = [sys.executable, "-m", *shlex.split(change.confirm)]  # runner history confirm ...
    argv[argv.index("--out") + 1] = str(out)
    if req.sources.find_links:
        if "--find-links" in argv:
            argv[argv.index("--find-links") + 1] = req.sources.find_links
        else:
            argv += ["--find-links", req.sources.find_links]
    if req.sources.pre and "--pre" not in argv:
        argv.append("--pre")
    return [*argv, "--rounds", str(req.rounds), "--max-rounds", str(req.max_rounds)]


def confirm_env(req: NightRequest) -> dict[str, str]:
    """The night's own environment with its store, which confirm stores its finding in."""
    from runner.history.url import ENV

    return {**os.environ, **({ENV: req.results} if req.results else {})}


def _confirm(argv: list[str], environ: dict[str, str], out: Path, log: Path
             ) -> dict[str, Any]:
    """Exit 1: the difference held (a regression); 0: it did not (the machine's)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as sink:
        rc = subprocess.run(argv, stdout=sink, stderr=subprocess.STDOUT, check=False,
                            stdin=subprocess.DEVNULL, env=environ).returncode
    found = out / "confirm.json"
    if rc not in (EXIT_OK, EXIT_FAILED) or not found.is_file():
        raise StepFailed(f"the confirmation exited {rc}: "
                         f"{log.read_text(errors='replace')[-800:]}",
                         where="nightly step confirm", fix=f"see {log}; the same command "
                         "again measures it again")
    return {"holds": bool(json.loads(found.read_text())["holds"]), "out": str(out),
            "log": str(log)}


def confirmed(req: NightRequest, change: Any, night: Path, n: int, steps: Steps
              ) -> bool | None:
    """Whether the change held when its two builds were measured again, interleaved
    (`runner history confirm`, which stores its finding), or None where confirm does not
    measure its series (the bisect measures both ends again first instead)."""
    if change.kind == Outcome.REGRESSION:  # a confirmation that held is stored already
        return True
    out = night / f"confirm-{n}"
    argv = confirm_argv(req, change, out)
    if argv is None:
        return None
    work = partial(_confirm, argv, confirm_env(req), out, night / "logs" / f"confirm-{n}.log")
    detail, _ = steps.run(f"confirm {n}", shlex.join(argv[1:]), work, say="nightly")
    return bool(detail["holds"])


def culprit_of(item: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any] | None:
    """The culprit the bisect confirmed, or None where both ends now measure alike."""
    if not answer or answer.get("no_change"):
        return None
    evidence = answer.get("evidence", {})
    return {"first_bad": answer.get("first_bad"), "last_good": answer.get("last_good"),
            "exact": bool(answer.get("exact")), "text": answer.get("text"),
            "evidence": evidence.get("verdict", {}).get("metric"),
            "confidence": round(item["confidence"], 6),
            "metric": item.get("metric") or item["change"], "relative": item["relative"],
            "dispatches_moved": evidence.get("dispatch_changes")
            or evidence.get("dispatch_note"),
            "changed_samples": len(evidence.get("changed_samples") or [])}


def first_night_ab(req: NightRequest, night: Path, steps: Steps) -> dict[str, Any] | None:
    """Where the build changed tonight, the new build measured against the previous one,
    interleaved (runner/nightly/ab.py), its findings stored; None where it did not (or
    --no-ab)."""
    from runner.nightly import ab

    found = ab.ab_plan(req, night) if req.ab else None
    if found is None:
        return None
    key = f"{found.good} {req.build.spec} rounds {req.rounds}..{req.max_rounds}"
    detail, _ = steps.run("ab", key, partial(ab.measure_ab, req, found, night / ab.AB_DIR),
                          say="nightly")
    return detail


def ab_regression(new_build: dict[str, Any] | None) -> dict[str, Any] | None:
    """The A/B's finding as the night's regression, where it held in a series."""
    held = [x for x in (new_build or {}).get("series", []) if x["holds"]]
    if not held or new_build is None:
        return None
    return {"change": "; ".join(x["line"] for x in held), "confidence": min(
        x["confidence"] for x in held), "ends": [new_build["good"], new_build["bad"]],
        "confirmed": True, "first_night_ab": True,
        "relative": max(x["ratio"] - 1 for x in held)}


def follow(req: NightRequest, night: Path, steps: Steps, item: dict[str, Any],
           argv: list[str] | None, n: int) -> dict[str, Any]:
    """A regression's bisect, where it held (or confirm does not measure it) and bisect is
    on, else why not."""
    if item["confirmed"] is False:
        item["no_bisect"] = ("measured again, interleaved: the difference did not hold "
                             "(the machine's, or undecided within --max-rounds)")
    elif req.bisect and argv is not None:
        log = night / "logs" / f"bisect-{n}.log"
        detail, _ = steps.run(f"bisect {n}", shlex.join(argv[1:]),
                              partial(_bisect, argv, Path(argv[argv.index("--out") + 1]), log),
                              say="nightly")
        item.update(bisected=True, culprit=culprit_of(item, detail["answer"]))
    elif argv is None:
        item["no_bisect"] = no_bisect_reason(item["ends"])
    return item


def investigate(req: NightRequest, night: Path, steps: Steps,
                new_build: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The A/B's regression, where it held, and each regression of the history no night has
    bisected yet: its line, its confirmation where `runner history confirm` measures its
    series (one that did not hold is not bisected), and (with bisect on) the confirmed
    culprit between the builds on each side of it."""
    from runner.history.changes import throughput_test

    found: list[dict[str, Any]] = []
    item = ab_regression(new_build)
    if item is not None:
        good, bad = item["ends"]
        argv = bisect_between(req, good, bad, throughput_test(item["relative"]),
                              night / "bisect-0")
        found.append(follow(req, night, steps, item, argv, 0))
    handled = {tuple(f["ends"]) for f in found}
    for change in new_regressions(req):
        if tuple(ends(change)) in handled:  # the A/B found it tonight
            continue
        item = {"change": change.line(), "confidence": change.confidence,
                "ends": ends(change), "relative": change.relative,
                "metric": change.series.label}
        argv = bisect_argv(req, change, night / f"bisect-{len(found)}")
        item["confirmed"] = confirmed(req, change, night, len(found), steps)
        found.append(follow(req, night, steps, item, argv, len(found)))
    return found


def stands(item: dict[str, Any]) -> bool:
    """Whether a regression the night investigated stands: its bisect named a culprit, or
    (not bisected: --no-bisect, or builds a bisect cannot install) its confirmation held. A
    bisect that measured both ends alike again overrules the history's step."""
    return bool(item.get("culprit")) or (item.get("confirmed") is True
                                         and not item.get("bisected"))


def night_status(regressions: list[dict[str, Any]], checks_failed: list[str]) -> str:
    """The night's status: `regression` where one stands, else `failed` where a check failed,
    else `passed`; the first two exit 1."""
    return ("regression" if any(map(stands, regressions)) else
            "failed" if checks_failed else "passed")


def run_night(req: NightRequest) -> dict[str, Any]:
    """The night, start to end (or skipped): its summary, `exit_code` included."""
    reason = skip_reason(req)
    if reason is not None:
        return {**summary_of(req, "skipped", None, measured_in=reason), "exit_code": EXIT_OK}
    night = req.root / night_dir_name(req.day, req.build)
    night.mkdir(parents=True, exist_ok=True)
    state = _load(night, req)
    steps = Steps(state["steps"], lambda: atomic_write_json(night / NIGHT_STATE, state))
    done = measure_night(req, night, steps)
    state["measured"] = True
    steps.save()
    new_build = first_night_ab(req, night, steps)
    regressions = investigate(req, night, steps, new_build)
    checks_failed = [d["step"] for d in done if d.get("exit_code") == EXIT_FAILED]
    status = night_status(regressions, checks_failed)
    culprits = [r["culprit"] for r in regressions if r.get("culprit")]
    summary = summary_of(req, status, night, steps=done, regressions=regressions,
                         checks_failed=checks_failed, culprit=culprits[0] if culprits else None,
                         new_build=new_build)
    summary["exit_code"] = EXIT_OK if status == "passed" else EXIT_FAILED
    state["summary"] = summary
    steps.save()
    return summary

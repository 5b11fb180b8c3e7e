"""One night: the build's steps into a dated dir, each recorded in the history, the history
judged, and a regression that tonight's build brought confirmed and bisected.

The night dir's `nightly.json` holds every step through `runner.base.steps.Steps`, so the
same night run again (a scheduler's retry, a killed job) skips what finished. A regression
is the history's own judgement (`runner.history.changes.detect_all`, as `runner history`
makes it) over this machine's results of the profile; the bisect that follows measures
both ends again before it searches (runner/bisect/search.py), which is the confirmation: an
end that no longer differs answers `no_change`, and the night names no culprit.
"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from runner.base.errors import EXIT_FAILED, EXIT_OK, RunnerError, StepFailed
from runner.base.fileio import atomic_write_json
from runner.base.steps import Steps
from runner.bisect.builds import Build, Sources
from runner.nightly.pick import measured_here, measured_in_store, night_dir_name
from runner.nightly.plan import NightStep, night_steps

NIGHT_STATE = "nightly.json"


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
    argv: list[str] = field(default_factory=list)


def summary_of(req: NightRequest, status: str, night: Path | None, **more: Any
               ) -> dict[str, Any]:
    """The summary printed, kept in nightly.json and posted to the webhook."""
    head = {"skipped": f"nightly {req.build.label}: already measured on this machine",
            "passed": f"nightly {req.build.label}: measured, no regression",
            "failed": f"nightly {req.build.label}: a check failed",
            "regression": f"nightly {req.build.label}: regression",
            "error": f"nightly {req.build.label}: the night stopped on an error"}[status]
    culprit = more.get("culprit")
    if culprit:
        head += f"; first bad build {culprit['first_bad']}"
    return {"headline": head, "status": status, "build": req.build.spec,
            "profile": req.profile, "machine": socket.gethostname(), "day": req.day,
            "night_dir": str(night) if night else None, **more}


def skip_reason(req: NightRequest) -> str | None:
    """Where this machine measured tonight's build before, or None."""
    found = measured_here(req.root, req.build)
    if found is not None:
        return str(found)
    return measured_in_store(req.results, req.build, req.profile)


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
    from runner.history.record import record

    env = ensure_env(req.build, req.sources)
    python, environ = env.python, env.environ()
    environ.pop("RUNNER_RESULTS_URL", None)  # the night records each step itself, below
    key = f"{req.build.spec} {req.profile}"
    done = []
    for step in night_steps(req.profile):
        detail, skipped = steps.run(step.name, key, partial(_run_step, step, python, environ,
                                                            night), say="nightly")
        if step.records and not skipped:
            record(step.records, Path(detail["out"]), req.results)
        done.append({"step": step.name, **detail})
    return done


def tonights_regressions(req: NightRequest) -> list[Any]:
    """The history's regressions on this machine and profile whose first point after the
    step is tonight's build (`runner.history.changes.Change`)."""
    from runner.history.changes import detect_all
    from runner.history.series import series_of
    from runner.history.store import Query, opened
    from runner.history.url import resolve

    try:
        with opened(resolve(req.results)) as store:
            results = store.query(Query(profile=req.profile, machine=socket.gethostname()))
    except (RunnerError, ImportError) as e:  # an unreachable store judges nothing, fails nothing
        print(f"nightly: the history could not be judged ({str(e).splitlines()[0]})",
              file=sys.stderr)
        return []
    tonight = {req.build.spec, req.build.version, req.build.commit} - {None}
    return [c for c in detect_all(series_of(results)) if c.regression
            and (c.first_after.result.build in tonight
                 or c.first_after.result.compiler_version in tonight)]


def bisect_argv(req: NightRequest, change: Any, out: Path) -> list[str] | None:
    """`runner bisect` from the build before the step to tonight's, with the test that sees
    the change (`Change.test()`: accuracy, compstat, or throughput with its repeats), or
    None where the build before cannot be installed again."""
    from runner.history.changes import build_spec

    good = build_spec(change.last_before)
    if good is None or good[0] == req.build.spec:
        return None
    argv = [sys.executable, "-m", "runner", "bisect", "--good", good[0], "--bad",
            req.build.spec, "--test", change.test(), "--profile", req.profile,
            "--out", str(out)]
    if req.sources.find_links:
        argv += ["--find-links", req.sources.find_links]
    if req.sources.pre or "--pre" in good[1]:
        argv.append("--pre")
    return argv


def _bisect(argv: list[str], out: Path, log: Path) -> dict[str, Any]:
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


def culprit_of(change: Any, answer: dict[str, Any]) -> dict[str, Any] | None:
    """The culprit the bisect confirmed, or None where both ends now measure alike."""
    if not answer or answer.get("no_change"):
        return None
    evidence = answer.get("evidence", {})
    return {"first_bad": answer.get("first_bad"), "last_good": answer.get("last_good"),
            "exact": bool(answer.get("exact")), "text": answer.get("text"),
            "confidence": round(change.confidence, 6), "metric": change.series.label,
            "relative": change.relative,
            "dispatches_moved": evidence.get("dispatch_changes")
            or evidence.get("dispatch_note"),
            "changed_samples": len(evidence.get("changed_samples") or [])}


def investigate(req: NightRequest, night: Path, steps: Steps) -> list[dict[str, Any]]:
    """Each regression tonight's build brought: its line, and (with bisect on) the
    confirmed culprit between the build before and tonight's."""
    found: list[dict[str, Any]] = []
    for change in tonights_regressions(req):
        item: dict[str, Any] = {"change": change.line(), "confidence": change.confidence}
        out = night / f"bisect-{len(found)}"
        argv = bisect_argv(req, change, out)
        if req.bisect and argv is not None:
            log = night / "logs" / f"bisect-{len(found)}.log"
            detail, _ = steps.run(f"bisect {len(found)}", shlex.join(argv[1:]),
                                  partial(_bisect, argv, out, log), say="nightly")
            item["culprit"] = culprit_of(change, detail["answer"])
        elif argv is None:
            item["no_bisect"] = change.why_no_bisect()
        found.append(item)
    return found


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
    regressions = investigate(req, night, steps)
    confirmed = [r["culprit"] for r in regressions if r.get("culprit")]
    checks_failed = [d["step"] for d in done if d.get("exit_code") == EXIT_FAILED]
    status = ("regression" if confirmed else "failed" if checks_failed else "passed")
    summary = summary_of(req, status, night, steps=done, regressions=regressions,
                         checks_failed=checks_failed,
                         culprit=confirmed[0] if confirmed else None)
    summary["exit_code"] = EXIT_FAILED if confirmed or checks_failed else EXIT_OK
    state["summary"] = summary
    steps.save()
    return summary

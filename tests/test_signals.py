"""Every command that writes an --out, stopped by a signal and run again (tests/signal_battery.py):
it resumes or refuses as its help says, never crashes, never loses finished work, never
leaves a process running. The stop itself is one mechanism, the command wrapper's, so it
gets the battery (SIGINT, SIGTERM and SIGHUP at seeded random points, more seeds) through
`runner run`; every other command is stopped once, at the first point of its own run where
its rerun's behaviour shows (its first finished part, a process it started, or its claimed
--out), and run again to its end. The tiny model keeps each command to seconds; the ones
that build images, export with torch or install IREE builds are marked slow."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from cli_support import STOP_SIGNALS, at_default, cli
from host_support import host_build_tree
from repo_support import REPO
from signal_battery import (
    MORE_SEEDS,
    Command,
    Point,
    attempt,
    attempt_as_child_starts,
    attempt_at_its_end,
    attempt_when,
    check_clean,
    claimed,
    done_keys,
    finished_a_part,
    run_battery,
    running_a_child,
    share_timings,
    stop_and_go_on,
    went_on,
)

from runner.base.outdir import RECORD, REFUSES, RESUMES, Rerun
from runner.base.procs import ProcessGuard
from runner.cli.grammar import walk
from runner.cli.main import build_parser
from runner.rundir.directory import RunDir

TINY_GOLDENS = REPO / "goldens" / "tiny"


@pytest.fixture(autouse=True, scope="session")
def _timed_once(tmp_path_factory) -> None:
    """Each command's timed run (signal_battery.duration) serves every pytest-xdist worker."""
    share_timings(tmp_path_factory)


def rerun_rules() -> dict[str, Rerun]:
    """Each command with an --out (as typed, `bench goldens`) and its rerun rule."""
    return {" ".join(path): sub.get_default("out_spec").rerun for path, sub
            in walk(build_parser()) if sub.get_default("out_spec") is not None}


# Every command takes one path through the CLI's command wrapper (runner/cli/main.py main): a
# signal becomes one exception there, whichever signal it is, and the command's rerun code is
# the same whichever ended it. So the wrapper gets the whole battery (every signal, more
# seeds) through `runner run`, the command with the most processes to stop (a driver and its
# workers) and the most finished work to keep; every other command gets one signal, in turn
# by name so that each of the three reaches some of them, at its own point (`stop_at`), and
# its rerun then checked to its end (signal_battery.stop_and_go_on). The windows the battery
# found in single commands stay as tests of their own below (a signal as a command ends, while
# LoadGen's test process starts, while a build's probe runs, while a rerun is refused, while
# the wrapper takes stock of its processes).
EVERY_SIGNAL = frozenset({"run"})


def signals_for(name: str) -> tuple[int, ...]:
    """Every signal for the commands above; one for each other command, in turn by name."""
    if name in EVERY_SIGNAL:
        return STOP_SIGNALS
    others = sorted(set(rerun_rules()) - EVERY_SIGNAL)
    return (STOP_SIGNALS[others.index(name) % len(STOP_SIGNALS)],)


def _samples(out: Path) -> set[str]:
    return {p.name for p in (out / "samples").glob("*.png")}


def _has(*names: str) -> object:
    return lambda out: all((out / n).is_file() for n in names)


def _run_complete(out: Path) -> bool:
    return RunDir(out).exists() and RunDir(out).load().complete


def _run(out: Path, count: int = 4) -> list[str]:
    """`runner run` of the tiny model, unscored: its command line."""
    return ["run", "--profile", "tiny", "--count", str(count), "--no-score", "--out", str(out)]


FAST = [
    Command("run", _run, REFUSES, _run_complete, kept=_samples),
    Command("bench", lambda o: ["bench", "--profile", "tiny", "--count", "2", "--cpd", "1,2",
                                "--repetitions", "1", "--min-time", "1x", "--out", str(o)],
            REFUSES, _has("bench.json", "bench.md")),
    Command("mlperf", lambda o: ["mlperf", "--profile", "tiny", "--scenario", "offline,server",
                                 "--mode", "accuracy", "--count", "2", "--no-score",
                                 "--out", str(o)], REFUSES, _has("mlperf.json")),
    Command("goldens generate", lambda o: ["goldens", "generate", str(TINY_GOLDENS), "--to",
                                           "next", "--out", str(o)], RESUMES,
            _has("manifest.json")),
]


def stopped(cmd: Command, tmp: Path) -> None:
    """The wrapper's battery (`run`: every signal at seeded points), or, for every other
    command, its one signal at its own point and its rerun."""
    if cmd.name in EVERY_SIGNAL:
        history = run_battery(cmd, tmp, signals_for(cmd.name))
        assert [a.sig for a in history if a.interrupted]  # at least one signal hit it running
        return
    (sig,) = signals_for(cmd.name)
    stop_and_go_on(cmd, tmp, sig, stop_at(cmd), quick=cmd.name in QUICK)


@pytest.mark.parametrize("cmd", FAST, ids=[c.name for c in FAST])
@pytest.mark.slow
def test_a_stopped_command_goes_on_as_its_help_says(cmd, tmp_path, tiny_compiled):
    stopped(cmd, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("seed", MORE_SEEDS)
def test_more_seeds_stop_the_command_wrapper(seed, tmp_path, tiny_compiled):
    """The whole battery at other points of a run: a window a signal can fall into in the
    command wrapper or a run's workers is found here, by some seed, rather than by a user."""
    history = run_battery(FAST[0], tmp_path, seed=seed)
    assert [a.sig for a in history if a.interrupted]


# Once its work is done a process ignores the stop signals to its exit
# (runner.base.signals.work_done): the command wrapper (runner/cli/main.py), one path
# whichever command it runs, and mlperf's LoadGen test process (runner/loadgen/session.py).
# `run` ends through the wrapper with its workers, `mlperf` through its LoadGen test process
# too: each place a process records finished work as it ends, signalled there once.
AT_END = [c for c in FAST if c.name in ("run", "mlperf")]


@pytest.mark.parametrize("cmd", AT_END, ids=[c.name for c in AT_END])
@pytest.mark.slow
def test_a_signal_as_a_command_ends_loses_nothing_and_says_nothing_wrong(cmd, tmp_path,
                                                                         tiny_compiled):
    """SIGTERM (a scheduler's, `kill`'s) the moment the command prints its last line, while
    it and the processes it started record their work and exit: its exit status is its own
    (or, still recording, 143 with "interrupted" said and the rerun finishing it), never a
    death by the signal itself or a silent 143 after finished work."""
    a, out = attempt_at_its_end(cmd, tmp_path, signal.SIGTERM)
    assert a.sig == signal.SIGTERM, f"the last line never came\n{a.describe()}"
    check_clean(cmd, a, out)
    went_on(cmd, a, out)


@pytest.mark.slow
def test_ctrl_c_while_a_loadgen_test_process_starts_is_quiet(tmp_path, tiny_compiled):
    """Ctrl-C reaches the whole process group: the LoadGen test process `runner mlperf` has
    just started too, still starting Python. It ends without a traceback (runner.base.signals
    start_child), and the command says how to finish the run."""
    cmd, out = FAST[2], tmp_path / "out"
    a = attempt_as_child_starts(cmd, cmd.argv(out), signal.SIGINT, "LoadGen Offline/accuracy",
                                "runner.loadgen.session")
    assert a.interrupted, a.describe()
    check_clean(cmd, a, out)
    assert f"`runner mlperf --resume {out}` finishes it" in a.stderr, a.describe()


def _bisect(tmp: Path) -> Command:
    """Two build trees of this host's IREE and a script test that takes a moment."""
    good = host_build_tree(tmp / "trees" / "good")
    bad = host_build_tree(tmp / "trees" / "bad")
    script = 'sleep 2; case "$RUNNER_BUILD" in *bad) exit 3;; esac'
    return Command("bisect", lambda o: ["bisect", "--good", f"build-dir:{good}", "--bad",
                                        f"build-dir:{bad}", "--test", f"script:sh -c '{script}'",
                                        "--out", str(o)], RESUMES,
                   lambda o: "answer" in json.loads((o / "bisect.json").read_text()),
                   kept=lambda o: {s["build"] for s in json.loads(
                       (o / "bisect.json").read_text()).get("steps", [])}
                   if (o / "bisect.json").is_file() else set())


@pytest.mark.slow
def test_bisect_goes_on_from_its_finished_steps(tmp_path):
    stopped(_bisect(tmp_path), tmp_path)


SLOW = [
    Command("generate", lambda o: ["generate", "--profile", "tiny", "--count", "2", "--out",
                                   str(o)], RESUMES, _has("manifest.json")),
    Command("goldens check", lambda o: ["goldens", "check", str(TINY_GOLDENS), "--out",
                                        str(o)], RESUMES, _has("junit.xml")),
    Command("bench goldens", lambda o: ["bench", "goldens", str(REPO / "goldens" / "tiny-bench"),
                                        "--sku", "cpu", "--repetitions", "1", "-k", "clip",
                                        "--out", str(o)], RESUMES, _has("bench.json"), ok=(0, 1)),
    Command("goldens compare-steps", lambda o: ["goldens", "compare-steps", "--profile", "tiny",
                                                "--out", str(o)], RESUMES,
            _has("compare_steps.json"), ok=(0, 1)),
    Command("oracle", lambda o: ["oracle", "--out", str(o), "--samples", "0"], RESUMES,
            _has("manifest.json")),
    Command("compile", lambda o: ["compile", "--profile", "tiny", "--batch-sizes", "1,2",
                                  "--out", str(o)], RESUMES, lambda o: (o / "vmfb").is_dir()),
    Command("export", lambda o: ["export", "tiny", "--out", str(o)], RESUMES, _has("model.json")),
]


# Where each command but `run` is stopped: its first finished part where it keeps parts (the
# earliest point its rerun's keeping shows), the first process it starts where the stop has
# that to end too, else the moment it has claimed its --out (its rerun then does it all).
FIRST_PART = {"mlperf", "goldens generate", "bisect", "trend"}
A_CHILD = {"goldens check", "bench goldens"}
# Their work after the claim takes milliseconds: the signal may come once it is done.
QUICK = {"report", "compare", "history", "goldens propose"}


def _a_layout_measured(out: Path, pid: int) -> bool:
    """bench's first finished layout (after its recorded inputs): the rerun keeps it and
    measures the other layout and the stages."""
    return any(key.startswith("layout:") for key in done_keys(out))


def stop_at(cmd: Command) -> Point:
    if cmd.name == "bench":
        return _a_layout_measured
    if cmd.name in FIRST_PART:
        return finished_a_part(cmd)
    return running_a_child if cmd.name in A_CHILD else claimed


@pytest.mark.slow
@pytest.mark.parametrize("cmd", SLOW, ids=[c.name for c in SLOW])
def test_every_other_out_command_goes_on_as_its_help_says(cmd, tmp_path, tiny_compiled):
    stopped(cmd, tmp_path)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_compiled) -> Path:
    """A finished run for the commands that read one: two samples, the fewest FID scores
    (`calibrate` still loads its networks, scores one image, then the other, and computes
    its Fréchet distances: a signal has each of those to fall into), and each image read
    costs every attempt of every reading command."""
    run = tmp_path_factory.mktemp("battery") / "run"
    done = attempt(FAST[0], _run(run, count=2))
    assert done.rc == 0, done.describe()
    return run


@pytest.fixture(scope="module")
def tiny_store(tiny_run, tmp_path_factory) -> Path:
    """A results store holding the finished run and a `bench goldens` run of one test
    (what `goldens propose` reads: it proposes for that test), for the commands that read
    a history."""
    store = tmp_path_factory.mktemp("store") / "results.sqlite"
    bench = tmp_path_factory.mktemp("bench-goldens") / "out"
    benched = cli("bench", "goldens", REPO / "goldens" / "tiny-bench", "--sku", "cpu",
                  "--repetitions", "1", "-k", "clip", "--out", bench, "--results", store)
    assert benched.returncode in (0, 1), benched.stderr  # measured (a loaded host: over)
    imported = cli("history", "import", tiny_run, "--results", store)
    assert imported.returncode == 0, imported.stderr
    return store


def _reading(name: str, run: Path, store: Path) -> Command:
    if name == "history":
        return Command("history", lambda o: ["history", "--results", str(store), "--out",
                                             str(o)], RESUMES,
                       _has("history.json", "history.md", "history.html"))
    if name == "goldens propose":
        return Command("goldens propose", lambda o: [
            "goldens", "propose", str(REPO / "goldens" / "tiny-bench"), "--sku", "cpu",
            "--results", str(store), "--out", str(o)], RESUMES, _has("proposal.json"))
    if name == "compare":  # the run with itself: every image the same
        return Command("compare", lambda o: ["compare", str(run), str(run), "--out", str(o)],
                       RESUMES, _has("compare.json"))
    if name == "report":
        return Command("report", lambda o: ["report", str(run), "--out", str(o)], RESUMES,
                       _has("report.html", "junit.xml"))
    return Command("calibrate", lambda o: ["calibrate", str(run), "--profile", "tiny", "--out",
                                           str(o)], RESUMES, _has("calibration.json"))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["report", "calibrate", "compare", "history",
                                  "goldens propose"])
def test_commands_reading_a_run_go_on_as_their_help_says(name, tiny_run, tiny_store, tmp_path):
    stopped(_reading(name, tiny_run, tiny_store), tmp_path)


def _trend(tmp: Path) -> Command:
    """Each build's probe runs the tiny model in that build's environment (seconds each)."""
    good = host_build_tree(tmp / "trees" / "a")
    bad = host_build_tree(tmp / "trees" / "b")
    return Command("trend", lambda o: ["trend", f"build-dir:{good}", f"build-dir:{bad}",
                                       "--profile", "tiny", "--count", "1", "--out", str(o)],
                   RESUMES, _has("trend.json", "trend.md"),
                   kept=lambda o: {s["build"] for s in json.loads(
                       (o / "trend.json").read_text()).get("steps", [])}
                   if (o / "trend.json").is_file() else set())


def _probe_stage(out: Path) -> str | None:
    for path in out.glob("builds/*/probe.json"):
        with contextlib.suppress(OSError, ValueError):
            return json.loads(path.read_text()).get("stage")
    return None


@pytest.mark.slow
def test_ctrl_c_while_a_builds_probe_runs_the_pipeline_is_quiet(tmp_path, tiny_compiled):
    """Ctrl-C reaches a build's probe too, in the middle of the IREE pipeline: it records
    that it was interrupted (not that the build's run failed) and ends cleanly, its runtime
    objects freed while the runtime still is (a crash at its exit, before); the trend ends
    as interrupted and the same command goes on. That rerun is trend's own stop and rerun
    (`stopped`): its signal once the first build's step has finished, then the same command
    again, which keeps that step and measures the other build."""
    cmd, out = _trend(tmp_path), tmp_path / "out"
    a = attempt_when(cmd, cmd.argv(out), signal.SIGINT, lambda _pid: _probe_stage(out) == "run")
    assert a.interrupted, a.describe()
    check_clean(cmd, a, out)
    (probe,) = out.glob("builds/*/probe.json")
    state = json.loads(probe.read_text())
    assert state["ok"] is False and state.get("interrupted") == "SIGINT", state
    assert not (out / "trend.json").is_file() or not json.loads(
        (out / "trend.json").read_text()).get("steps")  # no measurement of that build
    stopped(cmd, tmp_path)


def battery_commands() -> set[str]:
    """Every command the battery stops: the lists above and the ones with tests of their own."""
    return {c.name for c in [*FAST, *SLOW]} | {"bisect", "trend", "report", "calibrate",
                                               "compare", "history", "goldens propose"}


def test_every_command_that_writes_an_out_has_its_rule_and_its_battery():
    """A new command with an --out joins the battery (or says here why it cannot)."""
    covered = battery_commands()
    elsewhere = {  # the same rule code (runner/cli/output.py); too heavy for a signal battery
        "validate": "builds a harness image and runs every step in containers (minutes); "
                    "its step ledger resumes: tests/test_validate.py",
        "gpu-check prepare": "its steps are `runner compile` and `runner run` (both in the "
                             "battery), ~45 s a try; tests/test_gpu_check.py resumes a carry",
        "gpu-check run": "a SIGTERM mid-step and a resume keeping what passed: "
                         "tests/test_gpu_check.py",
        "history confirm": "installs two IREE releases and runs ten bench goldens rounds "
                           "(minutes); each round is `runner bench goldens`, in the battery: "
                           "tests/test_history_confirm.py",
        "nightly": "its steps are goldens check, bench goldens, run, score and bench (each in "
                   "the battery), a night minutes long; a killed night's rerun keeping its "
                   "finished steps: tests/test_nightly.py",
    }
    rules = rerun_rules()
    assert set(rules) == covered | set(elsewhere), set(rules) ^ (covered | set(elsewhere))
    assert {c.name: c.rule for c in [*FAST, *SLOW]} == {
        c.name: rules[c.name].rule for c in [*FAST, *SLOW]}
    for path, sub in walk(build_parser()):
        spec = sub.get_default("out_spec")
        if spec is not None:  # the help says it, and so does docs/failure-modes.md
            assert "rerun:" in sub.format_help() and spec.rerun.keeps in " ".join(
                sub.format_help().split()), path
    table = (REPO / "docs" / "failure-modes.md").read_text(encoding="utf-8")
    stated = dict(re.findall(r"^\| `runner ([a-z -]+)` \| (resumes|refuses) \|", table, re.M))
    assert stated == {name: rerun.rule for name, rerun in rules.items()}


def test_each_signal_reaches_commands_given_one_and_the_named_ones_get_all():
    battery = battery_commands()
    assert battery >= EVERY_SIGNAL
    one = [signals_for(n) for n in sorted(battery - EVERY_SIGNAL)]
    assert all(len(s) == 1 for s in one) and {s[0] for s in one} == set(STOP_SIGNALS)
    assert all(signals_for(n) == STOP_SIGNALS for n in EVERY_SIGNAL)


@pytest.mark.slow
def test_a_refused_rerun_names_both_ways_out_and_writes_nothing(tmp_path, tiny_compiled):
    """What a measurement command says to the same command run again into an interrupted
    attempt's --out: nothing is measured, nothing written. (SIGTERM once it has written its
    record and an image: mid-run on a loaded machine too, where a point of its timed run
    could fall before its record.)"""
    cmd = FAST[0]
    out = tmp_path / "run"
    stopped = attempt_when(cmd, cmd.argv(out), signal.SIGTERM,
                           lambda _pid: (out / RECORD).is_file() and bool(_samples(out)))
    assert stopped.interrupted, stopped.describe()
    record = json.loads((out / RECORD).read_text())
    assert record["status"] == "interrupted" and record["attempts"][-1]["signal"] == "SIGTERM"
    before = sorted((p.name, p.stat().st_mtime_ns) for p in out.rglob("*"))
    again = attempt(cmd, cmd.argv(out))
    assert again.rc == 2 and "holds an interrupted `runner run`" in again.stderr
    assert f"finish it with `runner run --resume {out}`, or pass another --out" in again.stderr
    assert sorted((p.name, p.stat().st_mtime_ns) for p in out.rglob("*")) == before
    assert done_keys(out) == set()


def test_a_signal_while_the_wrapper_takes_stock_of_its_processes_is_an_interruption(tmp_path):
    """The command wrapper's first step reads /proc (ProcessGuard) a while: a SIGTERM there
    (the battery's, 0.54 s into `runner history`, cdf6893) ends the command as interrupted,
    said so, not with a traceback. Raised as the guard's __init__ is entered, every time."""
    def at_the_guard(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is ProcessGuard.__init__.__code__:
            sys.setprofile(None)
            signal.raise_signal(signal.SIGTERM)

    with at_default(signal.SIGTERM):
        sys.setprofile(at_the_guard)
        try:
            ran = cli("history", "--results", tmp_path / "results.sqlite", "--out",
                      tmp_path / "out")
        finally:
            sys.setprofile(None)
    assert ran.returncode == 128 + signal.SIGTERM, ran.stderr
    assert "interrupted (SIGTERM)" in ran.stderr and "Traceback" not in ran.stderr, ran.stderr
    assert not (tmp_path / "out").exists()  # stopped before it claimed anything

"""Workers end with their driver: a real `kill -9` of a real `runner run` and `runner mlperf`
driver, its worker processes (and the LoadGen test process) gone within a bound; a worker
whose driver's heartbeat stops exits by itself (what reaches a container's workers); and a
resume stops a dead driver's live workers by the pids the run recorded, never a process
that merely reuses such a pid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import cli, start_runner

from runner.base.dirlock import pid_start
from runner.base.steps import StepStatus
from runner.batch.lifeline import EXIT_DRIVER_GONE, ProcessId, boot_id, reap_orphans
from runner.rundir.directory import RunDir
from runner.rundir.store import SampleStore

# A heartbeat that would take ten minutes to go stale: in the kill -9 tests only the
# parent-death signal can end the workers within the bound (the watchdog has its own test).
ENV = {**os.environ, "RUNNER_PROGRESS": "plain", "RUNNER_HEARTBEAT_STALE_S": "600"}
EXIT_BOUND_S = 15  # pdeathsig ends a local worker at once; the bound allows a loaded machine


def _until(what: Callable[[], object], timeout: float, proc: subprocess.Popen | None = None
           ) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the driver ended ({proc.returncode}) before the test could "
                                 f"kill it: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s")


def _recorded_workers(work: Path, count: int) -> list[ProcessId] | None:
    """The worker identities the run recorded, once all `count` workers have."""
    found = []
    for path in (work / "workers" / "processes").glob("*.json"):
        try:
            worker = ProcessId.from_dict(json.loads(path.read_text())["worker"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if worker is not None:
            found.append(worker)
    return found if len(found) == count else None


def _children(pid: int) -> list[ProcessId]:
    """Processes whose parent is `pid` (the LoadGen test process of an mlperf driver)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            child = int(stat.parent.name)
            out.append(ProcessId(child, pid_start(child), boot_id(), os.uname().nodename))
    return out


def _kill_9_and_wait_for(proc: subprocess.Popen, processes: list[ProcessId]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    _until(lambda: not [p for p in processes if p.alive()], EXIT_BOUND_S)


@pytest.mark.slow
def test_kill_9_of_runner_run_ends_its_workers_and_the_run_resumes(tmp_path, tiny_compiled):
    out = tmp_path / "run"
    proc = start_runner("run", "--profile", "cpu", "--count", "40", "--no-score", "--out", out,
                        cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL,
                        start_new_session=False)
    try:
        workers = _until(lambda: _recorded_workers(out, 2), 300, proc)
        _until(lambda: SampleStore(out).done_ids(), 300, proc)  # mid-run
        assert isinstance(workers, list) and all(w.alive() for w in workers)
        _kill_9_and_wait_for(proc, workers)
    finally:
        proc.kill()
    done_at_kill = SampleStore(out).done_ids()
    time.sleep(2)
    assert SampleStore(out).done_ids() == done_at_kill  # nothing writes on after the kill
    assert len(done_at_kill) < 40

    resumed = cli("run", "--resume", out, cwd=tmp_path, env=ENV)
    assert resumed.returncode == 0, resumed.stderr
    manifest = RunDir(out).load()
    assert manifest.complete and manifest.attempts[0].status is StepStatus.INTERRUPTED
    assert SampleStore(out).done_ids() == set(range(40))
    assert not list((out / "workers").glob("*.heartbeat"))  # every driver's beat removed


def test_kill_9_of_runner_mlperf_ends_its_workers_and_loadgen_test(tmp_path, tiny_compiled):
    """LoadGen's workers poll an open queue: before, a killed driver left them polling it
    for ever."""
    conf = tmp_path / "user.conf"
    conf.write_text("stable-diffusion-xl.*.min_duration = 600000\n")  # a 10-minute test
    out = tmp_path / "mlperf"
    proc = start_runner("mlperf", "--profile", "cpu", "--scenario", "server", "--mode",
                        "performance", "--count", "4", "--user-conf", conf, "--out", out,
                        cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL,
                        start_new_session=False)
    try:
        work = out / "work"
        workers = _until(lambda: _recorded_workers(work, 2), 300, proc)
        _until(lambda: len(list((work / "workers").glob("*.stats.json"))) == 2, 300, proc)
        started = out / "Server" / "performance"  # the LoadGen test process is running
        test = _until(lambda: _children(proc.pid) if started.is_dir() else None, 120, proc)
        assert isinstance(workers, list) and isinstance(test, list)
        _kill_9_and_wait_for(proc, [*workers, *test])
    finally:
        proc.kill()


@pytest.mark.slow
def test_a_worker_exits_once_its_drivers_heartbeat_stops(tmp_path):
    """What ends a worker that is not the driver's child (in a container): the watchdog."""
    beat = tmp_path / "driver.heartbeat"
    beat.touch()
    lifeline = {"heartbeat": str(beat), "driver": ProcessId.me().to_dict(), "stale_s": 2}
    worker = subprocess.Popen(
        [sys.executable, "-c", "import json, sys, time\n"
         "from runner.batch.lifeline import watch_driver\n"
         "watch_driver(json.loads(sys.argv[1]), print)\ntime.sleep(120)",
         json.dumps(lifeline)], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        for _ in range(8):  # beating: the worker lives
            time.sleep(0.5)
            os.utime(beat)
        assert worker.poll() is None
        assert worker.wait(timeout=EXIT_BOUND_S) == EXIT_DRIVER_GONE  # stopped beating
        assert "driver gone" in worker.stdout.read()
    finally:
        worker.kill()


def test_a_resume_stops_a_dead_drivers_workers_by_recorded_pid_only(tmp_path):
    """A live worker whose driver is dead is stopped; a process whose pid a record names
    but whose start time differs (the pid was reused) is left alone."""
    workers = tmp_path / "workers"
    (workers / "processes").mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    driver = ProcessId(dead.pid, "1", boot_id(), os.uname().nodename).to_dict()
    orphan = subprocess.Popen(["sleep", "120"])
    stranger = subprocess.Popen(["sleep", "120"])
    try:
        me = ProcessId.me()
        for name, process in (("w000", ProcessId(orphan.pid, pid_start(orphan.pid), me.boot,
                                                 me.host)),
                              ("w001", ProcessId(stranger.pid, "1", me.boot, me.host))):
            (workers / "processes" / f"{name}.json").write_text(json.dumps(
                {"worker": process.to_dict(), "driver": driver}))
        (workers / f"driver-{dead.pid}.heartbeat").write_text(json.dumps({"driver": driver}))
        said: list[str] = []
        found = reap_orphans(tmp_path, said.append)
        assert [(o.name, o.stopped) for o in found] == [("w000", True)]
        assert orphan.wait(timeout=EXIT_BOUND_S) == -signal.SIGTERM
        assert stranger.poll() is None
        assert "w000 (pid" in said[0] and "stopped" in said[0]
        assert not list(workers.glob("*.heartbeat"))
    finally:
        orphan.kill()
        stranger.kill()
        orphan.wait()
        stranger.wait()


def test_sigterm_to_a_driver_ends_every_child_before_its_exit_status(tmp_path, tiny_compiled):
    """What a time limit does: SIGTERM to `runner run` mid-run. When its exit status is
    seen, every process it started is gone (each worker wrote its finished samples and
    closed its IREE device first), and both records say how the attempt ended."""
    from runner.base.outdir import RECORD
    from runner.base.procs import descendants

    out = tmp_path / "run"
    proc = start_runner("run", "--profile", "cpu", "--count", "40", "--no-score", "--out", out,
                        cwd=tmp_path, stdout=subprocess.DEVNULL, start_new_session=False,
                        env={**ENV, "PYTHONFAULTHANDLER": "1"})  # a crash at exit: in the logs
    try:
        workers = _until(lambda: _recorded_workers(out, 2), 300, proc)
        _until(lambda: SampleStore(out).done_ids(), 300, proc)  # mid-run
        below = descendants(proc.pid)
        assert isinstance(workers, list) and {w.pid for w in workers} <= {p.pid for p in below}
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert not [p for p in below if p.alive()]  # gone when the exit status is seen
    assert "Traceback" not in err and "interrupted (SIGTERM)" in err
    for name in ("w000", "w001"):
        log = RunDir(out).log_path(name).read_text()
        assert "stopped (SIGTERM): finished samples written, IREE device closed" in log, log
        assert "Fatal Python error" not in log, log
    assert RunDir(out).load().attempts[-1].status is StepStatus.INTERRUPTED
    assert json.loads((out / RECORD).read_text())["attempts"][-1]["signal"] == "SIGTERM"

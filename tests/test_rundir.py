"""The run dir's lock, its typed manifest and its writes on a full disk (no runs here)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from host_support import tmpfs

from runner.base.errors import RunnerError
from runner.base.steps import StepStatus
from runner.rundir.directory import RUN_LOCK, DiskFull, RunDir
from runner.rundir.manifest import RunManifest


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def write_lock(run: RunDir, **fields) -> None:
    run.path.mkdir(parents=True, exist_ok=True)
    holder = {"host": socket.gethostname(), "pid": os.getpid(), "since": "earlier",
              "command": "runner run --resume x", "pid_start": "", **fields}
    (run.path / RUN_LOCK).write_text(json.dumps(holder))


def test_relative_path_becomes_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = RunDir("runs/one")
    assert run.path == tmp_path / "runs" / "one" and run.path.is_absolute()
    assert run.manifest_path == tmp_path / "runs" / "one" / "run.json"


def test_second_driver_is_refused_naming_the_holder(tmp_path):
    first, second = RunDir(tmp_path / "r"), RunDir(tmp_path / "r")
    first.lock("runner run --out r")
    with pytest.raises(RunnerError) as e:
        second.lock()
    message = str(e.value)
    assert f"pid {os.getpid()} on {socket.gethostname()} since " in message
    assert "runner run --out r" in message and e.value.where == str(tmp_path / "r" / RUN_LOCK)
    first.unlock()
    assert not (tmp_path / "r" / RUN_LOCK).exists()
    second.lock()  # free again
    second.unlock()


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path, capsys):
    run = RunDir(tmp_path / "r")
    pid = dead_pid()
    write_lock(run, pid=pid)
    holder = run.lock()
    assert holder.pid == os.getpid() and run.holder() == holder
    assert f"taking over the stale lock of pid {pid}" in capsys.readouterr().err
    assert not (run.path / "run.lock.takeover").exists()
    run.unlock()


def test_a_reused_pid_does_not_keep_a_stale_lock(tmp_path):
    """Our own pid, but the recorded process started at another time: not us, so stale."""
    run = RunDir(tmp_path / "r")
    write_lock(run, pid=os.getpid(), pid_start="1")
    run.lock()
    assert run.holder().pid_start not in ("", "1")
    run.unlock()


def test_a_lock_held_on_another_host_is_never_broken(tmp_path):
    run = RunDir(tmp_path / "r")
    write_lock(run, host="node17.cluster", pid=dead_pid())
    with pytest.raises(RunnerError) as e:
        run.lock()
    assert "node17.cluster" in str(e.value) and "remove" in e.value.fix
    assert "never broken automatically" in e.value.fix
    assert json.loads((run.path / RUN_LOCK).read_text())["host"] == "node17.cluster"


def test_unreadable_lock_waits_while_fresh_and_is_taken_over_when_old(tmp_path):
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    (run.path / RUN_LOCK).write_text("")  # a writer between create and write
    with pytest.raises(RunnerError, match="keeps changing hands"):
        run.lock()
    old = time.time() - 120
    os.utime(run.path / RUN_LOCK, (old, old))
    run.lock()
    run.unlock()


TAKER = """
import sys, time
from runner.base.errors import RunnerError
from runner.rundir.directory import RunDir
run = RunDir(sys.argv[1])
while time.time() < float(sys.argv[2]):
    pass
try:
    run.lock()
except RunnerError as e:
    print("refused", e)
    raise SystemExit(0)
print("took")
time.sleep(2)
"""


def test_racing_takeovers_of_one_stale_lock_have_one_winner(tmp_path):
    run = RunDir(tmp_path / "r")
    write_lock(run, pid=dead_pid())
    go = time.time() + 2.0
    procs = [subprocess.Popen([sys.executable, "-c", TAKER, str(run.path), str(go)],
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert sorted(o.split()[0] for o in outs) == ["refused", "refused", "refused", "took"]


MINIMAL = {"argv": ["run"], "profile": "cpu", "profile_path": "/p.yaml", "profile_config": {},
           "layout": {}, "plan": {}, "sample_ids": [0, 1], "captions": "/c.tsv",
           "compiled": {"compiled": [{"key": "k"}]}, "host": {}, "iree": {}, "executor": "local"}


def test_manifest_round_trips_and_keeps_fields_it_does_not_know(tmp_path):
    raw = {**MINIMAL, "loadgen": {"tests": []}, "attempts": [{"seconds": 1.5}]}
    m = RunManifest.from_dict(raw, "run.json")
    assert m.extra == {"loadgen": {"tests": []}} and m.compiled_keys == ["k"]
    assert m.attempts[0].status is StepStatus.FINISHED and m.attempts[0].seconds == 1.5
    run = RunDir(tmp_path / "r")
    run.save(m)
    again = run.load()
    assert again.to_dict() == m.to_dict() and again.to_dict()["loadgen"] == {"tests": []}


def test_bad_manifests_are_clear_errors(tmp_path):
    run = RunDir(tmp_path / "r")
    with pytest.raises(RunnerError, match="not a run dir"):
        run.load()
    run.path.mkdir()
    run.manifest_path.write_text("{")
    with pytest.raises(RunnerError, match="the run manifest is not valid JSON"):
        run.load()
    run.manifest_path.write_text(json.dumps({"profile": "cpu"}))
    with pytest.raises(RunnerError, match="lacks a field"):
        run.load()


@pytest.fixture
def tiny_disk(tmp_path):
    with tmpfs(tmp_path / "small", "size=64k") as mount:
        yield mount


def test_full_disk_is_one_clear_error_with_no_temp_file(tiny_disk):
    run = RunDir(tiny_disk / "run")
    run.path.mkdir()
    run.save(RunManifest.from_dict(MINIMAL, "run.json"))
    before = run.manifest_path.read_text()
    target = run.path / "big.json"
    with pytest.raises(DiskFull) as e:
        run.write_json(target, {"data": "x" * 200_000})
    assert str(e.value) == (f"run incomplete: disk full while writing {target}\n  fix: free "
                            f"space, then `runner run --resume {run.path}`")
    assert sorted(p.name for p in run.path.iterdir()) == ["run.json"]
    assert run.manifest_path.read_text() == before  # the old manifest, whole

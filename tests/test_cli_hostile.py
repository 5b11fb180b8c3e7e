"""No traceback reaches a user: Ctrl-C mid-run, a read-only --out, a profile that is not
UTF-8 and a huge field each end with a message and an exit code from the shared table, and
the interrupted run resumes to completion."""

from __future__ import annotations

import os
import signal
import time

import pytest
from cli_support import as_from_a_terminal, cli, start_runner
from host_support import tmpfs

from runner.base.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED
from runner.base.steps import StepStatus
from runner.rundir.directory import RunDir
from runner.rundir.store import SampleStore

ENV = {**os.environ, "RUNNER_PROGRESS": "plain"}


@pytest.mark.slow
def test_ctrl_c_mid_run_is_quiet_and_the_run_resumes(tmp_path, tiny_compiled):
    out = tmp_path / "run"
    proc = start_runner(
        "run", "--profile", "cpu", "--count", "12", "--no-score", "--out", out,
        cwd=tmp_path, env=ENV, start_new_session=False,
        # As a terminal's Ctrl-C finds it: a shell without job control starts a background
        # job (`cmd &`, as CI wrappers do) with SIGINT ignored, and its children inherit that.
        preexec_fn=as_from_a_terminal)
    deadline = time.monotonic() + 300
    store = SampleStore(out)
    while time.monotonic() < deadline and proc.poll() is None:
        if (out / "samples").is_dir() and store.done_ids():
            break  # workers are generating: interrupt in the middle of the run
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "Traceback" not in err
    assert "interrupted (SIGINT): finished work is kept" in err

    resumed = cli("run", "--resume", str(out), cwd=tmp_path, env=ENV)
    assert resumed.returncode == 0, resumed.stderr
    manifest = RunDir(out).load()
    assert manifest.complete
    assert manifest.attempts[0].status is StepStatus.INTERRUPTED
    assert store.done_ids() == set(range(12))


@pytest.fixture
def read_only_dir(tmp_path):
    with tmpfs(tmp_path / "ro", "ro,size=1m") as mount:
        yield mount


def test_read_only_out_is_a_clear_error(read_only_dir, tmp_path):
    out = read_only_dir / "run"
    done = cli("run", "--profile", "cpu", "--count", "2", "--no-score", "--out", str(out),
               cwd=tmp_path)
    assert done.returncode == EXIT_BAD_INPUT
    assert "Traceback" not in done.stderr
    assert "Read-only file system" in done.stderr and str(out) in done.stderr


def test_a_profile_that_is_not_utf8_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"name: x\nextends: cpu\n\xff\xfe: 1\n")
    done = cli("plan", "--profile", str(bad), cwd=tmp_path)
    assert done.returncode == EXIT_BAD_INPUT
    assert "Traceback" not in done.stderr
    assert f"{bad}: the profile is not UTF-8 text (byte 0xff at line 3" in done.stderr


def test_a_huge_field_is_elided_in_the_error(tmp_path):
    huge = tmp_path / "huge.yaml"
    huge.write_text('name: x\nextends: cpu\nlayout:\n  devices: "' + "0," * 200_000 + '0"\n')
    done = cli("plan", "--profile", str(huge), cwd=tmp_path)
    assert done.returncode == EXIT_BAD_INPUT
    assert "Traceback" not in done.stderr
    assert "characters left out" in done.stderr and "names more than 4096 devices" in done.stderr
    assert len(done.stderr) < 2000

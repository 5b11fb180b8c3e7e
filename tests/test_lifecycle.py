"""The run lifecycle through `runner run` on the cpu profile: relative run dirs, the lock
against a second driver, resume rules, killed attempts, and a disk that fills up while the
accuracy log is written."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from cli_support import cli, start_runner
from host_support import tmpfs, wait_for

from runner.lifecycle import Lifecycle
from runner.rundir.directory import DiskFull
from runner.rundir.store import SampleStore

COUNT = 8


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def lock_pid(run_dir: Path) -> int | None:
    try:
        return json.loads((run_dir / "run.lock").read_text())["pid"]
    except (OSError, ValueError, KeyError):  # not there, or taken over right now
        return None


def hashes(run_dir: Path) -> dict[int, str]:
    data = json.loads((run_dir / "dataset.json").read_text())
    return {s["qsl_idx"]: s["sha256"] for s in data["samples"]}


@pytest.fixture(scope="module")
def relative_run(tmp_path_factory, tiny_compiled) -> Path:
    """The README's shape of command, with --out relative to the driver's cwd."""
    cwd = tmp_path_factory.mktemp("cwd")
    proc = cli("run", "--profile", "cpu", "--count", str(COUNT), "--no-score",
               "--out", "runs/main", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return cwd / "runs" / "main"


def test_relative_out_hands_workers_absolute_paths(relative_run):
    assert sorted(hashes(relative_run)) == list(range(COUNT))
    for task in (relative_run / "workers").glob("w*.json"):
        if task.name.endswith(".stats.json"):
            continue
        assert json.loads(task.read_text())["run_dir"] == str(relative_run)
    m = manifest(relative_run)
    assert m["status"] == "complete" and Path(m["captions"]).is_absolute()
    assert [a["status"] for a in m["attempts"]] == ["finished"]
    assert not (relative_run / "run.lock").exists()


def test_resuming_a_complete_run_does_nothing(relative_run):
    before = (relative_run / "run.json").read_bytes()
    proc = cli("run", "--resume", str(relative_run))
    assert proc.returncode == 0, proc.stderr
    assert "already complete (8 samples); nothing to do" in proc.stderr
    assert "samples/s" not in proc.stdout + proc.stderr  # no workers started
    assert (relative_run / "run.json").read_bytes() == before


def tree(path: Path) -> dict[str, str]:
    """Every file under `path` by its relative path, as the sha256 of its bytes."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def test_resume_with_another_count_is_an_error(relative_run):
    """Refused before any work, and the run dir is left byte for byte as it was (its
    attempt record is not rewritten as a failed attempt)."""
    before = tree(relative_run)
    proc = cli("run", "--resume", str(relative_run), "--count", "4")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "run was made for 8 samples" in proc.stderr and "--count" in proc.stderr
    assert tree(relative_run) == before
    same = cli("run", "--resume", str(relative_run), "--count", str(COUNT))
    assert same.returncode == 0 and "nothing to do" in same.stderr


@pytest.mark.slow
def test_second_driver_is_refused_and_killed_attempts_are_recorded(relative_run, tmp_path):
    """Kill a run, then resume it twice at once: the second resume is refused naming the
    first; the killed attempt is in the manifest; the samples are the same bytes."""
    run_dir = tmp_path / "r"
    first = start_runner("run", "--profile", "cpu", "--count", str(COUNT), "--no-score",
                         "--out", str(run_dir))
    wait_for(lambda: len(SampleStore(run_dir).done_ids()) >= 2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=60)
    assert lock_pid(run_dir) == first.pid  # stale now
    assert manifest(run_dir)["attempts"][-1]["status"] == "running"

    resume = start_runner("run", "--resume", str(run_dir))
    wait_for(lambda: lock_pid(run_dir) == resume.pid)
    second = cli("run", "--resume", str(run_dir))
    _, err = resume.communicate(timeout=600)
    assert resume.returncode == 0, err
    assert f"taking over the stale lock of pid {first.pid}" in err
    assert second.returncode == 2 and "Traceback" not in second.stderr
    assert f"another driver holds this out dir: pid {resume.pid} on " in second.stderr
    m = manifest(run_dir)
    assert [a["status"] for a in m["attempts"]] == ["interrupted", "finished"]
    assert m["status"] == "complete"
    assert hashes(run_dir) == hashes(relative_run)


RELEASE = Path(__file__).parent / "fixtures" / "release_run" / "interrupted.json"


def test_a_run_the_release_left_interrupted_resumes(relative_run, tmp_path):
    """A run dir as the release before one status vocabulary left it when a SIGTERM stopped
    it (run.json's attempt `killed`, attempt.json's `interrupted`; tests/fixtures): this
    runner resumes it, reads `killed` as interrupted, and completes the same samples."""
    run_dir = tmp_path / "old"
    shutil.copytree(relative_run, run_dir, ignore=shutil.ignore_patterns(
        "mlperf_log_accuracy.json", "dataset.json", "review", "*.html", "*.md", "*.xml",
        "results.json"))
    for qsl_idx in range(COUNT // 2, COUNT):
        (run_dir / "samples" / f"{qsl_idx:05d}.png").unlink()
    release = json.loads(RELEASE.read_text())
    for name, records in (("run.json", release["run.json"]),
                          ("attempt.json", release["attempt.json"])):
        (run_dir / name).write_text(json.dumps({**json.loads((run_dir / name).read_text()),
                                                **records}))
    proc = cli("run", "--resume", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    m = manifest(run_dir)
    assert [a["status"] for a in m["attempts"]] == ["interrupted", "finished"]
    assert m["status"] == "complete" and hashes(run_dir) == hashes(relative_run)
    record = json.loads((run_dir / "attempt.json").read_text())
    assert record["previous_status"] == "interrupted" and record["status"] == "finished"


@pytest.fixture
def small_disk(tmp_path):
    with tmpfs(tmp_path / "small", "size=4m") as mount:
        yield mount


def test_full_disk_while_writing_the_accuracy_log(relative_run, small_disk):
    """Every sample stored, then the disk fills up under the accuracy log: a clear message,
    no temp file, a run.json that does not say complete; after freeing space, resume ends
    the run with the same dataset. A resume knows the disk is too small for the log before
    it starts (the preflight, exit 2); the disk filling under it is the lifecycle's own
    aggregation without that check, as when something else fills the disk meanwhile."""
    run_dir = small_disk / "run"
    shutil.copytree(relative_run, run_dir, ignore=shutil.ignore_patterns(
        "mlperf_log_accuracy.json", "dataset.json", "review", "*.html", "*.md", "*.xml",
        "results.json"))
    m = manifest(run_dir)
    m["status"] = "executed"  # samples stored, not aggregated: where a crash would leave it
    (run_dir / "run.json").write_text(json.dumps(m))
    used = int(subprocess.run(["du", "-sk", str(small_disk)], capture_output=True, text=True,
                              check=True).stdout.split()[0])
    # Room for run.json and reproduce.sh, not for a log of 8 hex-encoded 128x128 images.
    subprocess.run(["mount", "-o", f"remount,size={used + 160}k", str(small_disk)], check=True)
    refused = cli("run", "--resume", str(run_dir))
    assert refused.returncode == 2, refused.stderr
    assert f"{run_dir}: preflight: disk: " in refused.stderr
    assert manifest(run_dir)["attempts"] == m["attempts"]  # nothing was run
    with Lifecycle.open(run_dir) as lc, pytest.raises(DiskFull) as full:
        lc.complete()
    assert (f"run incomplete: disk full while writing {run_dir}/mlperf_log_accuracy.json\n"
            f"  fix: free space, then `runner run --resume {run_dir}`") == str(full.value)
    assert not [p for p in run_dir.rglob("*") if p.name.endswith("tmp")]
    assert not (run_dir / "mlperf_log_accuracy.json").exists()
    assert manifest(run_dir)["status"] != "complete"
    subprocess.run(["mount", "-o", "remount,size=20m", str(small_disk)], check=True)
    resumed = cli("run", "--resume", str(run_dir))
    assert resumed.returncode == 0, resumed.stderr
    assert manifest(run_dir)["status"] == "complete"
    assert hashes(run_dir) == hashes(relative_run)


def test_rescore_is_the_only_work_a_complete_run_does_on_resume(tmp_path):
    """--rescore on a complete run re-runs the last steps only (here a profile without
    accuracy ranges, so the score step says why it scores nothing); no workers start."""
    run_dir = tmp_path / "r"
    made = cli("run", "--profile", "cpu", "--set", "accuracy.fid=null", "--set",
               "accuracy.clip=null", "--count", "2", "--no-score", "--out", str(run_dir))
    assert made.returncode == 0, made.stderr
    attempts = manifest(run_dir)["attempts"]
    proc = cli("run", "--resume", str(run_dir), "--rescore")
    assert proc.returncode == 0, proc.stderr
    assert "not scored: the profile has no accuracy ranges" in proc.stderr
    assert f"reports: {run_dir}/summary.md" in proc.stdout and "samples/s" not in proc.stdout
    assert manifest(run_dir)["attempts"] == attempts and manifest(run_dir)["status"] == "complete"

"""Per-device batch runs on the cpu profile: layouts, worker death, resume, aggregation."""

import json
import os
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli_support import Ran, cli, start_runner
from host_support import tmpfs, wait_for

from runner.cli.main import main
from runner.rundir.mlperf_log import LOG_NAME, iter_log_samples
from runner.rundir.store import SampleStore

COUNT = 16


def no_score(args: tuple[str, ...]) -> list[str]:
    """Runs here test the batch machinery; scoring has its own tests (and takes minutes)."""
    return [*args, "--no-score"] if args[0] == "run" else list(args)


def run_cli(*args: str) -> Ran:
    return cli(*no_score(args))


def start_cli(*args: str) -> subprocess.Popen:
    return start_runner(*no_score(args))


def hashes(run_dir: Path) -> dict[int, str]:
    data = json.loads((run_dir / "dataset.json").read_text())
    return {s["qsl_idx"]: s["sha256"] for s in data["samples"]}


@pytest.fixture(scope="module")
def one_worker_run(tmp_path_factory, tiny_compiled):
    run_dir = tmp_path_factory.mktemp("runs") / "one"
    proc = run_cli("run", "--profile", "cpu", "--devices", "0", "--count", str(COUNT),
                   "--out", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    return run_dir


def plan_json(capsys, *flags: str) -> dict:
    assert main(["plan", "--profile", "mi325x", "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_mi325x_cpx_spx_and_cpd(capsys):
    cpx = plan_json(capsys)
    assert [w["device_id"] for w in cpx["workers"]] == list(range(64))
    assert cpx["workers"][37]["env"] == {"ROCR_VISIBLE_DEVICES": "37", "HIP_VISIBLE_DEVICES": "0"}
    spx = plan_json(capsys, "--partition", "spx")
    assert [w["device_id"] for w in spx["workers"]] == list(range(8))
    cpd2 = plan_json(capsys, "--cpd", "2")
    assert len(cpd2["workers"]) == 128 and cpd2["workers"][64]["device_id"] == 0


@pytest.mark.slow
def test_two_workers_give_the_same_bytes_as_one(one_worker_run, tmp_path):
    run_dir = tmp_path / "two"
    proc = run_cli("run", "--profile", "cpu", "--count", str(COUNT), "--out", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    assert "dataset:" in proc.stdout and str(run_dir) in proc.stdout
    assert hashes(run_dir) == hashes(one_worker_run)
    assert sorted(hashes(run_dir)) == list(range(COUNT))
    workers = {s["worker"] for s in json.loads((run_dir / "dataset.json").read_text())["samples"]}
    assert workers == {"w000", "w001"}
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "complete" and manifest["layout"]["devices"] == "0,1"
    assert manifest["iree"]["iree.runtime"]["version"].startswith("3.13")
    assert all(Path(c["vmfb"]).is_file() for c in manifest["compiled"]["compiled"])
    assert (run_dir / "reproduce.sh").stat().st_mode & 0o100


def test_review_ids_are_copied_for_people(tmp_path):
    ids = tmp_path / "ids.txt"
    ids.write_text("1206\n1046\n")
    run_dir = tmp_path / "review-run"
    proc = run_cli("run", "--profile", "cpu", "--ids", str(ids), "--out", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    for name in ("01046.png", "01206.png"):
        assert (run_dir / "review" / name).read_bytes() == (run_dir / "samples" / name).read_bytes()


def test_mlperf_log_round_trips_to_the_stored_pixels(one_worker_run):
    store = SampleStore(one_worker_run)
    seen = []
    for qsl_idx, image in iter_log_samples(one_worker_run / LOG_NAME, (128, 128, 3)):
        assert np.array_equal(image, store.load(qsl_idx))
        seen.append(qsl_idx)
    assert seen == list(range(COUNT))


@pytest.mark.slow
def test_killed_worker_is_replaced_by_the_survivor(one_worker_run, tmp_path):
    run_dir = tmp_path / "kill-one"
    proc = start_cli("run", "--profile", "cpu", "--count", str(COUNT), "--out", str(run_dir))
    pid_file = run_dir / "workers" / "w001.pid"
    wait_for(lambda: pid_file.is_file() and SampleStore(run_dir).done_ids())
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert "worker w001 died (exit -9)" in err
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["attempts"][0]["deaths"][0]["worker"] == "w001"
    assert hashes(run_dir) == hashes(one_worker_run)


@pytest.mark.slow
def test_killed_run_resumes_without_loss_or_duplicates(one_worker_run, tmp_path):
    run_dir = tmp_path / "kill-all"
    proc = start_cli("run", "--profile", "cpu", "--count", str(COUNT), "--out", str(run_dir))
    wait_for(lambda: len(SampleStore(run_dir).done_ids()) >= 3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    done_before = SampleStore(run_dir).done_ids()
    assert 3 <= len(done_before) < COUNT
    refused = run_cli("run", "--resume", str(run_dir), "--devices", "0")
    assert refused.returncode == 2 and "would mix results" in refused.stderr
    resumed = run_cli("run", "--resume", str(run_dir))
    assert resumed.returncode == 0, resumed.stderr
    assert hashes(run_dir) == hashes(one_worker_run)
    log_ids = [i for i, _ in iter_log_samples(run_dir / LOG_NAME, (128, 128, 3))]
    assert log_ids == list(range(COUNT))


@pytest.mark.parametrize(("args", "message"), [
    (["--profile", "mi999x"], "unknown profile"),
    (["--devices", "0-x"], "--devices"),
    (["--batch-size", "4"], "no clip artifact for batch size 4"),
    (["--captions", "/no/such/captions.tsv"], "captions file not found"),
    (["--count", "6000"], "outside the captions file"),
])
def test_bad_input_is_a_clear_error(tmp_path, args, message):
    proc = run_cli("run", "--profile", "cpu", *args, "--out", str(tmp_path / "r"))
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_existing_run_dir_needs_resume(one_worker_run):
    proc = run_cli("run", "--profile", "cpu", "--count", "2", "--out", str(one_worker_run))
    assert proc.returncode == 2 and "--resume" in proc.stderr


@pytest.mark.slow
def test_full_disk_keeps_finished_samples_and_resumes(one_worker_run, tmp_path):
    """The disk fills up under the workers (another job's file takes what the preflight
    found free once the first sample is stored): the finished samples stay whole and a
    resume, with the space back, finishes the run bit-identically. A disk too small from
    the start stops at the preflight (tests/test_preflight.py, test_lifecycle.py)."""
    with tmpfs(tmp_path / "small", "size=20m") as mount:
        run_dir = mount / "run"
        proc = start_cli("run", "--profile", "cpu", "--count", str(COUNT), "--out",
                         str(run_dir))
        wait_for(lambda: (run_dir / "samples").is_dir() and SampleStore(run_dir).done_ids())
        filler = mount / "another-job"
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:  # ENOSPC: the disk is full
                pass
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 3 and "Traceback" not in err, err
        assert "run incomplete: disk full while writing" in err
        assert f"free space, then `runner run --resume {run_dir}`" in err
        assert not [p for p in run_dir.rglob("*") if p.name.endswith("tmp")]
        assert json.loads((run_dir / "run.json").read_text())["status"] != "complete"
        kept = SampleStore(run_dir).done_ids()
        for qsl_idx in kept:  # every sample on disk is whole and verified
            SampleStore(run_dir).load(qsl_idx)
        filler.unlink()
        resumed = run_cli("run", "--resume", str(run_dir))
        assert resumed.returncode == 0, resumed.stderr
        assert hashes(run_dir) == hashes(one_worker_run)

"""A finished sample truncated or bit-flipped on disk: `runner aggregate`, `runner score` and
`runner run --resume` each name it, move it aside (never delete it), print no traceback, and
resume regenerates it, ending with the same accuracy log bytes as the clean run."""

from __future__ import annotations

from pathlib import Path

from cli_support import Ran, cli

from runner.base.fileio import sha256_file
from runner.rundir.mlperf_log import LOG_NAME
from runner.rundir.store import CORRUPT_DIR, SampleStore

COUNT = 4


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-5000])


def flip_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def assert_named_and_moved(proc: Ran, store: SampleStore,
                           qsl_idx: int) -> None:
    assert "Traceback" not in proc.stderr + proc.stdout
    moved = sorted((store.dir / CORRUPT_DIR).glob(f"{qsl_idx:05d}.png.*"))
    assert len(moved) == 1, proc.stderr
    assert f"sample {qsl_idx} is corrupt" in proc.stderr and str(moved[0]) in proc.stderr
    assert f"runner run --resume {store.run_dir}" in proc.stderr
    assert not store.path(qsl_idx).exists()


def test_corrupt_samples_are_moved_aside_and_regenerated_by_resume(tmp_path, tiny_compiled):
    run_dir = tmp_path / "run"
    proc = cli("run", "--profile", "cpu", "--count", str(COUNT), "--no-score",
               "--out", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    clean_log = sha256_file(run_dir / LOG_NAME)
    store = SampleStore(run_dir)

    truncate(store.path(1))
    proc = cli("aggregate", str(run_dir))
    assert proc.returncode == 2
    assert_named_and_moved(proc, store, 1)
    assert "no accuracy log written" in proc.stderr
    assert sha256_file(run_dir / LOG_NAME) == clean_log  # the previous log stays
    assert not list(run_dir.glob(".*.tmp"))

    flip_bit(store.path(2))
    proc = cli("score", str(run_dir), "--torch-device", "cpu")
    assert proc.returncode != 0  # an incomplete run: not scored
    assert_named_and_moved(proc, store, 2)
    assert "2 of 4 requested samples are missing" in proc.stderr  # 1 and 2, before scoring

    flip_bit(store.path(3))  # not yet seen by anyone: resume itself must find it
    proc = cli("run", "--resume", str(run_dir), "--no-score")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "sample 3 is corrupt" in proc.stderr
    assert store.verified_ids() == set(range(COUNT))
    assert len(list((store.dir / CORRUPT_DIR).iterdir())) == 3  # evidence kept
    assert sha256_file(run_dir / LOG_NAME) == clean_log

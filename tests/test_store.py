"""The sample store and the MLPerf log writer: self-describing PNGs, verified parallel reads,
corrupt files moved aside (never deleted), the background writer's crash semantics, and log
bytes identical to the ones the landed (single-threaded) writer produced."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from host_support import tmpfs, wait_for
from mlperf_log_support import write_log

from runner.base.errors import RunnerError
from runner.base.fileio import sha256_bytes, sha256_file
from runner.batch.aggregate import aggregate
from runner.model.images import decode_png, encode_png, png_text
from runner.rundir import mlperf_log
from runner.rundir.mlperf_log import LOG_NAME, PositionalLog, iter_log_samples
from runner.rundir.parallel import ordered_map, prefetch
from runner.rundir.store import CORRUPT_DIR, CorruptSample, SampleStore, SampleWriter

IDS = [0, 3, 7, 11, 12]
BLOCK = mlperf_log._BLOCK  # O_DIRECT's unit: a log window is a multiple of it
# sha256 of the accuracy log `aggregate` wrote for `synthetic_run` before the data path was
# parallelised (computed with the landed code at commit 4ba15d0): the log must stay
# byte-identical.
LANDED_LOG_SHA256 = "dea0b412a5862ecfc25992b02742d83eefde51daad5abccfb69b9be9052a6125"


@pytest.fixture(params=["c", "numpy"])
def encoder(request, monkeypatch) -> str:
    """Runs a test with the C hex encoder (runner/rundir/_hex.c, built by the install) and with
    numpy's, the fallback where no compiler was at hand: the log's bytes must not depend on
    which one the install got."""
    if request.param == "numpy":
        monkeypatch.setattr(mlperf_log, "hex_upper_into", mlperf_log._numpy_hex_upper_into)
    return request.param


def synthetic(i: int, h: int = 40, w: int = 56) -> np.ndarray:
    """Smooth structure plus noise, like a natural image (a constant would hide bugs)."""
    rng = np.random.default_rng(1000 + i)
    y, x = np.mgrid[0:h, 0:w]
    base = ((np.sin(x / (3 + i)) * 60 + np.cos(y / 5) * 50 + 128)[..., None]
            + rng.normal(0, 12, (h, w, 3)))
    return np.clip(base, 0, 255).astype(np.uint8)


def synthetic_run(run_dir: Path) -> SampleStore:
    store = SampleStore(run_dir)
    for i in IDS:
        store.put(i, synthetic(i), "w000", "local-task#0")
    return store


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-1000])


def flip_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10  # inside the pixel data (stored deflate: no checksum hit)
    path.write_bytes(bytes(data))


def test_sample_png_is_self_describing_and_round_trips(tmp_path):
    store = SampleStore(tmp_path)
    image = synthetic(5)
    record = store.put(5, image, "w001", "hip#3")
    text = png_text(store.path(5).read_bytes())
    assert text == {"qsl_idx": "5", "sha256": sha256_bytes(image.tobytes()), "worker": "w001",
                    "device": "hip#3"}
    assert record.to_dict() == {**text, "qsl_idx": 5}
    assert np.array_equal(store.load(5), image)
    assert store.verified_ids() == store.done_ids() == {5}


def test_corrupt_files_are_moved_aside_named_and_no_longer_done(tmp_path):
    store = synthetic_run(tmp_path)
    truncate(store.path(3))
    flip_bit(store.path(7))
    store.path(11).write_bytes(store.path(12).read_bytes())  # another sample's file
    recorded = png_text(store.path(0).read_bytes())["sha256"].encode()
    store.path(0).write_bytes(store.path(0).read_bytes().replace(recorded, b"0" * 64))
    bad = {i: store.path(i).read_bytes() for i in (0, 3, 7, 11)}
    lines: list[str] = []
    assert store.verified_ids(report=lines.append) == {12}
    assert store.done_ids() == {12}  # moved, so resume and status see them as missing
    moved = sorted((store.dir / CORRUPT_DIR).iterdir())
    assert [p.name.split(".png.")[0] for p in moved] == ["00000", "00003", "00007", "00011"]
    for path in moved:  # kept byte for byte, not deleted
        assert path.read_bytes() == bad[int(path.name[:5])]
    assert len(lines) == 4
    for line, path in zip(lines, moved, strict=True):
        assert str(path) in line and f"runner run --resume {tmp_path}" in line
    assert "pixels do not match their recorded sha256" in lines[0]
    assert "unreadable PNG" in lines[1]
    # A flipped pixel byte: the sha256 catches it (the store skips zlib's weaker adler32).
    assert "pixels do not match their recorded sha256" in lines[2]
    assert "the file says it is sample 12" in lines[3]


def test_reading_a_corrupt_sample_is_a_runner_error(tmp_path):
    store = synthetic_run(tmp_path)
    truncate(store.path(0))
    with pytest.raises(CorruptSample, match="sample 0 is corrupt") as err:
        store.load(0)
    assert isinstance(err.value, RunnerError) and err.value.moved_to.is_file()
    assert str(err.value.moved_to) in str(err.value) and "--resume" in str(err.value)
    with pytest.raises(CorruptSample, match="sample 3 is corrupt"):
        flip_bit(store.path(3))
        list(store.iter_samples())


def test_log_bytes_equal_the_landed_writers_for_any_thread_count(tmp_path, encoder):
    synthetic_run(tmp_path)
    for jobs in (1, 3):
        result = aggregate(tmp_path, jobs=jobs, sample_ids=IDS)
        assert sha256_file(tmp_path / LOG_NAME) == LANDED_LOG_SHA256
        assert (result.samples, result.raw_bytes) == (5, 5 * 40 * 56 * 3)
    write_log(tmp_path / "direct.json", [(i, synthetic(i)) for i in IDS])
    assert sha256_file(tmp_path / "direct.json") == LANDED_LOG_SHA256  # the oracle's format
    read = list(iter_log_samples(tmp_path / LOG_NAME, (40, 56, 3)))
    assert [i for i, _ in read] == IDS and np.array_equal(read[1][1], synthetic(3))
    records = json.loads((tmp_path / "dataset.json").read_text())["samples"]
    assert [r["qsl_idx"] for r in records] == IDS


def test_aggregate_of_a_corrupt_run_moves_every_bad_sample_and_writes_no_log(tmp_path):
    store = synthetic_run(tmp_path)
    aggregate(tmp_path, sample_ids=IDS)
    before = (tmp_path / LOG_NAME).read_bytes()
    flip_bit(store.path(3))
    truncate(store.path(12))
    with pytest.raises(RunnerError, match=r"2 corrupt sample\(s\) \(qsl_idx \[3, 12\]\)") as e:
        aggregate(tmp_path, sample_ids=IDS)
    assert "runner run --resume" in str(e.value)
    assert (tmp_path / LOG_NAME).read_bytes() == before  # the old log, untouched
    assert not list(tmp_path.glob(".*.tmp"))
    assert len(list((store.dir / CORRUPT_DIR).iterdir())) == 2
    with pytest.raises(RunnerError, match=r"2 of 5 samples are missing"):
        aggregate(tmp_path, sample_ids=IDS)


def test_writer_marks_a_batch_done_only_after_its_samples_are_on_disk(tmp_path):
    store = SampleStore(tmp_path)
    seen: list[set[int]] = []
    with SampleWriter(store, max_pending=2) as writer:
        for batch in ([0, 1, 2], [3, 4]):
            for i in batch:
                writer.put(i, synthetic(i), "w000", "cpu#0")
            writer.after(lambda: seen.append(store.verified_ids(report=pytest.fail)))
    assert seen == [{0, 1, 2}, {0, 1, 2, 3, 4}]
    assert writer.busy_seconds > 0


def test_a_failed_write_stops_later_batches_and_reaches_the_worker(tmp_path):
    store = SampleStore(tmp_path)
    store.dir.parent.mkdir(exist_ok=True)
    store.dir.write_text("not a directory")  # every write fails, as on a full disk
    marked: list[int] = []
    writer = SampleWriter(store)
    writer.put(0, synthetic(0), "w000", "cpu#0")
    writer.after(lambda: marked.append(0))
    with pytest.raises(RunnerError, match="cannot write sample 0"):
        writer.close()
    assert marked == []  # the batch was never marked done: it goes back to the queue
    with pytest.raises(RunnerError, match="cannot write sample 0"):
        writer.put(1, synthetic(1), "w000", "cpu#0")


def test_read_ahead_keeps_order_bounds_memory_and_passes_errors():
    running, peak = 0, 0
    lock = threading.Lock()

    def slow(i: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.002 * (i % 3))
        with lock:
            running -= 1
        return i * i

    assert list(ordered_map(slow, range(40), jobs=3)) == [(i, i * i) for i in range(40)]
    assert peak <= 3
    assert list(prefetch(iter(range(10)), 2)) == list(range(10))

    def failing():
        yield 1
        raise RunnerError("bad sample 2")

    it = prefetch(failing(), 2)
    assert next(it) == 1
    with pytest.raises(RunnerError, match="bad sample 2"):
        next(it)
    produced: list[int] = []

    def endless():
        for i in range(10_000):
            produced.append(i)
            yield i

    early = prefetch(endless(), 2)
    assert next(early) == 0
    early.close()  # the consumer stops: so does the producer
    assert len(produced) < 10


@pytest.mark.parametrize("shape", [(1, 1, 3), (3, 5, 3), (300, 257, 3)])
def test_hex_and_stored_block_decoding_match_the_plain_ways(shape, encoder):
    """The hex encoders and the stored-block PNG path are what aggregation runs on; they
    must give Python's own hex and zlib's inflate, for odd byte counts and images spanning
    several 64 KiB stored blocks (and numpy's 64 KiB encoding chunks) alike."""
    image = np.random.default_rng(7).integers(0, 256, shape, dtype=np.uint8)
    text = np.empty(2 * image.size, np.uint8)
    mlperf_log.hex_upper_into(image.reshape(-1), text)
    assert text.tobytes() == image.tobytes().hex().upper().encode()
    for level in (0, 1):
        assert np.array_equal(decode_png(encode_png(image, {"k": "v"}, level)), image)


def test_hex_encoders_agree_at_any_alignment_and_refuse_a_wrong_destination(encoder):
    """Aggregation encodes straight into a record's staging buffer, where the hex starts
    at whatever offset the record's head leaves, from any byte of the image."""
    raw = np.random.default_rng(3).integers(0, 256, 5000, dtype=np.uint8)
    for start, stop, at in [(0, 5000, 0), (1, 4999, 3), (3, 4, 1), (2, 2, 0), (7, 4100, 2)]:
        dest = np.full(2 * (stop - start) + 8, ord("?"), np.uint8)
        mlperf_log.hex_upper_into(raw[start:stop], dest[at : at + 2 * (stop - start)])
        expected = b"?" * at + raw[start:stop].tobytes().hex().upper().encode()
        assert dest.tobytes() == expected + b"?" * (8 - at)
    if encoder == "c":  # numpy's own error for a wrong length is a broadcast ValueError
        with pytest.raises(ValueError, match="destination holds 9 bytes"):
            mlperf_log.hex_upper_into(raw[:5], np.empty(9, np.uint8))
        with pytest.raises(TypeError):
            mlperf_log.hex_upper_into(raw[:5], bytes(10))  # read-only


def test_the_install_built_the_c_hex_encoder():
    """The extension is optional so an install without a compiler still works; the test
    command's install has one, and a silently failed build would hide a 5x slower log."""
    assert mlperf_log.hex_upper_into is not mlperf_log._numpy_hex_upper_into, (
        "runner.rundir._hex is not built: install a C compiler (gcc) and re-run "
        "`python3 -m pip install -e .`")


def test_a_broken_stored_block_or_cut_file_is_malformed():
    data = bytearray(encode_png(np.zeros((300, 257, 3), np.uint8), None, 0))
    first_block = data.index(b"IDAT") + 4 + 2  # after the zlib header
    assert data[first_block] == 0  # a stored, non-final block: the path under test
    with pytest.raises(ValueError, match="truncated PNG"):
        decode_png(bytes(data[:-20]))  # pixels all there, checksum and IEND cut off
    data[first_block + 3] ^= 0xFF  # NLEN no longer the complement of LEN
    with pytest.raises(ValueError, match="broken stored deflate block"):
        decode_png(bytes(data))


@pytest.mark.parametrize("window", [BLOCK, 5 * BLOCK, None])
@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("size", [0, 1, 700, 2048, 2049, 4096, 6000, 40 * 56 * 3,
                                  2 << 16, (3 << 16) + 7])
def test_positional_log_bytes_equal_the_sequential_writers_in_any_write_order(
        tmp_path, size, direct, window, encoder):
    """Records smaller than a 4 KiB block, records straddling block and window edges (a
    window shared by records from different threads, an edge mid-byte of the hex), records
    spanning many windows, the whole log in one window (the default's 16 MiB), the file's
    last partial block, and records hex-encoded in several numpy chunks, an odd byte last:
    all land where the sequential writer puts them, whichever thread writes first."""
    ids = [0, 2, 3, 9, 10, 11, 57, 58, 999, 1000, 4999]
    rng = np.random.default_rng(size)
    images = {i: rng.integers(0, 256, size, dtype=np.uint8) for i in ids}
    write_log(tmp_path / "sequential.json", [(i, images[i]) for i in ids])
    sizes = {} if window is None else {"window": window}
    with PositionalLog(tmp_path / LOG_NAME, ids, size, direct=direct, **sizes) as log:
        order = list(rng.permutation(ids))
        threads = [threading.Thread(target=lambda part=order[k::3]: [
            log.write(int(i), images[i]) for i in part]) for k in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert (tmp_path / LOG_NAME).read_bytes() == (tmp_path / "sequential.json").read_bytes()
    assert log.stats().records == len(ids)
    assert log.direct == (direct and accepts_o_direct(tmp_path))
    assert not list(tmp_path.glob(".*.tmp"))


def accepts_o_direct(directory: Path) -> bool:
    """Whether this file system opens files for O_DIRECT (ext4 and xfs do, some overlay
    and network mounts do not): where it does, the direct path above is the one tested."""
    try:
        os.close(os.open(directory / "probe", os.O_WRONLY | os.O_CREAT | os.O_DIRECT))
    except OSError:
        return False
    finally:
        (directory / "probe").unlink(missing_ok=True)
    return True


def test_an_empty_positional_log_is_the_sequential_writers_empty_log(tmp_path):
    write_log(tmp_path / "sequential.json", [])
    with PositionalLog(tmp_path / LOG_NAME, [], 3145728):
        pass
    assert (tmp_path / LOG_NAME).read_bytes() == (tmp_path / "sequential.json").read_bytes()


def test_positional_log_refuses_a_record_of_the_wrong_size(tmp_path):
    with (pytest.raises(ValueError, match="sample 4: 3 bytes for a log of 4-byte samples"),
          PositionalLog(tmp_path / LOG_NAME, [4], 4) as log):
        log.write(4, np.zeros(3, np.uint8))
    assert not list(tmp_path.iterdir())  # no log, no temp file


def test_positional_log_missing_a_record_is_an_error_not_a_log_with_a_hole(tmp_path):
    with (pytest.raises(RuntimeError, match="3 records were expected, some were never "
                        "written"),
          PositionalLog(tmp_path / LOG_NAME, [1, 2, 3], 4, window=BLOCK) as log):
        log.write(1, np.zeros(4, np.uint8))
        log.write(3, np.zeros(4, np.uint8))
    assert not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match=f"positive multiple of {BLOCK} bytes"):
        PositionalLog(tmp_path / LOG_NAME, [1], 4, window=BLOCK + 1)


def test_positional_log_on_a_full_disk_leaves_the_previous_log(tmp_path):
    """A full disk mid-log (O_DIRECT where tmpfs allows it) raises the OS's ENOSPC, the temp
    file goes, and the log written before stays whole."""
    with tmpfs(tmp_path / "small", "size=256k") as disk:
        image = np.random.default_rng(0).integers(0, 256, 24 * 1024, dtype=np.uint8)
        write_log(disk / LOG_NAME, [(0, image[:10])])
        before = (disk / LOG_NAME).read_bytes()
        with (pytest.raises(OSError) as e,
              PositionalLog(disk / LOG_NAME, list(range(8)), image.size) as log):
            for i in range(8):
                log.write(i, image)
        assert e.value.errno == errno.ENOSPC
        assert (disk / LOG_NAME).read_bytes() == before
        assert sorted(p.name for p in disk.iterdir()) == [LOG_NAME]


def test_aggregate_refuses_samples_of_two_sizes_and_writes_no_log(tmp_path):
    store = synthetic_run(tmp_path)
    store.put(20, synthetic(20, h=24), "w000", "cpu#0")
    with pytest.raises(RunnerError, match="sample 20 is 24x56x3 but sample 0 is 40x56x3") as e:
        aggregate(tmp_path, sample_ids=[*IDS, 20])
    assert str(store.path(20)) in str(e.value) and "one profile" in str(e.value)
    assert not (tmp_path / LOG_NAME).exists() and not list(tmp_path.glob(".*.tmp"))


def test_a_failed_log_never_leaves_a_reading_thread_blocked(tmp_path):
    """Readers still handing windows over when the log is discarded (Ctrl-C, a corrupt
    sample elsewhere) get an error instead of waiting forever: here the writer is held up
    until after the failure, with one-block windows, so one window is being written, one
    waits in the queue, and each of the eight threads waits for room to hand over the
    first window its record completes on its own (every record covers four whole ones)
    when the log is discarded."""
    image = np.zeros(3 * 4096, np.uint8)
    outcomes: list[str] = []
    disk_busy = threading.Event()

    def hand_over(log: PositionalLog, qsl_idx: int) -> None:
        try:
            log.write(qsl_idx, image)
            outcomes.append("queued")
        except RuntimeError as e:
            outcomes.append(str(e))

    threads: list[threading.Thread] = []
    with (pytest.raises(KeyboardInterrupt),
          PositionalLog(tmp_path / LOG_NAME, list(range(8)), image.size, pending=1,
                        window=BLOCK) as log):
        put = log._put
        log._put = lambda window: (disk_busy.wait(), put(window))  # type: ignore[method-assign]
        threads = [threading.Thread(target=hand_over, args=(log, i)) for i in range(8)]
        for thread in threads:
            thread.start()
        wait_for(lambda: log._queue.full())
        threading.Timer(0.5, disk_busy.set).start()
        raise KeyboardInterrupt
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive()
    discarded = [o for o in outcomes if o != "queued"]
    assert len(discarded) == 8
    assert all(o.endswith("log discarded; record not written") for o in discarded)
    assert not list(tmp_path.iterdir())


def test_aggregate_shows_its_progress_unless_asked_not_to(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RUNNER_PROGRESS", "plain")
    synthetic_run(tmp_path)
    aggregate(tmp_path, sample_ids=IDS)
    lines = capsys.readouterr().err.splitlines()
    assert lines and lines[-1].startswith("aggregate 5/5 samples  elapsed"), lines
    aggregate(tmp_path, sample_ids=IDS, progress=False)
    assert capsys.readouterr().err == ""

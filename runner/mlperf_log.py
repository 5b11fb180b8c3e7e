"""MLPerf's accuracy log, `mlperf_log_accuracy.json`: a JSON list of records
`{"seq_id", "qsl_idx", "data", "size"}`, `data` the hex of the raw uint8 HWC bytes.

Written streaming (5000 SDXL images are 15 GB raw, 30 GB hex) and read streaming, records
deduplicated by qsl_idx with the first one winning, as MLPerf's accuracy script does.
"""

from __future__ import annotations

import contextlib
import errno
import json
import mmap
import os
import queue
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runner.errors import RunnerError

LOG_NAME = "mlperf_log_accuracy.json"


@dataclass(frozen=True)
class LogStats:
    path: str
    records: int
    bytes: int


# Two ASCII bytes per uint8 value, upper-case as MLPerf's log has them: indexing this table
# with the raw bytes is the whole hex encoding, in C and off the GIL (numpy's take).
_HEX = np.frombuffer(b"".join(f"{i:02X}".encode() for i in range(256)), np.uint16)
# The same for byte pairs: a uint16 view of the raw bytes indexes four ASCII bytes at once,
# half the lookups (1.2 ms instead of 2.4 ms per 1024x1024x3 image). A uint16 read as
# native-endian holds the first byte in its low half on little-endian machines, so its
# entry is the first byte's hex then the second's in memory order; big-endian the reverse.
_PAIR_FIRST = np.tile(_HEX, 256).astype(np.uint32)
_PAIR_SECOND = np.repeat(_HEX, 256).astype(np.uint32)
_HEX_PAIRS = (_PAIR_FIRST | _PAIR_SECOND << 16 if sys.byteorder == "little"
              else _PAIR_FIRST << 16 | _PAIR_SECOND)


def hex_upper(image: np.ndarray) -> np.ndarray:
    """The log's `data` field for one image: upper-case hex of its raw uint8 bytes, as a
    buffer (an array whose memory is the ASCII text) that a file writes uncopied."""
    raw = np.ascontiguousarray(image, dtype=np.uint8).reshape(-1)
    if raw.size % 2:
        return np.take(_HEX, raw)
    return np.take(_HEX_PAIRS, raw.view(np.uint16))


_OPEN, _SEPARATOR, _CLOSE = b"[\n", b",\n", b"\n]\n"


def _head(seq_id: int, qsl_idx: int) -> bytes:
    return b'{"seq_id": %d, "qsl_idx": %d, "data": "' % (seq_id, qsl_idx)


def _tail(size: int) -> bytes:
    return b'", "size": %d}' % size


def write_log(path: Path, samples: Iterable[tuple[int, np.ndarray]]) -> LogStats:
    """The log of (qsl_idx, uint8 image) in the order given, written sequentially (samples
    of any sizes; aggregation's same-size logs go through `PositionalLog`). Written to a
    temp file and renamed, so a reader never sees half a log: any failure, a full disk
    included, removes the temp file and leaves the previous log (or none) in place."""
    tmp = _temp_path(path)
    count = 0
    try:
        with open(tmp, "wb") as f:
            f.write(_OPEN)
            for qsl_idx, image in samples:
                if count:
                    f.write(_SEPARATOR)
                f.write(_head(count, int(qsl_idx)))
                f.write(hex_upper(image))  # type: ignore[arg-type]  # numpy types its buffer protocol for 3.12+ only
                f.write(_tail(np.asarray(image).size))
                count += 1
            f.write(_CLOSE)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return LogStats(str(path), count, path.stat().st_size)


def _temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp")


class PositionalLog:
    """The log of samples that all have `size` raw bytes, written in any order from any
    number of threads: every record's offset follows from the qsl_idx order alone, so a
    reading thread hands its record over (`write`) and goes on to its next sample while
    one writer thread puts the record in its place. The bytes equal `write_log`'s for
    the same records.

    Where the file system allows it, each record's whole 4 KiB blocks go to the disk with
    O_DIRECT from an aligned staging buffer: a 30 GB log would otherwise cost the kernel a
    page-cache copy and page bookkeeping per 4 KiB (as much CPU as decoding and hashing, on
    the same cores) plus a final fsync of everything. Only the partial blocks where two
    records meet go through the page cache. One writer, because the file system serialises
    writes to one file anyway and the disk takes direct writes faster in order; at most
    `pending` records wait for it, so memory is bounded. As a context manager: the temp
    file is renamed over `path` on success and removed on any failure (a full disk, a
    corrupt sample, Ctrl-C), leaving the previous log (or none) in place."""

    def __init__(self, path: Path, qsl_ids: list[int], size: int, direct: bool = True,
                 pending: int = 4):
        self.path, self.size, self._want_direct = path, size, direct
        self._seq = {qsl_idx: seq for seq, qsl_idx in enumerate(qsl_ids)}
        if len(self._seq) != len(qsl_ids):
            raise ValueError("a log's qsl_ids must be distinct")
        self._offsets, end = [], len(_OPEN)
        for seq, qsl_idx in enumerate(qsl_ids):
            self._offsets.append(end)
            end += (len(_SEPARATOR) if seq else 0) + len(_head(seq, qsl_idx)) + 2 * size \
                + len(_tail(size))
        self._close_at = end
        self._fd = self._direct_fd = -1
        # Whether records' whole blocks bypassed the page cache: False where the file
        # system refuses O_DIRECT (some overlay and network mounts) or `direct` was off.
        self.direct = False
        self._queue: queue.Queue[_Record | None] = queue.Queue(pending)
        self._free: queue.SimpleQueue[np.ndarray] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._abandoned = False

    def __enter__(self) -> PositionalLog:
        self._tmp = _temp_path(self.path)
        self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(self._fd, self._close_at + len(_CLOSE))
            _pwrite_all(self._fd, [memoryview(_OPEN)], 0)
            _pwrite_all(self._fd, [memoryview(_CLOSE)], self._close_at)
            if self._want_direct and _O_DIRECT:
                with contextlib.suppress(OSError):
                    self._direct_fd = os.open(self._tmp, os.O_WRONLY | _O_DIRECT)
                    self.direct = True
        except BaseException:
            self._discard()
            raise
        self._writer = threading.Thread(target=self._write_records, name="log-writer",
                                        daemon=True)
        self._writer.start()
        return self

    def write(self, qsl_idx: int, image: np.ndarray) -> None:
        """Queues sample `qsl_idx`'s record, hex-encoding `image` (uint8, `size` bytes)
        on the calling thread; `image` must not change afterwards. Raises the writer's
        error, if it had one."""
        if self._error is not None:
            raise self._error
        seq = self._seq[qsl_idx]
        raw = np.ascontiguousarray(image, dtype=np.uint8).reshape(-1)
        if raw.size != self.size:
            raise ValueError(f"sample {qsl_idx}: {raw.size} bytes for a log of "
                             f"{self.size}-byte samples")
        record = _RecordText((_SEPARATOR if seq else b"") + _head(seq, qsl_idx), raw,
                             _tail(self.size))
        start = self._offsets[seq]
        stop = start + record.length
        first, last = -(-start // _BLOCK) * _BLOCK, stop // _BLOCK * _BLOCK
        if self._direct_fd < 0 or last <= first:
            self._submit(_Record([(start, record.views())]))
            return
        blocks = self._staging()
        record.fill(blocks[: last - first], first - start, last - start)
        edges = [(start, [record.span(0, first - start)]),
                 (last, [record.span(last - start, record.length)])]
        self._submit(_Record(edges, first, blocks, last - first))

    def _submit(self, record: _Record) -> None:
        """Waits for room in the queue, but not on a log that is being discarded: a reading
        thread still running after a failure (Ctrl-C, a corrupt sample) must not block
        forever on a writer that has stopped."""
        while not self._abandoned:
            try:
                self._queue.put(record, timeout=0.1)
                return
            except queue.Full:
                continue
        raise RuntimeError(f"{self.path}: log discarded; record not written")

    def _staging(self) -> np.ndarray:
        """A block-aligned buffer that holds any record's whole blocks, reused record after
        record (a fresh 6 MB one would cost ~1500 page faults each time)."""
        try:
            return self._free.get_nowait()
        except queue.Empty:
            raw = np.empty(2 * self.size + 3 * _BLOCK, np.uint8)
            skip = -raw.ctypes.data % _BLOCK
            return raw[skip : skip + 2 * self.size + 2 * _BLOCK]

    def _write_records(self) -> None:
        while (record := self._queue.get()) is not None:
            if self._error is None and not self._abandoned:
                try:
                    self._put(record)
                except BaseException as e:  # handed to the next write() or __exit__
                    self._error = e
            if record.blocks is not None:
                self._free.put(record.blocks)

    def _put(self, record: _Record) -> None:
        for offset, views in record.buffered:
            _pwrite_all(self._fd, views, offset)
        if record.blocks is None:
            return
        blocks = [memoryview(record.blocks[: record.length])]  # type: ignore[arg-type]  # numpy types its buffer protocol for 3.12+ only
        try:
            _pwrite_all(self._direct_fd, blocks, record.offset)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
            _pwrite_all(self._fd, blocks, record.offset)  # an alignment the device refuses

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self._abandoned = kind is not None
        self._queue.put(None)
        self._writer.join()
        if kind is not None:
            self._discard()
            return
        try:
            if self._error is not None:
                raise self._error
            os.fsync(self._fd)
            self._close()
            os.replace(self._tmp, self.path)
        except BaseException:
            self._discard()
            raise

    def _close(self) -> None:
        for fd in (self._direct_fd, self._fd):
            if fd >= 0:
                os.close(fd)
        self._fd = self._direct_fd = -1

    def _discard(self) -> None:
        self._close()
        self._tmp.unlink(missing_ok=True)

    def stats(self) -> LogStats:
        return LogStats(str(self.path), len(self._seq), self.path.stat().st_size)


@dataclass
class _Record:
    """One record's writes: byte ranges through the page cache, then `length` bytes of
    `blocks` (whole disk blocks, aligned) at `offset` with O_DIRECT."""
    buffered: list[tuple[int, list[memoryview]]]
    offset: int = 0
    blocks: np.ndarray | None = None
    length: int = 0


# O_DIRECT's unit: offsets, lengths and buffer addresses are multiples of it. 4 KiB covers
# 512-byte and 4 KiB logical blocks alike; a whole memory page, so the page-cached edges
# and the direct writes never share a page (64 KiB pages on some arm64 kernels).
_BLOCK = max(4096, mmap.PAGESIZE)
_O_DIRECT = getattr(os, "O_DIRECT", 0)


# Raw bytes hex-encoded per step when a record is built in place: numpy's index temporaries
# (8 bytes per byte pair) and the characters stay in cache instead of streaming ~45 MB
# through memory per 1024x1024 image, which two threads on two cores cannot share.
_HEX_CHUNK = 1 << 16


@dataclass(frozen=True)
class _RecordText:
    """One record's bytes as `prefix` + upper-case hex of `raw` + `tail`, produced a
    range at a time straight into a destination (`fill`)."""

    prefix: bytes
    raw: np.ndarray  # flat uint8
    tail: bytes

    @property
    def length(self) -> int:
        return len(self.prefix) + 2 * self.raw.size + len(self.tail)

    def views(self) -> list[memoryview]:
        """The whole record as buffers, the hex encoded at once."""
        encoded = memoryview(hex_upper(self.raw)).cast("B")  # type: ignore[arg-type]  # numpy types its buffer protocol for 3.12+ only
        return [memoryview(self.prefix), encoded, memoryview(self.tail)]

    def span(self, lo: int, hi: int) -> memoryview:
        """Bytes [lo, hi) of the record, in a new buffer."""
        out = np.empty(hi - lo, np.uint8)
        self.fill(out, lo, hi)
        return memoryview(out)  # type: ignore[arg-type]  # numpy types its buffer protocol for 3.12+ only

    def fill(self, dest: np.ndarray, lo: int, hi: int) -> None:
        """dest[:hi - lo] = bytes [lo, hi) of the record."""
        hex_at, tail_at = len(self.prefix), len(self.prefix) + 2 * self.raw.size
        a, b = lo, min(hi, hex_at)
        if a < b:
            dest[: b - a] = np.frombuffer(self.prefix, np.uint8)[a:b]
        a, b = max(lo, hex_at), min(hi, tail_at)
        if a < b:
            self._fill_hex(dest[a - lo : b - lo], a - hex_at, b - hex_at)
        a, b = max(lo, tail_at), hi
        if a < b:
            dest[a - lo : b - lo] = np.frombuffer(self.tail, np.uint8)[a - tail_at : b - tail_at]

    def _fill_hex(self, dest: np.ndarray, lo: int, hi: int) -> None:
        """dest[:] = hex characters [lo, hi), encoded a cache-sized chunk at a time from
        even raw offsets (so the byte pairs `hex_upper` looks up stay 2-byte aligned)."""
        first = lo // 4 * 2
        for begin in range(first, (hi + 1) // 2, _HEX_CHUNK):
            chars = hex_upper(self.raw[begin : begin + _HEX_CHUNK]).view(np.uint8)
            a, b = max(lo, 2 * begin), min(hi, 2 * begin + chars.size)
            dest[a - lo : b - lo] = chars[a - 2 * begin : b - 2 * begin]


def _pwrite_all(fd: int, views: list[memoryview], offset: int) -> None:
    """pwritev until every byte is written: a regular file writes all of it, but a signal
    or a nearly full disk may cut a write short."""
    views = [v for v in views if len(v)]
    while views:
        done = os.pwritev(fd, views, offset)
        offset += done
        while views and done >= len(views[0]):
            done -= len(views.pop(0))
        if views:
            views[0] = views[0][done:]


def _records(path: Path) -> Iterator[dict]:
    """Streams the list's objects with a raw decoder, never holding the file in memory."""
    decoder = json.JSONDecoder()
    buf, pos, started = "", 0, False
    with open(path, encoding="ascii") as f:
        while True:
            chunk = f.read(1 << 22)
            buf = buf[pos:] + chunk
            pos = 0
            while True:
                while pos < len(buf) and buf[pos] in " \t\r\n,":
                    pos += 1
                if not started:
                    if pos < len(buf):
                        if buf[pos] != "[":
                            raise RunnerError("not a JSON list", where=str(path))
                        started, pos = True, pos + 1
                    continue
                if pos < len(buf) and buf[pos] == "]":
                    return
                try:
                    obj, end = decoder.raw_decode(buf, pos)
                except ValueError:
                    break  # need more text
                yield obj
                pos = end
            if not chunk:
                raise RunnerError("truncated accuracy log", where=str(path),
                                  fix="re-run `runner aggregate` for this run dir")


def iter_log_samples(path: Path, image_shape: tuple[int, int, int],
                     keep_duplicates: bool = False) -> Iterator[tuple[int, np.ndarray]]:
    """(qsl_idx, uint8 HWC) per distinct qsl_idx, first record winning; with
    `keep_duplicates` every record, for a consumer that counts what it skips."""
    seen: set[int] = set()
    expected = int(np.prod(image_shape))
    for record in _records(path):
        try:
            qsl_idx, data = int(record["qsl_idx"]), bytes.fromhex(record["data"])
        except (KeyError, TypeError, ValueError) as e:
            raise RunnerError(f"bad record {str(record)[:80]}: {e}", where=str(path)) from e
        if qsl_idx in seen and not keep_duplicates:
            continue
        seen.add(qsl_idx)
        if len(data) != expected:
            raise RunnerError(f"sample {qsl_idx} has {len(data)} bytes, expected {expected} "
                              f"for {image_shape} uint8 images", where=str(path))
        yield qsl_idx, np.frombuffer(data, np.uint8).reshape(image_shape)

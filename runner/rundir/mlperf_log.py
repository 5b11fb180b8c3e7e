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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runner.base.errors import BadInput
from runner.inputs.jsonfile import decoder as json_decoder

LOG_NAME = "mlperf_log_accuracy.json"
# A malformed log is fixed by writing it again (`runner aggregate` for a run dir).
REWRITE = "write the log again (`runner aggregate RUN_DIR`), or point at MLPerf's own"


@dataclass(frozen=True)
class LogStats:
    path: str
    records: int
    bytes: int


# Two ASCII bytes per uint8 value, upper-case as MLPerf's log has them.
_HEX = np.frombuffer(b"".join(f"{i:02X}".encode() for i in range(256)), np.uint16)
_HEX_CHARS = _HEX.view(np.uint8)  # byte b's characters at 2b and 2b + 1
# The same for byte pairs: a uint16 view of the raw bytes indexes four ASCII bytes at once,
# half the lookups. A uint16 read as native-endian holds the first byte in its low half on
# little-endian machines, so its entry is the first byte's hex then the second's in memory
# order; big-endian the reverse.
_PAIR_FIRST = np.tile(_HEX, 256).astype(np.uint32)
_PAIR_SECOND = np.repeat(_HEX, 256).astype(np.uint32)
_HEX_PAIRS = (_PAIR_FIRST | _PAIR_SECOND << 16 if sys.byteorder == "little"
              else _PAIR_FIRST << 16 | _PAIR_SECOND)
# Raw bytes numpy encodes per step: its index temporaries (8 bytes per byte pair) and the
# characters stay in cache instead of streaming through memory.
_HEX_CHUNK = 1 << 16


def _numpy_hex_upper_into(src: np.ndarray, dest: np.ndarray) -> None:
    """dest[:] = the upper-case hex of src (flat uint8; dest flat uint8, twice as long), by
    numpy's table lookup: the encoder where `runner.rundir._hex` was not built."""
    even = src.size - src.size % 2
    for begin in range(0, even, _HEX_CHUNK):
        end = min(begin + _HEX_CHUNK, even)
        dest[2 * begin : 2 * end] = np.take(_HEX_PAIRS, src[begin:end].view(np.uint16)
                                            ).view(np.uint8)
    if even < src.size:
        dest[2 * even :] = _HEX_CHARS[2 * int(src[-1]) :][:2]


try:  # vectorised C with the GIL released, ~5x numpy's lookup (runner/rundir/_hex.c)
    from runner.rundir._hex import upper_into as hex_upper_into
except ImportError:  # installed without a C compiler
    hex_upper_into = _numpy_hex_upper_into


_OPEN, _SEPARATOR, _CLOSE = b"[\n", b",\n", b"\n]\n"
_NO_BYTES = np.empty(0, np.uint8)


def _head(seq_id: int, qsl_idx: int) -> bytes:
    return b'{"seq_id": %d, "qsl_idx": %d, "data": "' % (seq_id, qsl_idx)


def _tail(size: int) -> bytes:
    return b'", "size": %d}' % size


def _temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp")


class PositionalLog:
    """The log of samples that all have `size` raw bytes, written in any order from any
    number of threads: every record's offset follows from the qsl_idx order alone, so a
    reading thread hex-encodes its record straight into the file's bytes (`write`) and
    goes on to its next sample.

    The file is written in aligned windows of `window` bytes, each held in memory until
    the records that cover it are all in place and then written whole by one writer
    thread, with O_DIRECT where the file system allows it: a 30 GB log would otherwise
    cost the kernel a page-cache copy and page bookkeeping per 4 KiB (as much CPU as
    decoding and hashing, on the same cores) plus a final fsync of everything. Large
    writes because this disk loses throughput to the gaps between writes whenever the
    cores are busy: 16 MiB windows write the log ~1.5x faster beside the reading threads
    than one write per 6 MB record did. One writer, because the file system serialises
    writes to one file anyway; at most `pending` whole windows wait for it. Memory holds
    the windows that records in flight touch: a few for a caller that writes in roughly
    qsl_idx order, as aggregation's bounded read-ahead does. As a context manager: the
    temp file is renamed over `path` on success and removed on any failure (a full disk,
    a corrupt sample, Ctrl-C), leaving the previous log (or none) in place."""

    def __init__(self, path: Path, qsl_ids: list[int], size: int, direct: bool = True,
                 pending: int = 2, window: int = 16 << 20):
        if window <= 0 or window % _BLOCK:
            raise ValueError(f"a log window is a positive multiple of {_BLOCK} bytes")
        self.path, self.size, self._want_direct, self._window = path, size, direct, window
        self._seq = {qsl_idx: seq for seq, qsl_idx in enumerate(qsl_ids)}
        if len(self._seq) != len(qsl_ids):
            raise ValueError("a log's qsl_ids must be distinct")
        self._offsets, end = [], len(_OPEN)
        for seq, qsl_idx in enumerate(qsl_ids):
            self._offsets.append(end)
            end += (len(_SEPARATOR) if seq else 0) + len(_head(seq, qsl_idx)) + 2 * size \
                + len(_tail(size))
        self._close_at, self._length = end, end + len(_CLOSE)
        self._fd = self._direct_fd = -1
        # Whether the windows bypassed the page cache: False where the file system refuses
        # O_DIRECT (some overlay and network mounts) or `direct` was off.
        self.direct = False
        self._windows: dict[int, _Window] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[_Window | None] = queue.Queue(pending)
        self._free: queue.SimpleQueue[np.ndarray] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._abandoned = False

    def __enter__(self) -> PositionalLog:
        self._tmp = _temp_path(self.path)
        self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(self._fd, self._length)
            if self._want_direct and _O_DIRECT:
                with contextlib.suppress(OSError):
                    self._direct_fd = os.open(self._tmp, os.O_WRONLY | _O_DIRECT)
                    self.direct = True
        except BaseException:
            self._discard()
            raise
        self._writer = threading.Thread(target=self._write_windows, name="log-writer",
                                        daemon=True)
        self._writer.start()
        # The brackets are the only bytes no record covers: with them in place, an empty
        # log's one window is complete at once, like any window when its last record lands.
        for text, at in ((_OPEN, 0), (_CLOSE, self._close_at)):
            self._place(at, at + len(text), _RecordText(text, _NO_BYTES, b"").fill)
        return self

    def write(self, qsl_idx: int, image: np.ndarray) -> None:
        """Hex-encodes sample `qsl_idx`'s record (`image`: uint8, `size` bytes) into its
        place on the calling thread, handing every window it completes to the writer.
        Raises the writer's error, if it had one."""
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
        self._place(start, start + record.length, record.fill)

    def _place(self, start: int, stop: int,
               fill: Callable[[np.ndarray, int, int], None]) -> None:
        """fill(dest, lo, hi) puts bytes [start + lo, start + hi) of the file in dest, for
        each window the range covers; windows it completes go to the writer. The fills run
        unlocked (no two ranges overlap), so the reading threads encode in parallel."""
        for index in range(start // self._window, (stop - 1) // self._window + 1):
            with self._lock:
                window = self._windows.get(index) or self._open_window(index)
            a, b = max(start, window.offset), min(stop, window.offset + window.length)
            fill(window.buffer[a - window.offset : b - window.offset], a - start, b - start)
            with self._lock:
                window.missing -= b - a
                done = window.missing == 0
                if done:
                    del self._windows[index]
            if done:
                self._submit(window)

    def _open_window(self, index: int) -> _Window:
        offset = index * self._window
        length = min(self._window, self._length - offset)
        try:  # reused window after window: a fresh 16 MiB would cost ~4000 page faults
            buffer = self._free.get_nowait()
        except queue.Empty:
            raw = np.empty(self._window + _BLOCK, np.uint8)
            skip = -raw.ctypes.data % _BLOCK
            buffer = raw[skip : skip + self._window]
        window = _Window(offset, length, buffer, length)
        self._windows[index] = window
        return window

    def _submit(self, window: _Window) -> None:
        """Waits for room in the queue, but not on a log that is being discarded: a reading
        thread still running after a failure (Ctrl-C, a corrupt sample) must not block
        forever on a writer that has stopped."""
        while not self._abandoned:
            try:
                self._queue.put(window, timeout=0.1)
                return
            except queue.Full:
                continue
        raise RuntimeError(f"{self.path}: log discarded; record not written")

    def _write_windows(self) -> None:
        while (window := self._queue.get()) is not None:
            if self._error is None and not self._abandoned:
                try:
                    self._put(window)
                except BaseException as e:  # handed to the next write() or __exit__
                    self._error = e
            self._free.put(window.buffer)

    def _put(self, window: _Window) -> None:
        """The window's whole blocks with O_DIRECT, the file's last partial block (or all
        of it, without O_DIRECT) through the page cache."""
        whole = window.length // _BLOCK * _BLOCK if self._direct_fd >= 0 else 0
        view = memoryview(window.buffer)  # type: ignore[arg-type]  # numpy types its buffer protocol for 3.12+ only
        if whole:
            try:
                _pwrite_all(self._direct_fd, view[:whole], window.offset)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                whole = 0  # an alignment the device refuses: all through the page cache
        _pwrite_all(self._fd, view[whole : window.length], window.offset + whole)

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
            if self._windows:
                raise RuntimeError(f"{self.path}: {len(self._seq)} records were expected, "
                                   "some were never written")
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
class _Window:
    """Bytes [offset, offset + length) of the log, `missing` of them not yet in `buffer`
    (block-aligned, reused once written)."""
    offset: int
    length: int
    buffer: np.ndarray
    missing: int


# O_DIRECT's unit: offsets, lengths and buffer addresses are multiples of it. 4 KiB covers
# 512-byte and 4 KiB logical blocks alike; a whole memory page, so the page-cached tail
# and the direct writes never share a page (64 KiB pages on some arm64 kernels).
_BLOCK = max(4096, mmap.PAGESIZE)
_O_DIRECT = getattr(os, "O_DIRECT", 0)


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
        """dest[:] = hex characters [lo, hi): whole bytes' in one call, and the one
        character of a byte the range cuts at either end (a block edge can fall mid-byte)."""
        first, stop = -(-lo // 2), hi // 2  # the bytes whose two characters are both inside
        if first < stop:
            hex_upper_into(self.raw[first:stop], dest[2 * first - lo : 2 * stop - lo])
        if lo % 2:
            dest[0] = _HEX_CHARS[2 * int(self.raw[lo // 2]) + 1]
        if hi % 2:
            dest[hi - 1 - lo] = _HEX_CHARS[2 * int(self.raw[hi // 2])]


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    """pwrite until every byte is written: a regular file writes all of it, but a signal
    or a nearly full disk may cut a write short."""
    while view:
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done


def truncation(path: Path) -> str | None:
    """Why the log is cut short (None when it opens with `[` and closes with `]`): checked
    from its two ends, before a byte scan of 30 GB counts what is missing."""
    try:
        with open(path, "rb") as f:
            head = f.read(64).lstrip()
            size = f.seek(0, 2)
            f.seek(max(0, size - 64))
            tail = f.read().rstrip()
    except OSError as e:
        raise BadInput(f"cannot read the accuracy log: {e.strerror or e}",
                       where=str(path), fix="check the path and its permissions") from e
    if not head.startswith(b"["):
        return "it is not a JSON list" if head else "it is empty"
    if not tail.endswith(b"]"):
        return f"it ends without its closing `]` ({size} bytes: cut off while being written " \
            "or copied)"
    return None


TRUNCATED_FIX = ("if it is a run's log, write it again with `runner aggregate RUN_DIR`; "
                 "else copy the complete log again")


def _records(path: Path) -> Iterator[dict]:
    """Streams the list's objects with a raw decoder, never holding the file in memory;
    numbers and nesting bounded as every JSON the runner reads (runner.inputs.jsonfile)."""
    decoder = json_decoder()
    buf, pos, started = "", 0, False
    try:
        with open(path, encoding="ascii") as f:
            while True:
                chunk = f.read(1 << 22)
                buf = buf[pos:] + chunk
                pos = 0
                while True:
                    while pos < len(buf) and buf[pos] in " \t\r\n,":
                        pos += 1
                    if not started:
                        if pos >= len(buf):
                            break  # need more text (an empty log used to spin here)
                        if buf[pos] != "[":
                            raise BadInput("not a JSON list", where=str(path),
                                           fix=REWRITE)
                        started, pos = True, pos + 1
                        continue
                    if pos < len(buf) and buf[pos] == "]":
                        return
                    try:
                        obj, end = decoder.raw_decode(buf, pos)
                    except RecursionError:
                        raise BadInput("a record is nested too deeply",
                                       where=str(path), fix=REWRITE) from None
                    except ValueError as e:
                        if not isinstance(e, json.JSONDecodeError):
                            raise BadInput(f"a record holds a number out of range: {e}",
                                           where=str(path), fix=REWRITE) from None
                        break  # need more text
                    yield obj
                    pos = end
                if not chunk:
                    raise BadInput("truncated accuracy log", where=str(path),
                                   fix=TRUNCATED_FIX)
    except UnicodeDecodeError as e:
        raise BadInput(f"the accuracy log is not ASCII JSON (byte 0x{e.object[e.start]:02x})",
                       where=str(path), fix=TRUNCATED_FIX) from None


def iter_log_samples(path: Path, image_shape: tuple[int, int, int],
                     keep_duplicates: bool = False) -> Iterator[tuple[int, np.ndarray]]:
    """(qsl_idx, uint8 HWC) per distinct qsl_idx, first record winning; with
    `keep_duplicates` every record, for a consumer that counts what it skips."""
    seen: set[int] = set()
    expected = int(np.prod(image_shape))
    for record in _records(path):
        qsl_idx = record.get("qsl_idx") if isinstance(record, dict) else None
        data_hex = record.get("data") if isinstance(record, dict) else None
        if not (isinstance(qsl_idx, int) and not isinstance(qsl_idx, bool) and qsl_idx >= 0
                and isinstance(data_hex, str)):
            raise BadInput(f"bad record (qsl_idx {str(qsl_idx)[:20]}): it needs an integer "
                           "qsl_idx and a hex `data` string", where=str(path),
                           fix=REWRITE)
        try:
            data = bytes.fromhex(data_hex)
        except ValueError as e:
            raise BadInput(f"bad record for sample {qsl_idx}: {e}", where=str(path),
                           fix=REWRITE) from e
        if qsl_idx in seen and not keep_duplicates:
            continue
        seen.add(qsl_idx)
        if len(data) != expected:
            raise BadInput(f"sample {qsl_idx} has {len(data)} bytes, expected {expected} "
                           f"for {image_shape} uint8 images", where=str(path),
                           fix="score it with the profile of the model that made it "
                           "(--profile)")
        yield qsl_idx, np.frombuffer(data, np.uint8).reshape(image_shape)

"""MLPerf's accuracy log, `mlperf_log_accuracy.json`: a JSON list of records
`{"seq_id", "qsl_idx", "data", "size"}`, `data` the hex of the raw uint8 HWC bytes.

Written streaming (5000 SDXL images are 15 GB raw, 30 GB hex) and read streaming, records
deduplicated by qsl_idx with the first one winning, as MLPerf's accuracy script does.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runner.errors import RunnerError

LOG_NAME = "mlperf_log_accuracy.json"
Buffer = bytes | np.ndarray


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


def write_log(path: Path, samples: Iterable[tuple[int, np.ndarray]]) -> LogStats:
    """Writes to a temp file and renames, so a reader never sees half a log."""
    return write_hex_log(path, ((qsl_idx, hex_upper(image), np.asarray(image).size)
                                for qsl_idx, image in samples))


def write_hex_log(path: Path, records: Iterable[tuple[int, Buffer, int]]) -> LogStats:
    """`write_log` for callers that hex-encode elsewhere (in parallel): records are
    (qsl_idx, upper-case hex as bytes or `hex_upper`'s buffer, raw size). Any failure, a
    full disk included, removes the temp file and leaves the previous log (or none) in place."""
    tmp = path.with_name(f".{path.name}.tmp")
    count = 0
    try:
        with open(tmp, "wb") as f:
            f.write(b"[\n")
            for qsl_idx, data, size in records:
                if count:
                    f.write(b",\n")
                f.write(b'{"seq_id": %d, "qsl_idx": %d, "data": "' % (count, int(qsl_idx)))
                f.write(data)  # type: ignore[arg-type]  # numpy types its buffer protocol for 3.12+ only
                f.write(b'", "size": %d}' % size)
                count += 1
            f.write(b"\n]\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return LogStats(str(path), count, path.stat().st_size)


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

"""MLPerf's accuracy log, `mlperf_log_accuracy.json`: a JSON list of records
`{"seq_id", "qsl_idx", "data", "size"}`, `data` the hex of the raw uint8 HWC bytes.

Written streaming (5000 SDXL images are 15 GB raw, 30 GB hex) and read streaming, records
deduplicated by qsl_idx with the first one winning, as MLPerf's accuracy script does.
"""

from __future__ import annotations

import json
import os
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


def write_log(path: Path, samples: Iterable[tuple[int, np.ndarray]]) -> LogStats:
    """Writes to a temp file and renames, so a reader never sees half a log."""
    tmp = path.with_name(f".{path.name}.tmp")
    count = 0
    with open(tmp, "w", encoding="ascii") as f:
        f.write("[\n")
        for qsl_idx, image in samples:
            raw = np.ascontiguousarray(image, dtype=np.uint8).tobytes()
            if count:
                f.write(",\n")
            f.write(f'{{"seq_id": {count}, "qsl_idx": {int(qsl_idx)}, "data": "')
            f.write(raw.hex().upper())
            f.write(f'", "size": {len(raw)}}}')
            count += 1
        f.write("\n]\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
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


def iter_log_samples(path: Path, image_shape: tuple[int, int, int]
                     ) -> Iterator[tuple[int, np.ndarray]]:
    """(qsl_idx, uint8 HWC) per distinct qsl_idx, first record winning."""
    seen: set[int] = set()
    expected = int(np.prod(image_shape))
    for record in _records(path):
        try:
            qsl_idx, data = int(record["qsl_idx"]), bytes.fromhex(record["data"])
        except (KeyError, TypeError, ValueError) as e:
            raise RunnerError(f"bad record {str(record)[:80]}: {e}", where=str(path)) from e
        if qsl_idx in seen:
            continue
        seen.add(qsl_idx)
        if len(data) != expected:
            raise RunnerError(f"sample {qsl_idx} has {len(data)} bytes, expected {expected} "
                              f"for {image_shape} uint8 images", where=str(path))
        yield qsl_idx, np.frombuffer(data, np.uint8).reshape(image_shape)

"""A safetensors file's header, checked against the format and against the file's size.

The format: 8 bytes of little-endian header length N, N bytes of JSON (an object mapping
tensor names to `{"dtype", "shape", "data_offsets": [begin, end]}`, plus an optional
`__metadata__` of strings), then the data. Every field is checked, and each tensor's byte
range must equal its shape times its element size (computed without overflow), so a header
that would make a loader allocate petabytes, or a file cut off mid-download, is refused by
name before anything is loaded.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.base.errors import BadInput
from runner.inputs.jsonfile import parse_json
from runner.inputs.limits import INT64_MAX, MiB, decode_utf8

MAX_HEADER_BYTES = 100 * MiB  # the format's own limit (safetensors refuses larger headers)
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
               "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8,
               "F64": 8}
CORRUPT_FIX = "the file is incomplete or corrupt: copy or download it again"


@dataclass(frozen=True)
class SafetensorsHeader:
    header_bytes: int
    tensors: dict[str, dict[str, Any]]
    data_bytes: int  # the end of the last tensor's range

    @property
    def file_bytes(self) -> int:
        return 8 + self.header_bytes + self.data_bytes


def read_header(path: Path) -> SafetensorsHeader:
    """The checked header; RunnerError naming the file (and the tensor) otherwise."""
    where = str(path)
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(0)
            head = f.read(8)
            if len(head) < 8:
                raise BadInput(f"truncated safetensors file ({size} bytes)", where=where,
                               fix=CORRUPT_FIX)
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER_BYTES:
                raise BadInput(f"not a safetensors file: its header length says {length} "
                               f"bytes (the format allows {MAX_HEADER_BYTES})",
                               where=where, fix=CORRUPT_FIX)
            if 8 + length > size:
                raise BadInput(f"truncated safetensors file: the header says {length} "
                               f"header bytes, the file has {size} in all", where=where,
                               fix=CORRUPT_FIX)
            raw = f.read(length)
    except OSError as e:
        raise BadInput(f"cannot read the safetensors file: {e.strerror or e}", where=where,
                       fix=CORRUPT_FIX) from e
    header = parse_json(decode_utf8(raw, where, "safetensors header"), where, max_depth=4,
                        what="safetensors header")
    if not isinstance(header, dict):
        raise BadInput("the safetensors header is not a JSON object", where=where, fix=CORRUPT_FIX)
    tensors, end = {}, 0
    for name, entry in header.items():
        at = f"{where}: {name[:80]}"
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str)
                                                      for v in entry.values()):
                raise BadInput("__metadata__ must map strings to strings", where=at,
                               fix=CORRUPT_FIX)
            continue
        tensors[name] = entry
        end = max(end, _tensor_end(entry, at))
    if 8 + length + end > size:
        raise BadInput(f"truncated safetensors file: {size} bytes, its header describes "
                       f"{8 + length + end}", where=where, fix=CORRUPT_FIX)
    return SafetensorsHeader(length, tensors, end)


def _tensor_end(entry: Any, at: str) -> int:
    if not isinstance(entry, dict):
        raise BadInput("a tensor entry must be an object", where=at, fix=CORRUPT_FIX)
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_BYTES:
        raise BadInput(f"unknown dtype {str(dtype)[:20]!r}", where=f"{at}.dtype", fix=CORRUPT_FIX)
    if not isinstance(shape, list) or not all(_count(d) for d in shape):
        raise BadInput("shape must list non-negative integers", where=f"{at}.shape",
                       fix=CORRUPT_FIX)
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_count, offsets))
            and offsets[0] <= offsets[1]):
        raise BadInput("data_offsets must be [begin, end] with 0 <= begin <= end",
                       where=f"{at}.data_offsets", fix=CORRUPT_FIX)
    nbytes = DTYPE_BYTES[dtype]
    for dim in shape:  # Python ints do not overflow; stop as soon as it leaves int64
        nbytes *= dim
        if nbytes > INT64_MAX:
            raise BadInput("its shape is larger than any file can hold", where=f"{at}.shape",
                           fix=CORRUPT_FIX)
    if offsets[1] - offsets[0] != nbytes:
        raise BadInput(f"data_offsets span {offsets[1] - offsets[0]} bytes, its shape and "
                       f"dtype make {nbytes}", where=f"{at}.data_offsets", fix=CORRUPT_FIX)
    return int(offsets[1])


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0

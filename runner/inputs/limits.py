"""Bounded reads and checks the readers share: how big a file may be, how deep a structure,
how large a number, and the one way an unreadable or undecodable file is reported."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from runner.base.errors import RunnerError

MiB = 1 << 20
MAX_CONFIG_BYTES = 16 * MiB  # profiles, model configs, test-suite JSON, run records
MAX_DEPTH = 64  # nesting of any structure read from a file (real configs stay under 10)
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)


def read_bytes(path: Path, where: str | None = None, max_bytes: int = MAX_CONFIG_BYTES,
               what: str = "file") -> bytes:
    """A file's bytes, refused (not read) past `max_bytes`; a missing, unreadable or looping
    path is a RunnerError naming it."""
    where = where or str(path)
    try:
        with open(path, "rb") as f:
            # In chunks: read(max_bytes + 1) would allocate the whole bound for any file.
            chunks, size = [], 0
            while size <= max_bytes and (chunk := f.read(min(MiB, max_bytes + 1 - size))):
                chunks.append(chunk)
                size += len(chunk)
            data = b"".join(chunks)
    except IsADirectoryError as e:
        raise RunnerError(f"cannot read the {what}: it is a directory", where=where,
                          fix=f"pass the {what} itself") from e
    except OSError as e:  # missing, permissions, a symlink loop (ELOOP), an I/O error
        raise RunnerError(f"cannot read the {what}: {e.strerror or e}", where=where,
                          fix="check the path and its permissions") from e
    if len(data) > max_bytes:
        raise RunnerError(f"the {what} is larger than {max_bytes // MiB or max_bytes} "
                          f"{'MiB' if max_bytes >= MiB else 'bytes'}", where=where,
                          fix=f"check that this is the {what} meant; a real one is far smaller")
    return data


def decode_utf8(data: bytes, where: str, what: str = "file") -> str:
    """UTF-8 text, or an error naming the line and column of the first bad byte (the bytes
    themselves are not echoed: they may not be text at all)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise RunnerError(f"the {what} is not UTF-8 text (byte 0x{data[e.start]:02x} at line "
                          f"{line}, column {column})", where=where,
                          fix="save it as UTF-8") from e


def read_text(path: Path, where: str | None = None, max_bytes: int = MAX_CONFIG_BYTES,
              what: str = "file") -> str:
    where = where or str(path)
    text = decode_utf8(read_bytes(path, where, max_bytes, what), where, what)
    if "\x00" in text:
        raise RunnerError(f"the {what} holds a NUL character: not a text file", where=where,
                          fix=f"pass the {what} itself")
    return text


def check_depth(obj: Any, where: str, limit: int = MAX_DEPTH) -> None:
    """Refuses a structure nested deeper than `limit`, or holding a string that is not
    text (a lone UTF-16 surrogate, which JSON's `\\ud800` spells and no file or terminal
    can take). Walked without recursion, so the check itself cannot overflow the stack."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            _check_text(node, where)
            continue
        if isinstance(node, dict):
            children: Any = [*node.keys(), *node.values()]
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth > limit:
            raise RunnerError(f"nested more than {limit} levels deep", where=where,
                              fix="a real file is nested a few levels; check its contents")
        stack.extend((child, depth + 1) for child in children)


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise RunnerError(f"a string holds an unpaired surrogate (U+{ord(text[e.start]):04X})",
                          where=where, fix="write text as UTF-8") from None


def finite(value: float, where: str) -> float:
    if not math.isfinite(value):
        raise RunnerError(f"{value} is not a finite number", where=where,
                          fix="write a plain number (no NaN or Infinity)")
    return value


def int64(value: int, where: str) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise RunnerError(f"an integer of {value.bit_length()} bits is out of range",
                          where=where, fix="integers must fit in 64 bits (signed)")
    return value

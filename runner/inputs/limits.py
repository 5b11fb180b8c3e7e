"""Bounded reads and checks the readers share: how big a file may be, how deep a structure,
how large a number, and the one way an unreadable or undecodable file is reported."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any

from runner.base.errors import BadInput

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
        raise BadInput(f"cannot read the {what}: it is a directory", where=where,
                       fix=f"pass the {what} itself") from e
    except OSError as e:  # missing, permissions, a symlink loop (ELOOP), an I/O error
        raise BadInput(f"cannot read the {what}: {e.strerror or e}", where=where,
                       fix="check the path and its permissions") from e
    if len(data) > max_bytes:
        raise BadInput(f"the {what} is larger than {max_bytes // MiB or max_bytes} "
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
        raise BadInput(f"the {what} is not UTF-8 text (byte 0x{data[e.start]:02x} at line "
                       f"{line}, column {column})", where=where,
                       fix="save it as UTF-8") from e


def read_text(path: Path, where: str | None = None, max_bytes: int = MAX_CONFIG_BYTES,
              what: str = "file") -> str:
    where = where or str(path)
    text = decode_utf8(read_bytes(path, where, max_bytes, what), where, what)
    if "\x00" in text:
        raise BadInput(f"the {what} holds a NUL character: not a text file", where=where,
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
            raise BadInput(f"nested more than {limit} levels deep", where=where,
                           fix="a real file is nested a few levels; check its contents")
        stack.extend((child, depth + 1) for child in children)


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise BadInput(f"a string holds an unpaired surrogate (U+{ord(text[e.start]):04X})",
                       where=where, fix="write text as UTF-8") from None


def finite(value: float, where: str) -> float:
    if not math.isfinite(value):
        raise BadInput(f"{value} is not a finite number", where=where,
                       fix="write a plain number (no NaN or Infinity)")
    return value


def int64(value: int, where: str) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise BadInput(f"an integer of {value.bit_length()} bits is out of range",
                       where=where, fix="integers must fit in 64 bits (signed)")
    return value


FLOAT_RANGE = f"a finite number, from {-sys.float_info.max:.1e} to {sys.float_info.max:.1e}"
INT_RANGE = f"an integer from {INT64_MIN} to {INT64_MAX} (64 bits)"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


class BadNumber:
    """A number a file holds that nothing behind the boundary may see (NaN, an infinity, an
    integer beyond 64 bits). A reader leaves it in place while parsing, then
    `refuse_bad_numbers` finds it and names its field: a message without the field would
    leave the user searching the file."""

    __slots__ = ("integer", "position", "text")

    def __init__(self, text: str, integer: bool, position: str = ""):
        self.text, self.integer, self.position = text, integer, position

    def problem(self) -> str:
        if self.integer:
            return f"an integer of {len(self.text.lstrip('+-'))} digits"
        return f"{self.text[:40]}, which is not a finite number"


def field_path(parts: list[str | int]) -> str:
    """`outputs[0].atol`, `steps["a b"]`: a field as a user finds it in the file."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENTIFIER.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json_quote(part)}]"
    return out or "(the top level)"


def json_quote(text: str) -> str:
    import json

    return json.dumps(text[:80])


def refuse_bad_numbers(data: Any, where: str, what: str = "file") -> None:
    """Raises a RunnerError naming the file, the field and the allowed range of the first
    `BadNumber` in `data` (walked without recursion); does nothing when there is none."""
    stack: list[tuple[Any, list[str | int]]] = [(data, [])]
    while stack:
        node, path = stack.pop()
        if isinstance(node, BadNumber):
            at = f" ({node.position})" if node.position else ""
            allowed = INT_RANGE if node.integer else FLOAT_RANGE
            field = field_path(path) if path else ""
            raise BadInput(f"the {what} holds a number out of range{at}: {node.problem()}; "
                           f"allowed: {allowed}", where=f"{where}: {field}" if field else where,
                           fix="write a plain number in that range (no NaN or Infinity)")
        if isinstance(node, dict):
            stack.extend((v, [*path, str(k)]) for k, v in reversed(node.items()))
        elif isinstance(node, list | tuple):
            stack.extend((v, [*path, i]) for i, v in reversed(list(enumerate(node))))

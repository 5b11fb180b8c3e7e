"""JSON, bounded: size, nesting depth, numbers (finite floats, integers within 64 bits).

Python's json module reads `NaN`, `Infinity` and `1e400` (as inf) without complaint and
overflows its stack on deep nesting; a file with any of them is refused here, naming it
(and for a number, its field and the allowed range).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from runner.base.errors import BadInput, RunnerError
from runner.inputs.limits import (
    INT64_MAX,
    INT64_MIN,
    MAX_CONFIG_BYTES,
    MAX_DEPTH,
    BadNumber,
    check_depth,
    decode_utf8,
    finite,
    int64,
    read_bytes,
    refuse_bad_numbers,
)


class _Refused(ValueError):
    """A number the streaming decoder's hooks refuse (`decoder()`: a log read record by
    record); turned into a RunnerError with the file's name."""


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not a finite number")


def _float(text: str) -> float:
    value = float(text)
    try:
        return finite(value, "")
    except RunnerError as e:
        raise _Refused(f"{text[:40]} is not a finite number") from e


def _int(text: str) -> int:
    try:
        return int64(int(text), "")
    except (RunnerError, ValueError) as e:
        raise _Refused(f"an integer of {len(text)} digits is out of range") from e


def decoder() -> json.JSONDecoder:
    """A decoder with the number hooks (for streaming readers that call raw_decode)."""
    return json.JSONDecoder(parse_constant=_constant, parse_float=_float, parse_int=_int)


class _Marker:
    """Parse hooks that leave a `BadNumber` where a refused number stands, so the error
    names its field (`refuse_bad_numbers`), and note that they did."""

    def __init__(self) -> None:
        self.found = False

    def _bad(self, text: str, integer: bool) -> BadNumber:
        self.found = True
        return BadNumber(text, integer)

    def constant(self, name: str) -> Any:
        return self._bad(name, False)

    def float(self, text: str) -> Any:
        value = float(text)
        return value if math.isfinite(value) else self._bad(text, False)

    def int(self, text: str) -> Any:
        try:
            value = int(text)
        except ValueError:  # more digits than Python converts (4300)
            return self._bad(text, True)
        return value if INT64_MIN <= value <= INT64_MAX else self._bad(text, True)


def parse_json(text: str, where: str, max_depth: int = MAX_DEPTH, what: str = "file") -> Any:
    """JSON text -> JSON-shaped data, or RunnerError naming `where` (and for a number out
    of range, its field and the allowed range)."""
    marker = _Marker()
    try:
        data = json.loads(text, parse_constant=marker.constant, parse_float=marker.float,
                          parse_int=marker.int)
    except RecursionError:
        raise BadInput(f"the {what} is nested too deeply", where=where,
                       fix="a real file is nested a few levels; check its contents"
                       ) from None
    except ValueError as e:  # JSONDecodeError: says line and column, quotes no content
        raise BadInput(f"the {what} is not valid JSON: {e}", where=where,
                       fix=f"check the {what}'s syntax") from None
    check_depth(data, where, max_depth)
    if marker.found:
        refuse_bad_numbers(data, where, what)
    return data


def read_json(path: Path, where: str | None = None, *, kind: type | None = dict,
              max_bytes: int = MAX_CONFIG_BYTES, max_depth: int = MAX_DEPTH,
              what: str = "file") -> Any:
    """A JSON file (UTF-8), checked to hold a `kind` at the top (dict by default)."""
    where = where or str(path)
    data = parse_json(decode_utf8(read_bytes(path, where, max_bytes, what), where, what),
                      where, max_depth, what)
    if kind is not None and not isinstance(data, kind):
        want = "a JSON object" if kind is dict else "a JSON list" if kind is list \
            else kind.__name__
        raise BadInput(f"the {what} must hold {want}, not {_json_type(data)}", where=where,
                       fix=f"check that this is the {what} meant")
    return data


def _json_type(data: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false",
            int: "a number", float: "a number", type(None): "null"}.get(type(data), "a value")

"""An IREE HAL profile decoded into timed spans: `iree-profile export --format=ireeperf-jsonl`.

IREE calls this export (schema version 15 in releases 3.12 and 3.13) the stable boundary for
downstream tools; its rows are keyed by `record_type`. Two producers time dispatches:

- the CPU's local HAL (`--device_profiling_mode=host-execution`): `host_execution_event`
  rows with `op` dispatch (one per dispatch, `key` its function name), execute (a command
  buffer's whole execution), alloca, dealloca, ...; `start_host_time_ns`/`end_host_time_ns`
  on IREE's monotonic host clock;
- GPU drivers (`dispatch-events`): `dispatch_event` rows stamped in raw device ticks
  (`start_tick`/`end_tick`), placed on the host clock by a straight line through the
  `clock_correlation` rows' first and last (device tick, host time) pairs, or by the
  driver's own host timestamps where the row says `derived_time_available`;
  `queue_device_event` rows (alloca/execute/dealloca on the device) the same way.

The export is streamed from the tool's stdout: an SDXL profile holds ~10^5 rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.base.errors import ToolFailed
from runner.base.iree_tools import json_lines

PROFILE_TOOL = "iree-profile"
HOST_EVENT, DEVICE_EVENT = "host_execution_event", "dispatch_event"
DISPATCH = "dispatch"
_ARGS = ("event_id", "submission_id", "command_buffer_id", "command_index",
         "workgroup_count", "workgroup_size", "tile_count", "payload_length")


@dataclass(frozen=True)
class Span:
    """One timed operation on one queue, in IREE host-clock nanoseconds."""

    start_ns: int
    end_ns: int
    op: str  # dispatch | execute | alloca | dealloca | ...
    name: str  # the dispatch function's name; the op for queue operations
    device: int
    queue: int
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class Capture:
    spans: list[Span]
    timing_source: str  # host_execution_event | dispatch_event | "" (no timed dispatch)
    schema_version: int
    unplaced: int = 0  # device events no clock could place: counted, not timed

    def dispatches(self) -> list[Span]:
        return [s for s in self.spans if s.op == DISPATCH]


def export_argv(profile: Path | str) -> list[str]:
    """The decode command, with the bare tool name (as printed; `read` runs the found one)."""
    return [PROFILE_TOOL, "export", "--format=ireeperf-jsonl", "--output=-", str(profile)]


def read_capture(profile: Path) -> Capture:
    """Runs the export of `profile` and decodes its stream."""
    return decode(json_lines(export_argv(profile), str(profile)))


def _host_time(row: dict[str, Any]) -> int | None:
    """A clock-correlation sample's host time: the middle of its bracket, or its stamp."""
    begin, end = row.get("host_time_begin_ns"), row.get("host_time_end_ns")
    if begin is not None and end is not None:
        return (int(begin) + int(end)) // 2
    stamp = row.get("host_time_ns")
    return None if stamp is None else int(stamp)


def _clock_lines(rows: list[dict[str, Any]]) -> dict[int, tuple[int, int, int, int]]:
    """Device -> (first tick, its host ns, last tick, its host ns)."""
    samples: dict[int, list[tuple[int, int]]] = {}
    for row in rows:
        host = _host_time(row)
        if host is not None and row.get("device_tick") is not None:
            samples.setdefault(int(row.get("physical_device_ordinal", 0)), []).append(
                (int(row["device_tick"]), host))
    out = {}
    for device, points in samples.items():
        points.sort()
        (t0, h0), (t1, h1) = points[0], points[-1]
        out[device] = (t0, h0, t1, h1)
    return out


def _on_host(line: tuple[int, int, int, int], tick: int) -> int:
    t0, h0, t1, h1 = line
    if t1 == t0:
        return h0 + (tick - t0)
    span = t1 - t0  # rounded to the nearest nanosecond in integers: ticks are 64-bit
    return h0 + (2 * (tick - t0) * (h1 - h0) + span) // (2 * span)


def _device_range(row: dict[str, Any], lines: dict[int, tuple[int, int, int, int]]
                  ) -> tuple[int, int] | None:
    line = lines.get(int(row.get("physical_device_ordinal", 0)))
    if line is not None and row.get("start_tick") is not None \
            and row.get("end_tick") is not None:
        return _on_host(line, int(row["start_tick"])), _on_host(line, int(row["end_tick"]))
    if row.get("derived_time_available") and row.get("start_driver_host_cpu_time_ns") \
            is not None:
        return (int(row["start_driver_host_cpu_time_ns"]),
                int(row["end_driver_host_cpu_time_ns"]))
    return None


def _span(row: dict[str, Any], start: int, end: int, op: str) -> Span:
    name = str(row.get("key") or op) if op == DISPATCH else op
    return Span(start, max(end, start), op, name, int(row.get("physical_device_ordinal", 0)),
                int(row.get("queue_ordinal", 0)),
                {k: row[k] for k in _ARGS if row.get(k) is not None})


def decode(rows: Iterable[dict[str, Any]]) -> Capture:
    """The spans of an export stream (its rows in any order)."""
    spans: list[Span] = []
    device_rows: list[tuple[dict[str, Any], str]] = []
    clocks: list[dict[str, Any]] = []
    schema = 0
    for row in rows:
        kind = row.get("record_type")
        if kind == "schema":
            if row.get("format") != "ireeperf-jsonl":
                raise ToolFailed(f"not an ireeperf-jsonl export: {row.get('format')!r}",
                                 where=f"{PROFILE_TOOL} export",
                                 fix="use the iree-profile of the IREE build that captured "
                                 "the profile (3.12 or newer)")
            schema = int(row.get("schema_version", 0))
        elif kind == HOST_EVENT and row.get("valid", True):
            spans.append(_span(row, int(row["start_host_time_ns"]),
                               int(row["end_host_time_ns"]), str(row.get("op", "?"))))
        elif kind == DEVICE_EVENT and row.get("valid", True):
            device_rows.append((row, DISPATCH))
        elif kind == "queue_device_event" and row.get("valid", True):
            device_rows.append((row, str(row.get("op", "?"))))
        elif kind == "clock_correlation":
            clocks.append(row)
    lines = _clock_lines(clocks)
    unplaced = 0
    device: list[Span] = []
    for row, op in device_rows:
        placed = _device_range(row, lines)
        if placed is None:
            unplaced += op == DISPATCH
            continue
        device.append(_span(row, placed[0], placed[1], op))
    if any(op == DISPATCH for _, op in device_rows):  # device stamps win over host spans
        source = DEVICE_EVENT
        spans = [s for s in spans if s.op != DISPATCH]
    else:
        source = HOST_EVENT if any(s.op == DISPATCH for s in spans) else ""
    spans = sorted(spans + device, key=lambda s: (s.start_ns, s.end_ns))
    return Capture(spans, source, schema, unplaced)

"""A stage's profiled calls as a trace for ui.perfetto.dev (or chrome://tracing).

The file is the Trace Event Format's JSON object form (`{"traceEvents": [...]}`), which
Perfetto's UI opens as it is: no `perfetto`/`protobuf` packages, no IREE renderer, the same
file from every IREE release the profiler exists in. One process per physical device, and
per queue one track each for command-buffer executions, dispatches and the other queue
operations (alloca, dealloca, ...). Every span is a complete event (`"ph": "X"`, `ts` and
`dur` in microseconds from the first span, to the nanosecond); a track's events must nest
or stand apart, so spans that overlap (dispatches the local-task executor runs at once)
go to numbered lanes of their track, each lane a thread of its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.base.fileio import atomic_write_text
from runner.bench import dispatch_names
from runner.bench.ireeperf import DISPATCH, Span

EXECUTE = "execute"
TRACKS = {EXECUTE: "command buffers", DISPATCH: "dispatches"}
OTHER_TRACK = "queue operations"
ORDER = (*TRACKS.values(), OTHER_TRACK)  # top to bottom under each device


def _track(span: Span) -> str:
    return TRACKS.get(span.op, OTHER_TRACK)


def trace_events(spans: list[Span], title: str) -> list[dict[str, Any]]:
    """Metadata events naming every process and thread, then one "X" event per span."""
    if not spans:
        return []
    origin = min(s.start_ns for s in spans)
    lanes: dict[tuple[int, int, str], list[int]] = {}  # track -> each lane's last end
    tids: dict[tuple[int, int, str, int], int] = {}
    events: list[dict[str, Any]] = []
    for s in sorted(spans, key=lambda s: (s.start_ns, -s.end_ns)):
        track = (s.device, s.queue, _track(s))
        ends = lanes.setdefault(track, [])
        lane = next((i for i, end in enumerate(ends) if end <= s.start_ns), len(ends))
        if lane == len(ends):
            ends.append(s.end_ns)
        ends[lane] = s.end_ns
        tid = tids.setdefault((*track, lane), len(tids) + 1)
        args: dict[str, Any] = dict(s.args)
        if s.op == DISPATCH:
            args.update(kind=dispatch_names.kind(s.name), key=dispatch_names.key(s.name))
        events.append({"name": s.name, "cat": s.op, "ph": "X", "pid": s.device + 1,
                       "tid": tid, "ts": (s.start_ns - origin) / 1000,
                       "dur": s.duration_ns / 1000, "args": args})
    meta: list[dict[str, Any]] = []
    for device in sorted({s.device for s in spans}):
        meta.append({"name": "process_name", "ph": "M", "pid": device + 1, "tid": 0,
                     "args": {"name": f"{title}: IREE device {device}"}})
    ranked = sorted(tids, key=lambda t: (t[0], t[1], ORDER.index(t[2]), t[3]))
    for rank, (device, queue, name, lane) in enumerate(ranked):
        tid = tids[(device, queue, name, lane)]
        label = f"queue {queue}: {name}" + (f" (lane {lane + 1})" if lane else "")
        meta.append({"name": "thread_name", "ph": "M", "pid": device + 1, "tid": tid,
                     "args": {"name": label}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": device + 1, "tid": tid,
                     "args": {"sort_index": rank}})
    return meta + events


def write_trace(path: Path, spans: list[Span], title: str) -> Path:
    trace = {"traceEvents": trace_events(spans, title), "displayTimeUnit": "ns",
             "otherData": {"producer": "iree-sdxl-runner (runner bench --dispatches)",
                           "title": title}}
    atomic_write_text(path, json.dumps(trace, separators=(",", ":")))
    return path

"""Inline SVG charts for report.html: no JavaScript, no library, nothing fetched.

The markup is also well-formed XML (every element closed, text escaped), so the page as a
whole parses with a strict XML parser, which is how the tests check nothing is broken.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

from runner.accuracy.verdict import RangeCheck
from runner.report.collect import WorkerReport, score_text

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
PASS_COLOR, FAIL_COLOR = "#1a7f37", "#cf222e"
CHAR_W = 6.6  # average advance of an 11px sans-serif character, for label placement
FONT = "font-family=\"system-ui, -apple-system, 'Segoe UI', 'DejaVu Sans', sans-serif\""


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _text(x: float, y: float, s: str, anchor: str = "start", size: int = 11,
          fill: str = "#24292f", weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" '
            f'font-weight="{weight}" fill="{fill}">{escape(s)}</text>')


def _placed(x: float, label: str, left: float, right: float, prefer: str, size: int = 11
            ) -> tuple[str, float, float]:
    """(anchor, x0, x1) for a label at x, flipped or clamped so it stays inside the chart."""
    w = len(label) * CHAR_W * size / 11
    anchor = prefer
    if prefer == "end" and x - w < left:
        anchor = "start"
    if prefer == "start" and x + w > right:
        anchor = "end"
    if prefer == "middle":
        if x - w / 2 < left:
            anchor = "start"
        elif x + w / 2 > right:
            anchor = "end"
    if anchor == "start":
        x0 = max(x, left)
        return anchor, x0, x0 + w
    if anchor == "end":
        x1 = min(x, right)
        return anchor, x1 - w, x1
    return anchor, x - w / 2, x + w / 2


def _label_at(anchor: str, x0: float, x1: float) -> float:
    return {"start": x0, "end": x1, "middle": (x0 + x1) / 2}[anchor]


def _bound_labels(check: RangeCheck, low_x: float, high_x: float, left: float, right: float
                  ) -> list[str]:
    """The range's bounds labelled below the track; the upper one drops a row if the two
    would overlap (a narrow range)."""
    low_label, high_label = f"low {score_text(check.low)}", f"high {score_text(check.high)}"
    la, l0, l1 = _placed(low_x, low_label, left, right, "end")
    ha, h0, h1 = _placed(high_x, high_label, left, right, "start")
    high_row = 92 if (h0 < l1 + 6 and l0 < h1 + 6) else 78
    return [_text(_label_at(la, l0, l1), 78, low_label, la, fill="#1a7f37"),
            _text(_label_at(ha, h0, h1), high_row, high_label, ha, fill="#1a7f37")]


def range_bar(check: RangeCheck, width: int = 520) -> str:
    """The score against its range: the band between the bounds, each bound labelled, the
    measured point (green inside, red outside) and a bracket from it to the nearest bound."""
    height, pad = 104, 14
    left, right = pad, width - pad
    lo, hi = min(check.low, check.value), max(check.high, check.value)
    span = hi - lo or abs(hi) or 1.0
    lo, hi = lo - 0.12 * span, hi + 0.12 * span

    def x(v: float) -> float:
        return left + (v - lo) / (hi - lo) * (right - left)

    ok = check.passed
    dot = PASS_COLOR if ok else FAIL_COLOR
    track_y, track_h = 44, 14
    bx0, bx1 = x(check.low), x(check.high)
    if bx1 - bx0 < 6:  # a range far narrower than the miss still shows as a band
        mid = (bx0 + bx1) / 2
        bx0, bx1 = mid - 3, mid + 3
    parts = [
        f'<svg class="range" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" {FONT}>',
        f"<title>{escape(check.metric)} {score_text(check.value)}; "
        f"range [{score_text(check.low)}, {score_text(check.high)}]</title>",
        f'<rect x="{left}" y="{track_y}" width="{right - left}" height="{track_h}" rx="7" '
        'fill="#eaeef2"/>',
        f'<rect x="{bx0:.1f}" y="{track_y}" width="{bx1 - bx0:.1f}" height="{track_h}" '
        'fill="#aceebb" stroke="#1a7f37" stroke-width="1"/>',
    ]
    for v in (check.low, check.high):
        parts.append(f'<line x1="{x(v):.1f}" y1="{track_y - 5}" x2="{x(v):.1f}" '
                     f'y2="{track_y + track_h + 5}" stroke="#1a7f37" stroke-width="2"/>')
    parts += _bound_labels(check, x(check.low), x(check.high), left, right)
    # bracket from the point to the nearest bound: the margin (or the miss)
    near = check.low if abs(check.value - check.low) <= abs(check.value - check.high) \
        else check.high
    px, nx = x(check.value), x(near)
    if abs(px - nx) > 3:
        y = track_y - 10
        parts.append(f'<path d="M{px:.1f} {y - 4} V{y} H{nx:.1f} V{y - 4}" fill="none" '
                     f'stroke="{dot}" stroke-width="1.5"/>')
    value_label = f"{check.metric} {score_text(check.value)}"
    va, v0, v1 = _placed(px, value_label, left, right, "middle", size=13)
    parts.append(_text(_label_at(va, v0, v1), 22, value_label, va, size=13, fill=dot,
                       weight="bold"))
    parts.append(f'<circle cx="{px:.1f}" cy="{track_y + track_h / 2}" r="8" fill="{dot}" '
                 'stroke="#ffffff" stroke-width="2.5"/>')
    parts.append("</svg>")
    return "".join(parts)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if (hi - lo) / (m * mag) <= n)
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def _frame(width: int, height: int, margin: tuple[int, int, int, int], x_max: float,
           y_max: float, x_title: str, y_title: str, title: str):
    """Axes, grid and ticks; returns (parts, x, y) with x/y mapping data to pixels."""
    top, right_m, bottom, left_m = margin
    x0, x1, y0, y1 = left_m, width - right_m, height - bottom, top

    def x(v: float) -> float:
        return x0 + v / x_max * (x1 - x0)

    def y(v: float) -> float:
        return y0 - v / y_max * (y0 - y1)

    parts = [f'<svg class="chart" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" {FONT}>',
             f"<title>{escape(title)}</title>",
             f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="#ffffff" '
             'stroke="#d0d7de"/>']
    for t in nice_ticks(0.0, y_max):
        parts.append(f'<line x1="{x0}" y1="{y(t):.1f}" x2="{x1}" y2="{y(t):.1f}" '
                     'stroke="#eaeef2"/>')
        parts.append(_text(x0 - 6, y(t) + 4, f"{t:g}", "end", fill="#57606a"))
    for t in nice_ticks(0.0, x_max, 8):
        parts.append(f'<line x1="{x(t):.1f}" y1="{y0}" x2="{x(t):.1f}" y2="{y0 + 5}" '
                     'stroke="#57606a"/>')
        parts.append(_text(x(t), y0 + 18, f"{t:g}", "middle", fill="#57606a"))
    parts.append(_text((x0 + x1) / 2, height - 6, x_title, "middle", fill="#57606a"))
    parts.append(f'<text x="14" y="{(y0 + y1) / 2:.1f}" font-size="11" fill="#57606a" '
                 f'text-anchor="middle" transform="rotate(-90 14 {(y0 + y1) / 2:.1f})">'
                 f"{escape(y_title)}</text>")
    return parts, x, y


def _t0_t1(workers: Sequence[WorkerReport]) -> tuple[float, float] | None:
    batches = [b for w in workers for b in w.batches]
    if not batches:
        return None
    return min(b.start for b in batches), max(b.end for b in batches)


def throughput_chart(workers: Sequence[WorkerReport], width: int = 880, height: int = 260
                     ) -> str:
    """Each worker's samples/s, batch by batch, as a step line over the run's time."""
    span = _t0_t1(workers)
    if span is None:
        return ""
    t0, t1 = span
    rates = [b.rate for w in workers for b in w.batches]
    y_max = max(max(rates) * 1.15, 1e-9)
    parts, x, y = _frame(width, height, (12, 16, 40, 56), max(t1 - t0, 1e-9), y_max,
                         "seconds since the first batch started", "samples/s (per batch)",
                         "per-worker throughput over time")
    for i, w in enumerate(workers):
        if not w.batches:
            continue
        d = []
        for k, b in enumerate(sorted(w.batches, key=lambda b: b.start)):
            d.append(f"{'M' if k == 0 else 'L'}{x(b.start - t0):.1f} {y(b.rate):.1f}"
                     f" H{x(b.end - t0):.1f}")
        parts.append(f'<path d="{" ".join(d)}" fill="none" stroke="{color(i)}" '
                     'stroke-width="2" stroke-linejoin="round"/>')
    parts.append("</svg>")
    return "".join(parts)


def progress_chart(workers: Sequence[WorkerReport], width: int = 880, height: int = 220
                   ) -> str:
    """Samples finished over time, all workers together, against the straight line of the
    mean rate: a slow start (module load) or a long tail shows as distance from it."""
    span = _t0_t1(workers)
    if span is None:
        return ""
    t0, t1 = span
    events = sorted((b.end - t0, b.samples) for w in workers for b in w.batches)
    total = sum(s for _, s in events)
    x_max = max(t1 - t0, 1e-9)
    parts, x, y = _frame(width, height, (12, 16, 40, 56), x_max, max(total * 1.08, 1),
                         "seconds since the first batch started", "samples done",
                         "samples finished over time")
    parts.append(f'<line x1="{x(0):.1f}" y1="{y(0):.1f}" x2="{x(x_max):.1f}" '
                 f'y2="{y(total):.1f}" stroke="#8c959f" stroke-dasharray="5 4"/>')
    d, count = [f"M{x(0):.1f} {y(0):.1f}"], 0
    for t, s in events:
        count += s
        d.append(f"H{x(t):.1f} V{y(count):.1f}")
    parts.append(f'<path d="{" ".join(d)}" fill="none" stroke="#0969da" stroke-width="2"/>')
    parts.append("</svg>")
    return "".join(parts)


def _series_line(labels: Sequence[str], values: Sequence[float | None],
                 x: Callable[[float], float], y: Callable[[float], float]) -> list[str]:
    """The values as one line, broken where a value is missing (a build that could not be
    measured, which no line may bridge), and a point with its label at each value."""
    d, pen = [], "M"
    for i, v in enumerate(values):
        if v is None or not math.isfinite(v):
            pen = "M"
            continue
        d.append(f"{pen}{x(i):.1f} {y(v):.1f}")
        pen = "L"
    parts = [f'<path d="{" ".join(d)}" fill="none" stroke="{color(0)}" stroke-width="2"/>']
    for i, v in enumerate(values):
        if v is not None and math.isfinite(v):
            parts.append(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="4" fill="{color(0)}">'
                         f"<title>{escape(labels[i])}: {v:.6g}</title></circle>")
    return parts


def series_chart(labels: Sequence[str], values: Sequence[float | None], title: str,
                 y_title: str, marks: Sequence[int] = (), width: int = 880,
                 height: int = 240) -> str:
    """One number per build, as a line over the builds in order; a missing value (a build
    that could not be measured) breaks the line, and `marks` (e.g. where the image bytes
    changed) are dashed vertical lines. The y axis spans the data, not zero: the changes
    between builds are what the chart is for."""
    known = [v for v in values if v is not None and math.isfinite(v)]
    if not labels or not known:
        return ""
    lo, hi = min(known), max(known)
    pad = (hi - lo) * 0.12 or abs(hi) * 0.05 or 1.0
    lo, hi = lo - pad, hi + pad
    top, right_m, bottom, left_m = 24, 16, 56, 72
    x0, x1, y0, y1 = left_m, width - right_m, height - bottom, top
    step = (x1 - x0) / len(labels)

    def x(i: float) -> float:  # each build at the middle of its own slot
        return x0 + (i + 0.5) * step

    def y(v: float) -> float:
        return y0 - (v - lo) / (hi - lo) * (y0 - y1)

    parts = [f'<svg class="chart" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" {FONT}>',
             f"<title>{escape(title)}</title>",
             f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="#ffffff" '
             'stroke="#d0d7de"/>',
             _text(x0, 16, title, weight="bold")]
    for t in nice_ticks(lo, hi):
        parts.append(f'<line x1="{x0}" y1="{y(t):.1f}" x2="{x1}" y2="{y(t):.1f}" '
                     'stroke="#eaeef2"/>')
        parts.append(_text(x0 - 6, y(t) + 4, f"{t:.6g}", "end", fill="#57606a"))
    for i in marks:
        parts.append(f'<line x1="{x(i):.1f}" y1="{y1}" x2="{x(i):.1f}" y2="{y0}" '
                     f'stroke="{FAIL_COLOR}" stroke-dasharray="4 3"/>')
    for i, label in enumerate(labels):
        parts.append(_text(x(i), y0 + 16, label, "middle", size=10, fill="#57606a"))
    parts.append(f'<text x="14" y="{(y0 + y1) / 2:.1f}" font-size="11" fill="#57606a" '
                 f'text-anchor="middle" transform="rotate(-90 14 {(y0 + y1) / 2:.1f})">'
                 f"{escape(y_title)}</text>")
    parts += _series_line(labels, values, x, y)
    if marks:
        parts.append(_text(x1, height - 8, "dashed: the image bytes changed at this build",
                           "end", size=10, fill=FAIL_COLOR))
    parts.append("</svg>")
    return "".join(parts)

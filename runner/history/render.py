"""A history for machines and people: history.json, history.md and history.html.

The HTML is one self-contained page (the run report's stylesheet, inline SVG charts, no
script, nothing fetched: lab machines are offline): each series over builds and dates, the
band its verdict was judged against (MLPerf's range, a golden x its tolerance) shaded, each
change point marked with its size, each change of the environment (driver, firmware, kernel,
runner, compiled modules) dotted and named, then the changes with their `runner bisect` commands,
then the results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import pairwise
from typing import Any

import numpy as np

from runner.base.conditions import gpu_line
from runner.base.mdtable import md_table
from runner.base.outcome import Outcome
from runner.history.changes import Change
from runner.history.machine import conditions_of, environment_changes
from runner.history.model import Result
from runner.history.series import Point, Series
from runner.report.html import CSS, _table, e
from runner.report.markdown import esc

HISTORY_SCHEMA = "iree-sdxl-runner/history/1"
HEADLINE = ("fid", "clip", "samples_per_s")  # shown per result when no metric is asked for
MAX_CHARTS = 60
CHART_POINTS = 250  # the newest results a chart draws (all of them are in history.json)
TICK_GAP = 260  # px between two labelled results on a chart's axis
W, H, LEFT, RIGHT, TOP, BOTTOM = 760, 230, 64, 16, 24, 46
LINE, BAND, STEP, POINT_FAIL = "#4e79a7", "#1a7f3722", "#cf222e", "#cf222e"
BUSY = "#bf8700"  # the ring of a point timed beside foreign load
ENV_MARK = "#8250df"  # where the environment (driver, firmware, kernel, ...) changed
HISTORY_CSS = """
figure.series { margin: 18px 0; } figure.series figcaption { font-weight: 600; }
.change.regression { color: var(--fail); } .change.improvement { color: var(--pass); }
.change.unconfirmed { color: var(--warn); } .change.machine { color: var(--muted); }
header.unconfirmed { background: var(--warn); }
pre.cmd { background: var(--soft); padding: 6px 10px; overflow-x: auto; }
"""


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.5g}"


def _headline(r: Result, names: tuple[str, ...]) -> str:
    shown = [m for m in r.metrics if m.name in names] if names else [
        m for m in r.metrics if m.name in HEADLINE or (m.name == "time_ms")]
    parts = [f"{m.name}{' ' + m.subject if m.subject else ''} {_number(m.value)}"
             for m in shown[:6]]
    more = len(shown) - 6
    return "; ".join(parts) + (f"; +{more} more" if more > 0 else "")


def _row(r: Result, names: tuple[str, ...]) -> list[str]:
    return [f"{r.finished_at:%Y-%m-%d %H:%M}", r.command, r.profile or "-",
            r.machine or "-", r.device or r.sku or "-", r.build or r.iree, r.verdict or "-",
            _headline(r, names)]


HISTORY_HEADER = ["finished (UTC)", "command", "profile", "machine", "device", "IREE", "verdict",
                  "metrics"]


def to_json(store: str, query: dict[str, Any], results: list[Result],
            changes: list[Change]) -> dict[str, Any]:
    return {"schema": HISTORY_SCHEMA, "store": store, "query": query, "count": len(results),
            "results": [r.to_dict() for r in results],
            "changes": [c.to_dict() for c in changes]}


def next_step(c: Change) -> tuple[str, str | None]:
    """What to do about a change: (what the command does, the command), or (why none, None)."""
    if c.kind == Outcome.UNCONFIRMED and c.confirm:
        return "confirm it", c.confirm
    if c.kind in (Outcome.REGRESSION, Outcome.UNCONFIRMED, Outcome.IMPROVEMENT,
                  Outcome.CHANGE) and c.bisect():
        return "pin it", c.bisect()
    if c.kind == Outcome.MACHINE:
        return "", None
    return c.why_no_bisect(), None


def change_lines(changes: list[Change]) -> list[str]:
    lines = []
    for c in changes:
        lines.append(f"- {esc(c.line())}")
        lines += [f"  - {esc(r)}" for r in c.reasons]
        what, command = next_step(c)
        if command:
            lines.append(f"  - {what}: `{command}`")
        elif what:
            lines.append(f"  - {esc(what)}")
    return lines


def counts(changes: list[Change]) -> dict[str, int]:
    """How many changes of each kind, in the order a reader acts on them."""
    return {k: sum(c.kind == k for c in changes) for k in (
        Outcome.REGRESSION, Outcome.UNCONFIRMED, Outcome.MACHINE, Outcome.IMPROVEMENT,
        Outcome.CHANGE)}


def changes_headline(changes: list[Change]) -> str:
    """`2 found: 1 confirmed regression(s), 1 the machine's, not IREE's`: the heading."""
    words = {Outcome.REGRESSION: "confirmed regression(s)",
             Outcome.UNCONFIRMED: "unconfirmed regression(s)",
             Outcome.MACHINE: "the machine's, not IREE's", Outcome.IMPROVEMENT: "improvement(s)",
             Outcome.CHANGE: "other change(s)"}
    parts = [f"{n} {words[Outcome(k)]}" for k, n in counts(changes).items() if n]
    return f"{len(changes)} found" + (f": {', '.join(parts)}" if parts else "")


def markdown(store: str, results: list[Result], changes: list[Change],
             names: tuple[str, ...] = (), newest: int = 50) -> str:
    lines = [f"## History: {len(results)} result(s)", "", f"store: `{esc(store)}`", ""]
    lines += [f"### Changes ({changes_headline(changes)})", ""]
    lines += change_lines(changes) or ["none found"]
    shown = results[-newest:][::-1]
    lines += ["", f"### Results (newest {len(shown)})", "",
              *md_table(HISTORY_HEADER, [[esc(c) for c in _row(r, names)] for r in shown])]
    return "\n".join(lines) + "\n"


# --- the page -------------------------------------------------------------------------------


def _scale(lo: float, hi: float) -> tuple[float, float]:
    if hi <= lo:
        pad = abs(lo) * 0.05 or 1.0
        return lo - pad, hi + pad
    pad = (hi - lo) * 0.08
    return lo - pad, hi + pad


def _band(bands: list[tuple[float | None, float | None]], x: Callable[[int], float],
          y: Callable[[float], float], lo: float, hi: float) -> list[str]:
    """The band shaded per result, not as one rectangle: a golden's change moves it; an
    open side reaches the plot's edge."""
    pw = W - LEFT - RIGHT
    parts = []
    for i, (b_lo, b_hi) in enumerate(bands):
        if b_lo is None and b_hi is None:
            continue
        top, bottom = y(b_hi if b_hi is not None else hi), y(b_lo if b_lo is not None else lo)
        half = pw / max(len(bands) - 1, 1) / 2
        x0, x1 = max(LEFT, x(i) - half), min(LEFT + pw, x(i) + half)
        parts.append(f'<rect x="{x0:.1f}" y="{top:.1f}" width="{x1 - x0:.1f}" '
                     f'height="{max(bottom - top, 0.5):.1f}" fill="{BAND}"/>')
    return parts


def _line_and_points(pts: Sequence[Point], x: Callable[[int], float],
                     y: Callable[[float], float]) -> list[str]:
    """The series' line, and a point per result with its date, build and value; a failed
    verdict's point red."""
    path = " ".join(f"{'M' if i == 0 else 'L'}{x(i):.1f},{y(p.value):.1f}"
                    for i, p in enumerate(pts))
    parts = [f'<path d="{path}" fill="none" stroke="{LINE}" stroke-width="1.5"/>']
    for i, p in enumerate(pts):
        fill = POINT_FAIL if p.metric.verdict == "fail" else LINE
        kept = conditions_of(p) or {}
        busy = kept.get("beside_foreign_load") is True
        title = f"{p.when:%Y-%m-%d %H:%M} {p.build}: {p.value:.6g}" + (
            "; timed beside foreign load" if busy else "") + gpu_line(kept.get("gpu") or {})
        ring = f' stroke="{BUSY}" stroke-width="1.6"' if busy else ""
        parts.append(f'<circle cx="{x(i):.1f}" cy="{y(p.value):.1f}" r="2.6" fill="{fill}"'
                     f"{ring}><title>{e(title)}</title></circle>")
    return parts


def _environment_marks(pts: Sequence[Point], x: Callable[[int], float], top: float,
                       bottom: float) -> list[str]:
    """A dotted line between two results whose environment differs, labelled with what
    changed (`GPU driver, ROCm`) and, on hover, from what to what."""
    parts = []
    for i in range(1, len(pts)):
        changed = environment_changes(pts[i - 1], pts[i])
        if not changed:
            continue
        cx = (x(i - 1) + x(i)) / 2
        label = ", ".join(dict.fromkeys(label for label, _ in changed))
        title = "; ".join(reason for _, reason in changed)
        parts.append(f'<g class="environment"><title>{e(title)}</title>'
                     f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{top}" y2="{bottom}" '
                     f'stroke="{ENV_MARK}" stroke-width="1.2" stroke-dasharray="2 2"/>'
                     f'<text x="{cx + 3:.1f}" y="{bottom - 4:.1f}" font-size="10" '
                     f'fill="{ENV_MARK}">{e(label[:40])}</text></g>')
    return parts


def _x_ticks(pts: Sequence[Point], changes: list[Change], x: Callable[[int], float],
             bottom: float) -> list[str]:
    """Date and build under the first and last results and each change point, a tick
    left out where it would crowd the one before."""
    ticks: list[int] = []
    for i in sorted({0, *(c.index for c in changes), len(pts) - 1}):
        if not ticks or x(i) - x(ticks[-1]) >= TICK_GAP:
            ticks.append(i)
    parts = []
    for i in ticks:
        p = pts[i]
        anchor = "start" if i == 0 else "end" if i == len(pts) - 1 else "middle"
        parts.append(f'<text x="{x(i):.1f}" y="{bottom + 15}" text-anchor="{anchor}" '
                     f'font-size="10" fill="#57606a">{e(f"{p.when:%Y-%m-%d}")}</text>'
                     f'<text x="{x(i):.1f}" y="{bottom + 28}" text-anchor="{anchor}" '
                     f'font-size="10" fill="#57606a">{e(p.build[:28])}</text>')
    return parts


def chart(series: Series, changes: list[Change]) -> str:
    """One series as an inline SVG: value per result (x: results in time order, ticks with
    the date and build), its band shaded, failed verdicts red, change points marked."""
    first = max(0, len(series.points) - CHART_POINTS)
    pts = series.points[first:]
    changes = [replace(c, index=c.index - first) for c in changes if c.index > first]
    values = [p.value for p in pts]
    bands = [(p.metric.low, p.metric.high) for p in pts]
    goldens = [p.metric.golden for p in pts if p.metric.golden is not None]
    edges = [e for b in bands for e in b if e is not None] + goldens
    # The axis is the values'; a band edge or golden near them widens it, a far one (a
    # loose golden) is drawn to the plot's edge instead of squashing the series flat.
    span = max(max(values) - min(values), 0.1 * abs(float(np.median(values))), 1e-12)
    near = [e for e in edges if min(values) - span <= e <= max(values) + span]
    lo, hi = _scale(min(values + near), max(values + near))
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(i: int) -> float:
        return LEFT + (pw * i / (len(pts) - 1) if len(pts) > 1 else pw / 2)

    def y(v: float) -> float:
        return min(max(TOP + ph * (1 - (v - lo) / (hi - lo)), TOP), TOP + ph)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
             f'viewBox="0 0 {W} {H}" role="img" aria-label="{e(series.label)}">',
             f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="#ffffff" '
             'stroke="#d0d7de"/>']
    parts += _band(bands, x, y, lo, hi)
    for g in sorted(set(goldens)):
        if not lo <= g <= hi:
            continue
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y(g):.1f}" y2="{y(g):.1f}" '
                     'stroke="#1a7f37" stroke-dasharray="4 3"/>')
    for v in (lo + (hi - lo) * k / 4 for k in range(5)):
        parts.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end" '
                     f'font-size="10" fill="#57606a">{e(f"{v:.4g}")}</text>')
    parts += _environment_marks(pts, x, TOP, TOP + ph)
    parts += _line_and_points(pts, x, y)
    for c in changes:
        cx = (x(c.index - 1) + x(c.index)) / 2
        parts.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{TOP}" y2="{TOP + ph}" '
                     f'stroke="{STEP}" stroke-width="1.5" stroke-dasharray="5 3"/>'
                     f'<text x="{cx + 3:.1f}" y="{TOP + 12}" font-size="11" fill="{STEP}">'
                     f"{e(f'{c.relative:+.1%}')}</text>")
    parts += _x_ticks(pts, changes, x, TOP + ph)
    parts.append("</svg>")
    return "".join(parts)


def _header(store: str, results: list[Result], series: list[Series],
            changes: list[Change]) -> str:
    """The banner: red only for a confirmed regression; amber for one the history alone
    suggests; a step of the machine's says so and raises no alarm."""
    n = counts(changes)
    if n[Outcome.REGRESSION]:
        cls, badge, note = ("fail", f"{n[Outcome.REGRESSION]} REGRESSION(S)",
                            "confirmed: the two builds measured again, interleaved")
    elif n[Outcome.UNCONFIRMED]:
        cls, badge, note = ("unconfirmed", f"{n[Outcome.UNCONFIRMED]} TO CONFIRM",
                            "worse across builds, not measured again yet: no regression")
    elif n[Outcome.MACHINE]:
        cls, badge, note = ("pass", "MACHINE CHANGED",
                            "no regression: the machine changed, not IREE")
    else:
        cls, badge, note = "pass", "NO REGRESSION", "no regression"
    return (f'<header class="verdict {cls}"><div class="badge">{e(badge)}</div><div>'
            f"<h1>History: {len(results)} result(s), {len(series)} series</h1>"
            f"<p>{e(note)}; store <code>{e(store)}</code></p></div></header><main>")


def html(store: str, results: list[Result], series: list[Series], changes: list[Change],
         names: tuple[str, ...] = (), newest: int = 200) -> str:
    by_series: dict[int, list[Change]] = {}
    for c in changes:
        by_series.setdefault(id(c.series), []).append(c)
    ordered = sorted(series, key=lambda s: (id(s) not in by_series, s.label))
    charted = [s for s in ordered if len(s.points) > 1][:MAX_CHARTS]
    parts = [_header(store, results, series, changes),
             f"<h2>Changes ({e(changes_headline(changes))})</h2>"]
    if not changes:
        parts.append("<p>No change point found.</p>")
    for c in changes:
        what, command = next_step(c)
        parts.append(f'<p class="change {e(c.kind)}">{e(c.line())}</p>'
                     + "".join(f"<p><em>{e(r)}</em></p>" for r in c.reasons)
                     + (f"<p>{e(what)}:</p><pre class=\"cmd\">{e(command)}</pre>" if command
                        else f"<p><em>{e(what)}</em></p>" if what else ""))
    parts.append(f"<h2>Series ({len(charted)} of {len(series)} charted)</h2>")
    for s in charted:
        unit = f" ({s.unit})" if s.unit else ""
        drawn = (f"the newest {CHART_POINTS} of {len(s.points)} results"
                 if len(s.points) > CHART_POINTS else f"{len(s.points)} results")
        busy = sum((conditions_of(p) or {}).get("beside_foreign_load") is True
                   for p in s.points)
        drawn += f"; {busy} timed beside foreign load (ringed)" if busy else ""
        moved = sum(bool(environment_changes(a, b)) for a, b in pairwise(s.points))
        drawn += f"; the environment changed {moved} time(s) (dotted)" if moved else ""
        parts.append(f'<figure class="series"><figcaption>{e(s.label)}{e(unit)}: '
                     f"{e(drawn)}</figcaption>"
                     f"{chart(s, by_series.get(id(s), []))}</figure>")
    shown = results[-newest:][::-1]
    parts += [f"<h2>Results (newest {len(shown)})</h2>",
              _table([e(h) for h in HISTORY_HEADER],
                     [[e(c) for c in _row(r, names)] for r in shown]),
              "</main>"]
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"/>'
            f"<title>History: {len(results)} results</title><style>{CSS}{HISTORY_CSS}"
            "</style></head><body>" + "".join(parts) + "</body></html>\n")

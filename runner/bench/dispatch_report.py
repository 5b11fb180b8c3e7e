"""Dispatch profiles and their changes as tables: bench.md, and the trend and bisect
reports (Markdown and HTML), from the dicts of runner.bench.dispatch_profile/_diff.

A table is plain cells plus which columns hold a dispatch key or name, so each report
renders it its own way (Markdown code spans, HTML <code>), escaped there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runner.base.mdtable import md_table
from runner.report.markdown import code, esc

NA = "-"
TABLE_ROWS = 10  # dispatches (and movers) a Markdown table shows; the JSON holds them all


@dataclass(frozen=True)
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    code_cols: tuple[int, ...] = ()

    def markdown(self) -> list[str]:
        rows = [[code(c) if i in self.code_cols else esc(c) for i, c in enumerate(row)]
                for row in self.rows]
        return [f"**{esc(self.title)}**", "", *md_table(self.header, rows)]


def _f(value: float | None, digits: int = 3) -> str:
    return NA if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return NA if value is None else f"{100 * value:.1f}%"


def _signed(value: float | None, digits: int = 3) -> str:
    return NA if value is None else f"{value:+.{digits}f}"


def _change_pct(value: float | None) -> str:
    return NA if value is None else f"{value:+.1f}%"


def breakdown(p: dict[str, Any]) -> str:
    """One line: where a call's wall time went."""
    c = p["per_call_ms"]
    parts = [f"wall {_f(c['wall'])} ms/call (profiled; unprofiled {_f(p['unprofiled_ms'])}, "
             f"overhead x{_f(p['profiling_overhead'], 2)})",
             f"dispatches {_f(c['dispatch_busy'])} busy / {_f(c['dispatch_sum'])} summed "
             f"({_pct(p['dispatch_share_of_wall'])} of wall; {_f(c['dispatch_median_sum'])} "
             "with every dispatch at its median)"]
    if c["command_buffers"] is not None:
        parts.append(f"not in dispatches {_f(c['not_in_dispatches'])}: "
                     f"{_f(c['in_command_buffers_outside_dispatches'])} inside command "
                     "buffers (gaps, barriers, fills, copies), "
                     f"{_f(c['outside_command_buffers'])} outside (host: VM, allocation, "
                     "submission)")
    else:
        parts.append(f"not in dispatches {_f(c['not_in_dispatches'])}")
    return "; ".join(parts)


def profile_tables(label: str, p: dict[str, Any], top: int = TABLE_ROWS) -> list[Table]:
    """A stage profile's kinds and its top dispatch functions."""
    median = p["per_call_ms"]["dispatch_median_sum"]
    kinds = Table(f"{label}: dispatch time by kind", [
        "kind", "ms/call", "share", "at medians ms/call", "share at medians",
        "dispatches/call", "functions"],
        [[k["kind"], _f(k["ms_per_call"]), _pct(k["share"]), _f(k["median_ms_per_call"]),
          _pct(k["median_ms_per_call"] / median if median else None),
          f"{k['dispatches_per_call']:g}", str(k["functions"])] for k in p["kinds"]])
    rows = [[r["name"], r["kind"], _f(r["ms_per_call"]), _pct(r["share"]), str(r["count"]),
             *[_f(1000 * r[f], 1) for f in ("mean_ms", "median_ms", "min_ms", "max_ms")]]
            for r in p["dispatches"][:top]]
    return [kinds, Table(f"{label}: top {len(rows)} of {p['functions']} dispatch functions "
                         "by total time", ["dispatch", "kind", "ms/call", "share", "count",
                                           "mean µs", "median µs", "min µs", "max µs"], rows,
                         (0,))]


def summary_row(p: dict[str, Any] | None) -> list[str]:
    """The cells of a stage's profile in the one-row-per-stage table (`SUMMARY_HEADER`)."""
    if p is None:
        return [NA] * len(SUMMARY_HEADER)
    if p["status"] != "ok":
        return [p["mode"], str(p["calls"]), *[NA] * (len(SUMMARY_HEADER) - 3),
                f"{p['status']}: {p['note'].splitlines()[0]}"]
    c = p["per_call_ms"]
    top = p["kinds"][0] if p["kinds"] else None
    return [p["mode"], str(p["calls"]), f"{p['dispatches_per_call']:g}", str(p["functions"]),
            _f(c["dispatch_sum"]), _f(c["dispatch_busy"]), _f(c["command_buffers"]),
            _f(c["wall"]), _pct(p["dispatch_share_of_wall"]), _f(p["profiling_overhead"], 2),
            f"{top['kind']} {_pct(top['share'])}" if top else NA, "ok"]


SUMMARY_HEADER = ["mode", "calls", "dispatches/call", "functions", "dispatch ms/call (sum)",
                  "busy ms/call", "in command buffers", "wall ms/call", "busy / wall",
                  "profiled / unprofiled", "top kind", "status"]


def change_tables(label: str, change: dict[str, Any], top: int = TABLE_ROWS) -> list[Table]:
    """What moved in one stage between two profiles (runner.bench.dispatch_diff)."""
    if "note" in change:
        return []
    d, w = change["dispatch_ms"], change["wall_ms"]
    totals = Table(f"{label}: dispatch time {_f(d['before_ms'])} → {_f(d['after_ms'])} "
                   f"ms/call ({_change_pct(d['change_pct'])}; at medians "
                   f"{_change_pct(d['median_change_pct'])}), wall {_f(w['before_ms'])} → "
                   f"{_f(w['after_ms'])} ms/call; {change['matched_keys']} dispatch keys "
                   f"matched, {len(change['added'])} added, {len(change['removed'])} removed",
                   ["kind", "before ms/call", "after ms/call", "change ms", "change",
                    "change at medians"],
                   [[k["kind"], _f(k["before_ms"]), _f(k["after_ms"]), _signed(k["change_ms"]),
                     _change_pct(k["change_pct"]), _change_pct(k["median_change_pct"])]
                    for k in change["kinds"]])
    moved = Table(f"{label}: dispatches that moved most", [
        "dispatch (ordinal blanked)", "kind", "before ms/call", "after ms/call", "change ms",
        "change", "beyond noise", "change at medians", "functions"],
        [[r["key"], r["kind"], _f(r["before_ms"]), _f(r["after_ms"]), _signed(r["change_ms"]),
          _change_pct(r["change_pct"]), "yes" if r["beyond_noise"] else "no",
          _change_pct(r["median_change_pct"]), "{} → {}".format(*r["functions"])]
         for r in change["moved"][:top]], (0,))
    tables = [totals, moved]
    for side in ("added", "removed"):
        if change[side]:
            tables.append(Table(f"{label}: {side} dispatches", [
                "dispatch (ordinal blanked)", "kind", "ms/call", "functions"],
                [[r["key"], r["kind"], _f(r["ms_per_call"]), str(r["functions"])]
                 for r in change[side][:top]], (0,)))
    return tables


def change_notes(changes: dict[str, dict[str, Any]]) -> list[str]:
    return [f"{stage}: {c['note']}" for stage, c in changes.items() if "note" in c]


def changes_markdown(changes: dict[str, dict[str, Any]], top: int = TABLE_ROWS) -> list[str]:
    lines: list[str] = []
    for stage, change in changes.items():
        for t in change_tables(stage, change, top):
            lines += [*t.markdown(), ""]
    lines += [f"- {esc(n)}" for n in change_notes(changes)]
    return lines

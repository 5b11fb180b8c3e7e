"""A `runner mlperf` out dir's reports: results.json (the record), summary.md, report.html.

Rendered from the record alone, so `results.json` is the one source of every number; the
HTML reuses the run report's stylesheet and escaping (runner/report/html.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.base.fileio import atomic_write_bytes
from runner.base.mdtable import md_table
from runner.report.html import CSS, _table, e
from runner.report.markdown import esc
from runner.report.write import REPORT_HTML, RESULTS_JSON, SUMMARY_MD

PERCENTILES = ("p50", "p90", "p95", "p99", "p99.9")


def _f(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _test_rows(record: dict[str, Any]) -> list[list[str]]:
    rows = []
    for t in record["tests"]:
        s = t.get("summary") or {}
        lat = s.get("latency_ms", {})
        result = s.get("result") or ("log written" if t["mode"] == "accuracy" and s
                                     else "no summary")
        rows.append([t.get("key", t["name"]), t["mode"], result,
                     _f(s.get("samples_per_second")),
                     *[_f(lat.get(p), 1) for p in PERCENTILES],
                     str(t["sut"].get("completed", "-")), str(t["sut"].get("recomputed", "-")),
                     _f((t["sut"].get("store_to_complete_ms") or {}).get("p99"), 2),
                     "; ".join(s.get("reasons", [])) or "-"])
    return rows


HEADER = ["test", "mode", "result", "samples/s", *[f"{p} ms" for p in PERCENTILES],
          "completed", "recomputed", "store->complete p99 ms", "why"]


def _accuracy_lines(record: dict[str, Any]) -> list[str]:
    out = []
    for scenario, acc in (record.get("accuracy") or {}).items():
        if "fid" not in acc:
            out.append(f"{scenario}: {acc['verdict']}")
            continue
        scores = ", ".join(f"{name} {'not scored' if acc.get(key) is None else acc[key]}"
                           for name, key in (("FID", "fid"), ("CLIP", "clip")))
        out += [f"{scenario}: {scores} over {acc['n']} samples: {acc['verdict']}",
                *acc["lines"]]
    return out


def _submission_lines(record: dict[str, Any]) -> list[str]:
    sub = record.get("submission")
    if not sub:
        return []
    head = (f"{sub['root']}/{sub['division']}/{sub['submitter']} (MLPerf {sub['round']}, "
            f"system {sub['system']}): "
            + ("conforms to the round's layout" if not sub["problems"] else
               f"{len(sub['problems'])} problem(s)"))
    return [head, *sub["problems"],
            *[f"rule not met: {line}" for line in sub.get("rules_not_met", [])]]


def _compliance_lines(record: dict[str, Any]) -> list[str]:
    return [f"{v['test']}: " + ", ".join(
        f"{name} {'PASS' if c['passed'] else 'FAIL'}" for name, c in v["checks"].items())
        for v in record.get("compliance", [])]


def markdown(record: dict[str, Any]) -> str:
    lines = [f"## MLPerf LoadGen {esc(', '.join(record['scenarios']))} {esc(record['mode'])}: "
             f"**{esc(record['status'])}**", "",
             f"profile `{record['profile']}`, system `{record['system']}`, QSL "
             f"{record['total']} samples (performance set {record['performance_count']})", ""]
    if record.get("failure"):
        lines += [f"**failure:** {esc(record['failure'])}", ""]
    lines += md_table(HEADER, _test_rows(record))
    for title, body in _sections(record):
        if body:
            lines += ["", f"### {title}", *[f"- {esc(b)}" for b in body]]
    return "\n".join(lines) + "\n"


def _sections(record: dict[str, Any]) -> list[tuple[str, list[str]]]:
    return [("Accuracy", _accuracy_lines(record)), ("Compliance", _compliance_lines(record)),
            ("Submission tree", _submission_lines(record))]


def html(record: dict[str, Any]) -> str:
    cls = {"PASS": "pass", "NOT JUDGED": "none"}.get(record["status"], "fail")
    rows = [[e(c) for c in row] for row in _test_rows(record)]
    parts = [f'<header class="verdict {cls}"><div class="badge">{e(record["status"])}</div>'
             f"<div><h1>MLPerf LoadGen {e(', '.join(record['scenarios']))} "
             f"{e(record['mode'])}</h1>"
             f"<p>profile <code>{e(record['profile'])}</code>, system "
             f"<code>{e(record['system'])}</code>, QSL {record['total']} samples</p></div>"
             "</header><main>"]
    if record.get("failure"):
        parts.append(f'<p class="reasons">{e(record["failure"])}</p>')
    parts += ["<h2>LoadGen tests</h2>", _table([e(h) for h in HEADER], rows)]
    for title, body in _sections(record):
        if body:
            parts.append(f"<h2>{title}</h2><ul>" + "".join(f"<li>{e(b)}</li>" for b in body)
                         + "</ul>")
    parts.append("<h2>Settings</h2><pre>" + e(json.dumps(record["settings"], indent=1))
                 + "</pre></main>")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"/><title>MLPerf '
            f"{e(', '.join(record['scenarios']))}</title><style>{CSS}</style></head><body>"
            + "".join(parts) + "</body></html>\n")


def write_reports(out: Path, record: dict[str, Any]) -> list[Path]:
    files = {RESULTS_JSON: json.dumps(record, indent=2, sort_keys=True) + "\n",
             SUMMARY_MD: markdown(record), REPORT_HTML: html(record)}
    paths = []
    for name, text in files.items():
        atomic_write_bytes(out / name, text.encode("utf-8"))
        paths.append(out / name)
    return paths

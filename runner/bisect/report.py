"""The reports of a bisect or trend out dir: `bisect.md`/`trend.md`, `report.html` (inline
CSS and SVG, as runner/report/html.py writes a run's), and `reproduce.sh`.

Everything comes from the state file (bisect.json / trend.json), so the reports can be
written again from it at any time; every value is escaped (build specs, commit subjects
and script output are user text)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from runner.base.fileio import atomic_write_text
from runner.base.mdtable import md_table
from runner.base.progress import duration
from runner.base.shellscript import Script
from runner.batch.reproduce import HERE, OUT, rerun_argv
from runner.bench import dispatch_report as dr
from runner.model.images import decode_png
from runner.report.charts import series_chart
from runner.report.html import CSS, e
from runner.report.markdown import code, esc, fence
from runner.report.thumbs import data_uri, thumbnail_png

ICON = {"good": "✅ good", "bad": "❌ BAD", "skip": "⚪ skip"}
# What a trend draws, one chart each: (point key, title, axis, scale)
TREND_SERIES = (("fid", "FID", "FID (lower is better)", 1.0),
                ("clip", "CLIP score", "CLIP", 1.0),
                ("samples_per_s", "throughput", "samples/s", 1.0),
                ("compile_s", "compile time", "seconds (all modules)", 1.0),
                ("dispatch_count", "dispatch count", "dispatches (all modules)", 1.0),
                ("vmfb_bytes", "vmfb size", "MB (all modules)", 1e-6))


def _steps_in_order(state: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(state["steps"], key=lambda s: s.get("order", s["index"]))


def _inputs_lines(state: dict[str, Any]) -> list[str]:
    i = state["inputs"]
    return [f"- test: {code(i['test'])}; profile {code(i['profile'])}, samples "
            f"{code(i['samples'])}; install {esc(i['executor'])}",
            f"- {len(state.get('candidates') or [])} builds; {len(state['steps'])} measured "
            f"in {duration(sum(s['seconds'] for s in state['steps']))} (the steps' time, "
            "an interrupted run's included)"]


def _evidence_md(ev: dict[str, Any]) -> list[str]:
    lines = [f"## Evidence: {code(ev['against'])} -> the first bad build", "",
             f"- verdict against the last good build: {esc(ev['verdict']['metric'])}"]
    if "fid_delta" in ev:
        lines.append(f"- FID {ev['fid_delta']:+.6g}, CLIP {ev['clip_delta']:+.6g}")
    changed = ev.get("changed_samples")
    if changed is not None:
        lines.append(f"- {len(changed)} sample(s) changed")
        if changed:
            lines += ["", *md_table(["qsl_idx", "max abs diff", "pixels differing"],
                                    [[c["qsl_idx"], c["max_abs"],
                                      f"{100 * c['differing_fraction']:.4f}%"]
                                     for c in changed[:50]]), ""]
    ps = (ev.get("psnr_ssim") or {}).get("summary")
    if ps:
        lines.append(f"- min PSNR {ps['min_psnr']} dB, min SSIM {ps['min_ssim']}")
    if ev.get("goldens"):
        lines.append(f"- goldens: exit {ev['goldens']['exit_code']}; first failing: "
                     f"{esc(ev['goldens'].get('first_failure') or '-')}")
    if ev.get("script"):
        lines += [f"- script exit {ev['script']['exit_code']}; its output ends:", "",
                  *fence(ev["script"].get("tail", ""))]
    if ev.get("dispatch_changes"):
        lines += ["", f"### Dispatches: {code(ev['against'])} -> the first bad build", "",
                  *dr.changes_markdown(ev["dispatch_changes"])]
    elif ev.get("dispatch_note"):
        lines.append(f"- no dispatch comparison: {esc(ev['dispatch_note'])}")
    if ev.get("error"):
        lines += ["- the error:", "", *fence(str(ev["error"])[-2000:])]
    return lines


def bisect_markdown(state: dict[str, Any]) -> str:
    answer = state.get("answer") or {"text": "not finished: run the same command to resume"}
    lines = [f"# bisect: {esc(answer['text'])}", "", *_inputs_lines(state)]
    if answer.get("first_bad"):
        lines.append(f"- first bad: {code(answer['first_bad'])}; last good: "
                     f"{code(answer['last_good'])}")
    if answer.get("skipped"):
        lines.append(f"- skipped between them: {', '.join(code(s) for s in answer['skipped'])}")
    lines += ["", "## Steps", "", *md_table(
        ["step", "build", "verdict", "metric", "time"],
        [[s.get("order", "-"), code(s["build"]), ICON[s["verdict"]["state"]],
          esc(s["verdict"]["metric"]), duration(s["seconds"])]
         for s in _steps_in_order(state)])]
    if answer.get("evidence"):
        lines += ["", *_evidence_md(answer["evidence"])]
    lines += ["", "## Candidates", "", *md_table(
        ["#", "build", "commit", "verdict"],
        [[i, code(b["spec"]), esc(b.get("subject") or ""), _verdict_of(state, i)]
         for i, b in enumerate(state.get("candidates") or [])])]
    lines += ["", "Reproduce: `reproduce.sh` in this directory, or", "",
              *fence(_command(state), "bash")]
    return "\n".join(lines) + "\n"


def _verdict_of(state: dict[str, Any], index: int) -> str:
    step = next((s for s in state["steps"] if s["index"] == index), None)
    return ICON[step["verdict"]["state"]] if step else "not tested"


def _command(state: dict[str, Any]) -> str:
    from runner.base.shellscript import join

    return join(["runner", *state["argv"]])


def _fmt(value: Any, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value * scale:.6g}"


def trend_markdown(state: dict[str, Any]) -> str:
    points = state.get("points") or []
    lines = [f"# trend: {len(points)} builds", "", *_inputs_lines(state),
             f"- reference for the verdicts: {code(state.get('reference'))}", "",
             *md_table(["build", "verdict", "FID", "CLIP", "samples/s (2 passes)",
                        "compile s", "dispatches", "vmfb bytes", "images changed", "time"],
                       [[code(p["build"]), ICON[p["verdict"]], _fmt(p["fid"]), _fmt(p["clip"]),
                         _fmt(p["samples_per_s"]) + (" (" + ", ".join(
                             f"{r:.3g}" for r in p["samples_per_s_passes"]) + ")"
                             if p["samples_per_s_passes"] else ""),
                         _fmt(p["compile_s"]), _fmt(p["dispatch_count"]),
                         _fmt(p["vmfb_bytes"]),
                         {True: "**yes**", False: "no", None: "-"}[p["images_changed"]],
                         duration(p["seconds"])] for p in points])]
    shared = [p for p in points if p.get("score_from")]
    if shared:
        lines += ["", "Scored once, byte-identical images:", ""]
        lines += [f"- {code(p['build'])}: FID/CLIP of {code(p['score_from'])}" for p in shared]
    errors = [(p["build"], p["error"]) for p in points if p.get("error")]
    if errors:
        lines += ["", "Builds not measured or not scored:", ""]
        lines += [f"- {code(b)}: {esc(str(err).splitlines()[0][:300])}" for b, err in errors]
    lines += _dispatches_md(points)
    lines += ["", "Reproduce: `reproduce.sh` in this directory, or", "",
              *fence(_command(state), "bash")]
    return "\n".join(lines) + "\n"


def _dispatch_stages(points: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(s for p in points for s in p.get("dispatch_ms") or {}))


def _dispatch_table(points: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Each build's dispatch time per stage call, a column per stage."""
    stages = _dispatch_stages(points)
    rows = [[p["build"], *[_fmt((p.get("dispatch_ms") or {}).get(s)) for s in stages],
             p.get("dispatch_note") or ""] for p in points]
    return ["build", *[f"{s} ms/call" for s in stages], "note"], rows


DISPATCH_INTRO = ("Dispatch time per stage call from IREE's HAL profiler (each build's own "
                  "`iree-profile`); each build against the build before it that has a "
                  "profile, dispatches matched by name with the ordinal blanked out.")


def _dispatches_md(points: list[dict[str, Any]]) -> list[str]:
    if not any("dispatch_ms" in p for p in points):
        return []
    header, rows = _dispatch_table(points)
    lines = ["", "## Dispatches", "", DISPATCH_INTRO, "",
             *md_table(header, [[code(r[0]), *r[1:-1], esc(r[-1])] for r in rows])]
    for p in points:
        if p.get("dispatch_changes"):
            lines += ["", f"### {code(p['dispatch_against'])} -> {code(p['build'])}", "",
                      *dr.changes_markdown(p["dispatch_changes"])]
    return lines


# ----------------------------------------------------------------------------- html

def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _st(state: str) -> str:
    cls = {"good": "pass", "bad": "fail"}.get(state, "skip")
    return f'<span class="st {cls}">{e(ICON[state])}</span>'


def _pair_html(state: dict[str, Any]) -> str:
    """The sample that moved most: last good and first bad side by side."""
    answer = state.get("answer") or {}
    ev = answer.get("evidence") or {}
    changed = ev.get("changed_samples") or []
    if not changed:
        return ""
    worst = max(changed, key=lambda c: (c["max_abs"], c["differing_fraction"]))
    dirs = {s["build"]: Path(s["measurement"]["dir"]) for s in state["steps"]}
    name = f"images/{worst['qsl_idx']:05d}.png"
    cells = []
    for spec in (answer["last_good"], answer["first_bad"]):
        path = dirs[spec] / name
        if not path.is_file():
            return ""
        uri = data_uri(thumbnail_png(decode_png(path.read_bytes())))
        cells.append(f'<div><img src="{uri}" alt="{e(spec)}"/><div class="side">{e(spec)}'
                     "</div></div>")
    return (f'<h3>sample {worst["qsl_idx"]}: max |Δ| {worst["max_abs"]}</h3>'
            f'<div class="pair" style="max-width:560px"><div class="imgs">{"".join(cells)}'
            "</div></div>")


def _page(title: str, badge: str, cls: str, summary: str, body: str, state: dict) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S %z")
    return ("<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8"/>'
            '<meta name="viewport" content="width=device-width, initial-scale=1"/>'
            f"<title>{e(title)} · iree-sdxl-runner</title><style>{CSS}</style></head><body>"
            f'<header class="verdict {cls}"><div class="badge">{e(badge)}</div><div>'
            f"<h1>{e(title)}</h1><p>{e(summary)}</p></div></header><main>{body}"
            f"<section><h2>Reproduce</h2><pre>{e(_command(state))}</pre></section>"
            f"<footer>Generated by <code>runner {e(state['command'])}</code> at {e(stamp)}."
            "</footer></main></body></html>\n")


def bisect_html(state: dict[str, Any]) -> str:
    answer = state.get("answer") or {"text": "not finished"}
    inputs = state["inputs"]
    steps = _steps_in_order(state)
    rows = [[str(s.get("order", "-")), f"<code>{e(s['build'])}</code>", _st(s["verdict"]["state"]),
             e(s["verdict"]["metric"]), e(duration(s["seconds"]))] for s in steps]
    body = [f"<section><h2>Steps</h2><p class=\"muted\">test <code>{e(inputs['test'])}</code>, "
            f"profile <code>{e(inputs['profile'])}</code>, samples "
            f"<code>{e(inputs['samples'])}</code></p>"
            + _table(["step", "build", "verdict", "metric", "time"], rows) + "</section>"]
    ev = answer.get("evidence")
    if ev:
        md = "\n".join(_evidence_md(ev)[2:])
        body.append(f"<section><h2>Evidence: {e(ev['against'])} → the first bad build</h2>"
                    f"<pre>{e(md)}</pre>{_pair_html(state)}</section>")
    cand = state.get("candidates") or []
    body.append("<section><h2>Candidates</h2>" + _table(
        ["#", "build", "commit", "verdict"],
        [[str(i), f"<code>{e(b['spec'])}</code>", e(b.get("subject") or ""),
          e(_verdict_of(state, i))] for i, b in enumerate(cand)]) + "</section>")
    found = bool(answer.get("first_bad"))
    return _page(f"bisect: {answer['text']}", "FOUND" if found else "NO CHANGE" if
                 answer.get("no_change") else "OPEN", "fail" if found else "none",
                 f"{inputs['good']} .. {inputs['bad']}, test {inputs['test']}",
                 "".join(body), state)


def trend_html(state: dict[str, Any]) -> str:
    points = state.get("points") or []
    labels = [p["label"] for p in points]
    marks = [i for i, p in enumerate(points) if p["images_changed"]]
    charts = []
    for key, title, axis, scale in TREND_SERIES:
        values = [None if p[key] is None else p[key] * scale for p in points]
        chart = series_chart(labels, values, f"{title} per build", axis, marks)
        if chart:
            charts.append(chart)
    rows = [[f"<code>{e(p['build'])}</code>", _st(p["verdict"]), e(_fmt(p["fid"])),
             e(_fmt(p["clip"])), e(_fmt(p["samples_per_s"])), e(_fmt(p["compile_s"])),
             e(_fmt(p["dispatch_count"])), e(_fmt(p["vmfb_bytes"])),
             {True: "<b>yes</b>", False: "no", None: "-"}[p["images_changed"]],
             e(duration(p["seconds"]))] for p in points]
    body = ("<section><h2>Over the builds</h2>" + "".join(charts) + "</section>"
            "<section><h2>Per build</h2>" + _table(
                ["build", f"verdict ({e(state['inputs']['test'])})", "FID", "CLIP",
                 "samples/s", "compile s", "dispatches", "vmfb bytes", "images changed",
                 "time"], rows) + "</section>" + _dispatches_html(points))
    return _page(f"trend over {len(points)} builds", "TREND", "none",
                 f"profile {state['inputs']['profile']}, samples {state['inputs']['samples']}; "
                 f"image bytes changed at {len(marks)} build(s)", body, state)


def _html_table(t: dr.Table) -> str:
    rows = [[f"<code>{e(c)}</code>" if i in t.code_cols else e(c) for i, c in enumerate(r)]
            for r in t.rows]
    return f"<h4>{e(t.title)}</h4>" + _table([e(h) for h in t.header], rows)


def _dispatches_html(points: list[dict[str, Any]]) -> str:
    if not any("dispatch_ms" in p for p in points):
        return ""
    header, rows = _dispatch_table(points)
    parts = ["<section><h2>Dispatches</h2>", f'<p class="muted">{e(DISPATCH_INTRO)}</p>',
             _table([e(h) for h in header],
                    [[f"<code>{e(r[0])}</code>", *[e(c) for c in r[1:]]] for r in rows])]
    for p in points:
        changes = p.get("dispatch_changes")
        if not changes:
            continue
        parts.append(f"<h3><code>{e(p['dispatch_against'])}</code> → "
                     f"<code>{e(p['build'])}</code></h3>")
        for stage, change in changes.items():
            parts += [_html_table(t) for t in dr.change_tables(stage, change)]
        parts += [f'<p class="muted">{e(n)}</p>' for n in dr.change_notes(changes)]
    return "".join(parts) + "</section>"


# ----------------------------------------------------------------------------- script

def bisect_reproduce_script(state: dict[str, Any], setup_lines: list[str]) -> str:
    """Re-runs the command into a new out dir; the culprit's (or first build's) setup
    commands as comments, to rebuild its environment by hand."""
    script = Script()
    inputs = state["inputs"]
    what = (f"{inputs['good']} .. {inputs['bad']}" if "good" in inputs
            else ", ".join(inputs.get("builds", [])))
    script.comment(f"Reproduces this runner {state['command']} ({what}), test {inputs['test']}.")
    script.comment("Usage: reproduce.sh [OUT_DIR]   (default: <this dir>-reproduced)")
    script.strict()
    script.script_dir(HERE)
    script.arg_or(OUT, 1, [HERE, "-reproduced"])
    script.absolute(OUT)
    if state["inputs"].get("cwd"):
        script.cd_if_exists(state["inputs"]["cwd"])
    script.run(["runner", *rerun_argv(state["argv"]), "--out", OUT])
    if setup_lines:
        script.blank()
        script.comment("The environment of the build in question, made by hand:")
        for line in setup_lines:
            script.comment(f"  {line}")
    return script.text()


def report_files(out: Path, command: str) -> list[Path]:
    """What `write_reports` writes for `command` (bisect, trend): Markdown, HTML, script."""
    return [out / f"{command}.md", out / "report.html", out / "reproduce.sh"]


def write_reports(out: Path, state: dict[str, Any], setup_lines: list[str]) -> list[Path]:
    name = state["command"]
    md = bisect_markdown(state) if name == "bisect" else trend_markdown(state)
    html = bisect_html(state) if name == "bisect" else trend_html(state)
    paths = report_files(out, name)
    atomic_write_text(paths[0], md)
    atomic_write_text(paths[1], html)
    atomic_write_text(paths[2], bisect_reproduce_script(state, setup_lines))
    paths[2].chmod(0o755)
    return paths

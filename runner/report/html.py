"""`report.html`: one self-contained page (inline CSS and SVG, images as data URIs).

Nothing is fetched, so it opens the same from a CI artifact, a mail attachment or a
laptop offline. Every value from a file is escaped (captions are user text and can hold
`<`); the markup is also well-formed XML, which keeps stray tags out by construction.
"""

from __future__ import annotations

import time
from html import escape

from runner.report.charts import color, progress_chart, range_bar, throughput_chart
from runner.report.collect import (
    FAIL,
    NOT_SCORED,
    PASS,
    SUBSET,
    RunReport,
    Sample,
    label_parts,
    margin_text,
    score_text,
)
from runner.report.junit import xml_text
from runner.report.markdown import layout_line
from runner.report.thumbs import data_uri

VERDICT_CLASS = {PASS: "pass", FAIL: "fail", NOT_SCORED: "none", SUBSET: "none"}
WORKER_TABLE_OPEN = 16  # longer plans start folded

CSS = """
:root { --pass: #1a7f37; --fail: #cf222e; --none: #6e7781; --warn: #9a6700;
        --line: #d0d7de; --soft: #f6f8fa; --text: #24292f; --muted: #57606a; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans",
       sans-serif; color: var(--text); background: #ffffff; }
main { max-width: 1200px; margin: 0 auto; padding: 0 24px 40px; }
header.verdict { display: flex; align-items: center; gap: 20px; padding: 18px 24px;
                 color: #ffffff; }
header.pass { background: var(--pass); } header.fail { background: var(--fail); }
header.none { background: var(--none); }
.badge { font-size: 34px; font-weight: 800; letter-spacing: 1px; padding: 4px 18px;
         border: 3px solid #ffffff; border-radius: 10px; white-space: nowrap; }
header h1 { margin: 0; font-size: 22px; } header p { margin: 2px 0 0; opacity: 0.92; }
header code { background: rgba(255, 255, 255, 0.18); color: #ffffff; }
h2 { margin: 28px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line);
     font-size: 19px; }
h3 { margin: 18px 0 6px; font-size: 15px; }
code, pre { font: 12.5px/1.45 ui-monospace, "DejaVu Sans Mono", monospace; }
code { background: var(--soft); padding: 1px 4px; border-radius: 4px; word-break: break-all; }
pre { background: var(--soft); border: 1px solid var(--line); border-radius: 6px;
      padding: 10px 12px; overflow-x: auto; white-space: pre-wrap; word-break: break-all; }
.reasons { margin: 14px 0 0; padding: 10px 14px 10px 32px; border-left: 4px solid var(--fail);
           background: #ffebe9; }
.warn { margin: 12px 0 0; padding: 8px 14px; border-left: 4px solid var(--warn);
        background: #fff8c5; }
.warn b { color: var(--warn); }
.muted { color: var(--muted); }
table { border-collapse: collapse; margin: 6px 0; }
th, td { border: 1px solid var(--line); padding: 4px 9px; text-align: left;
         vertical-align: top; }
th { background: var(--soft); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.st { font-weight: 700; white-space: nowrap; }
.st.pass { color: var(--pass); } .st.fail { color: var(--fail); }
.st.skip, .st.none { color: var(--none); }
.scores { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr));
          gap: 16px; }
.score { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; }
.score h3 { margin: 0 0 2px; } .score p { margin: 2px 0; }
.notscored { border: 2px dashed var(--none); border-radius: 8px; padding: 14px;
             color: var(--muted); }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(190px, 1fr));
        gap: 14px; }
figure { margin: 0; border: 1px solid var(--line); border-radius: 8px; overflow: hidden;
         background: var(--soft); }
figure img { display: block; width: 100%; aspect-ratio: 1 / 1; object-fit: cover;
             background: #ffffff; }
figcaption { padding: 6px 8px; font-size: 12.5px; }
figcaption .id { font-weight: 700; } figcaption .meta { color: var(--muted); font-size: 11.5px; }
.missing { display: flex; align-items: center; justify-content: center; aspect-ratio: 1 / 1;
           color: var(--fail); padding: 8px; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 16px; margin: 4px 0 6px; }
.swatch { display: inline-block; width: 14px; height: 4px; margin-right: 5px;
          vertical-align: middle; }
.kpis { display: flex; flex-wrap: wrap; gap: 12px; margin: 6px 0 10px; }
.kpi { border: 1px solid var(--line); border-radius: 8px; padding: 6px 14px; }
.kpi b { display: block; font-size: 20px; }
.pairs { display: grid; grid-template-columns: repeat(auto-fill, minmax(340px, 1fr)); gap: 14px; }
.pair { border: 1px solid var(--line); border-radius: 8px; padding: 8px; }
.pair .imgs { display: grid; grid-template-columns: 1fr 1fr; gap: 6px; }
.pair img { width: 100%; display: block; }
svg.range, svg.chart { display: block; width: 100%; height: auto; max-width: 900px; }
.pair .side { font-size: 11.5px; color: var(--muted); text-align: center; }
details > summary { cursor: pointer; color: #0969da; }
footer { margin-top: 32px; color: var(--muted); font-size: 12px; }
"""


def e(value: object) -> str:
    return escape(xml_text(value), quote=True)


def rich(value: object) -> str:
    """Escaped text whose `backquoted` spans (commands in messages) become <code>."""
    parts = e(value).split("`")
    if len(parts) % 2 == 0:  # unbalanced: leave the backquotes as they are
        return "`".join(parts)
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _code(value: object) -> str:
    return f"<code>{e(value)}</code>"


def _table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    """Cells are HTML already (callers escape what came from files)."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in row)
                   + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _kv(rows: list[tuple[str, str]]) -> str:
    return "<table><tbody>" + "".join(f"<tr><th>{e(k)}</th><td>{v}</td></tr>" for k, v in rows) \
        + "</tbody></table>"


def _num(text: str) -> str:
    return f'<td class="num">{text}</td>'


def _header(r: RunReport) -> str:
    cls = VERDICT_CLASS.get(r.verdict, "none")
    t = r.timing
    when = t.finished_at or t.started_at or "?"
    sub = (f"profile {_code(r.profile)} · model {e(r.model)} ({e(r.precision)}) · "
           f"{r.done}/{r.requested} samples"
           f" · {e(r.executor)} executor · IREE {e(r.runtime_version)} · {e(when)}")
    return (f'<header class="verdict {cls}"><div class="badge">{e(r.verdict)}</div>'
            f"<div><h1>run {_code(r.name)}</h1><p>{sub}</p></div></header>")


def _notices(r: RunReport) -> str:
    out = []
    if r.failures:
        out.append('<ul class="reasons">' + "".join(f"<li>{rich(c.message)}</li>"
                                                    for c in r.failures) + "</ul>")
    for head, rest in map(label_parts, r.labels):
        out.append(f'<div class="warn"><b>{e(head or "Caution")}:</b> {e(rest)}</div>')
    return "".join(out)


def _scores(r: RunReport) -> str:
    s = r.scores
    if s is None:
        return ('<section id="scores"><h2>Accuracy</h2><div class="notscored">'
                f"<b>Not scored:</b> {rich(r.score_note)}</div></section>")
    cards = []
    for metric, m in (("FID", s.fid), ("CLIP", s.clip)):
        if m is None:
            cards.append(f'<div class="score"><h3>{e(metric)} <span class="st none">NOT SCORED'
                         f"</span></h3><p>{e(s.not_scored_note(metric))}</p></div>")
            continue
        state = "none" if s.subset else "pass" if m.passed else "fail"
        shown = "NOT JUDGED (subset)" if s.subset else state.upper()
        cards.append(
            f'<div class="score"><h3>{e(m.metric)} <span class="st {state}">'
            f"{shown}</span></h3>{range_bar(m)}"
            f"<p><b>{e(score_text(m.value))}</b> against [{e(score_text(m.low))}, "
            f"{e(score_text(m.high))}]: {e(margin_text(m))}</p></div>")
    return ('<section id="scores"><h2>Accuracy</h2><div class="scores">' + "".join(cards)
            + "</div>"
            f'<p class="muted">{s.n} samples scored ({e(s.sample_ids)}; the ranges hold for '
            f"{e(s.ranges_samples)}) on {e(s.device)}"
            + (f" in {s.seconds:.1f} s" if s.seconds is not None else "")
            + f"; backbones: {e(s.backbones)}.<br/>MLPerf line: {_code(s.mlperf_line)}</p>"
            "</section>")


def _checks(r: RunReport) -> str:
    rows = [[e(c.title), f'<span class="st {c.status}">{c.status.upper()}</span>',
             rich(c.message)] for c in r.checks]
    return ('<section id="checks"><h2>Checks</h2>'
            + _table(["check", "result", "detail"], rows) + "</section>")


def _figure(sample: Sample) -> str:
    if sample.thumb is not None:
        img = f'<img src="{data_uri(sample.thumb)}" alt="sample {sample.qsl_idx}"/>'
    else:
        img = f'<div class="missing">unreadable: {e(sample.problem)}</div>'
    clip = "" if sample.clip is None else f" · CLIP {sample.clip:.4g}"
    return (f"<figure>{img}<figcaption><span class=\"id\">#{sample.qsl_idx}</span> "
            f"{e(sample.caption)}<br/><span class=\"meta\">{e(sample.worker)} on "
            f"{e(sample.device)}{clip}</span></figcaption></figure>")


def _gallery(r: RunReport) -> str:
    if not r.gallery:
        return '<section id="images"><h2>Images</h2><p class="muted">no samples yet</p></section>'
    title = ("Review images (MLPerf's review sample ids)" if r.gallery_kind == "review"
             else f"First {len(r.gallery)} samples (the run holds none of MLPerf's review ids)")
    return (f'<section id="images"><h2>{e(title)}</h2><div class="grid">'
            + "".join(_figure(g) for g in r.gallery) + "</div></section>")


def _throughput(r: RunReport) -> str:
    t = r.timing
    kpis = []
    if t.samples_per_s is not None:
        kpis.append(("samples/s", f"{t.samples_per_s:.3f}"))
        kpis.append(("wall s", f"{t.wall_s:.2f}"))
    kpis += [("samples", str(t.samples)), ("workers", str(len(r.workers))),
             ("worker deaths", str(len(r.deaths)))]
    if t.attempts > 1:
        kpis.append(("attempts", f"{t.attempts} ({t.total_s:.1f} s in all)"))
    out = ['<section id="throughput"><h2>Throughput</h2><div class="kpis">',
           *(f'<div class="kpi"><b>{e(v)}</b><span class="muted">{e(k)}</span></div>'
             for k, v in kpis), "</div>"]
    if t.attempts > 1:
        out.append('<p class="muted">Figures are for the last attempt (a resumed run).</p>')
    chart = throughput_chart(r.workers)
    if chart:
        legend = "".join(f'<span><i class="swatch" style="background:{color(i)}"></i>'
                         f"{e(w.name)} ({w.samples_per_s:.3f}/s)</span>"
                         for i, w in enumerate(r.workers))
        out += ["<h3>Per-worker samples/s, batch by batch</h3>",
                f'<div class="legend">{legend}</div>', chart,
                "<h3>Samples finished (all workers; dashed: the mean rate)</h3>",
                progress_chart(r.workers)]
    rows = [[e(w.name), e(w.device), _num(str(w.samples)), _num(f"{w.busy_s:.2f}"),
             _num(f"{w.samples_per_s:.3f}"), _num(f"{w.load_s:.2f}"),
             e(", ".join(f"{k} {v:.1f}" for k, v in w.stage_ms.items()))] for w in r.workers]
    if rows:
        out.append(_table(["worker", "device", "samples", "busy s", "samples/s", "load s",
                           "stage ms/call"], rows))
    for d in r.deaths:
        code = "?" if d.exit_code is None else d.exit_code
        out.append(f'<div class="reasons"><b>{e(d.worker)} died</b> (exit {e(code)}, attempt '
                   f"{d.attempt}); {d.requeued} batch(es) handed to the survivors."
                   f"<details><summary>last log lines</summary><pre>{e(d.log_tail)}</pre>"
                   "</details></div>")
    out.append("</section>")
    return "".join(out)


def _comparison(r: RunReport) -> str:
    c = r.comparison
    if c is None:
        return ""
    s = c.summary
    head = (f'<section id="compare"><h2>Compared with {_code(c.against)}</h2>'
            f"<p>{e(s.get('common'))} common samples, {e(s.get('identical'))} identical; min "
            f"PSNR {e(_db(s.get('min_psnr')))}, min SSIM {e(_f(s.get('min_ssim'), 5))}, max "
            f"abs difference {e(s.get('max_abs'))}. Only here: {e(c.only_here or 'none')}; "
            f"only there: {e(c.only_there or 'none')}.</p>")
    pairs = []
    for p in c.worst:
        d = p.diff
        imgs = "".join(
            (f'<div><img src="{data_uri(t)}" alt="{side} {d.qsl_idx}"/>' if t is not None
             else '<div><div class="missing">not readable</div>')
            + f'<div class="side">{side}</div></div>'
            for side, t in (("this run", p.thumb_here), ("other run", p.thumb_there)))
        metrics = ("identical" if d.max_abs == 0 else
                   f"PSNR {_db(d.psnr)} · SSIM {d.ssim:.5f} · max abs {d.max_abs} · "
                   f"{100 * d.differing_fraction:.2f}% of pixels differ")
        pairs.append(f'<div class="pair"><div class="imgs">{imgs}</div><p><b>#{d.qsl_idx}</b> '
                     f"{e(metrics)}<br/><span class=\"muted\">{e(p.caption)}</span></p></div>")
    if not pairs:
        return head + "<p><b>Every common sample is byte-identical.</b></p></section>"
    return (head + f"<h3>The {len(c.worst)} most different samples (lowest PSNR first)</h3>"
            f'<div class="pairs">{"".join(pairs)}</div></section>')


def _db(value: float | None) -> str:
    if value is None:
        return "-"
    return "inf dB" if value == float("inf") else f"{value:.2f} dB"


def _f(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _layout(r: RunReport) -> str:
    lay = r.layout
    cells = [e("-" if v is None else ("yes" if v else "no") if isinstance(v, bool) else v)
             for v in lay.values()]
    out = ['<section id="layout"><h2>Layout and plan</h2>', f"<p>{e(layout_line(r))}</p>",
           _table([e(k) for k in lay], [cells]) if lay else ""]
    out += [f'<p class="muted">note: {e(n)}</p>' for n in r.plan_notes]
    if r.plan_workers:
        wrows = []
        for w in r.plan_workers:
            env = " ".join(f"{k}={v}" for k, v in (w.get("env") or {}).items()) or "-"
            aff = w.get("cpu_affinity")
            wrows.append([e(w.get("name", "?")), _num(e(w.get("device_id", "?"))),
                          _num(e(w.get("slot", "?"))), e(w.get("device_uri", "?")), e(env),
                          e("-" if aff is None else ",".join(map(str, aff))),
                          e(" ".join(w.get("runtime_flags") or []) or "-"),
                          e(f"{w.get('batch_size', '?')}/{w.get('vae_batch_size', '?')}")])
        table = _table(["worker", "device", "slot", "uri", "env", "cpu affinity",
                        "runtime flags", "batch/vae"], wrows)
        is_open = ' open=""' if len(wrows) <= WORKER_TABLE_OPEN else ""
        out.append(f"<details{is_open}><summary>{len(wrows)} planned workers</summary>"
                   f"{table}</details>")
    out.append("</section>")
    return "".join(out)


def _iree(info) -> str:
    info = info or {}
    if not info:
        return "not recorded"
    if not info.get("available", True):
        return "not available " + e(info.get("error", ""))
    return (f"{e(info.get('version', '?'))} @ {_code(str(info.get('commit', '?'))[:12])}"
            f"<br/>imported from {_code(info.get('file', '?'))}")


def _provenance(r: RunReport) -> str:
    rows = [("IREE compiler", _iree(r.iree.get("iree.compiler"))),
            ("IREE runtime", _iree(r.iree.get("iree.runtime"))),
            ("iree-compile", _code(r.iree.get("iree-compile") or "not found")),
            ("executor", e(r.executor))]
    if r.image:
        img = r.image
        rows.append(("harness image", f"{_code(img.get('ref', '?'))}<br/>ID "
                                      f"{_code(img.get('id', '?'))}"))
        prov = img.get("provenance") or {}
        if prov:
            rows.append(("workers' IREE (from the image)",
                         f"flavor {e(prov.get('flavor', '?'))}; runtime "
                         + _iree(prov.get("iree.runtime"))))
    if r.slurm:
        rows.append(("Slurm", e(f"{r.slurm.get('version', '?')}: {r.slurm.get('jobs')} job(s), "
                                f"{r.slurm.get('nodes')} node task(s)")))
    host = r.host
    rows.append(("host", e(f"{host.get('hostname', '?')} · {host.get('platform', '?')} · "
                           f"Python {host.get('python', '?')}")))
    out = ['<section id="provenance"><h2>Provenance</h2>', _kv(rows)]
    if r.compiled:
        crows = [[_code(c["mlir"]), _code(str(c["vmfb_sha256"])[:16]),
                  "cache hit" if c["cached"] else e(f"compiled in {c['seconds'] or 0:.1f} s")]
                 for c in r.compiled]
        out.append("<h3>Compiled modules</h3>"
                   + _table(["MLIR", "vmfb sha256", "compile"], crows))
    out.append("</section>")
    return "".join(out)


def _reproduce(r: RunReport) -> str:
    return ('<section id="reproduce"><h2>Reproduce</h2><p class="muted">reproduce.sh from the '
            f"run dir:</p><pre>{e(r.reproduce or '# no reproduce.sh in the run dir')}</pre>"
            f"<p class=\"muted\">Scores: {_code(f'runner score {r.run_dir}')}; this page: "
            f"{_code(f'runner report {r.run_dir}')}</p></section>")


def render_html(report: RunReport) -> str:
    r = report
    body = "".join([_notices(r), _scores(r), _checks(r), _gallery(r), _throughput(r),
                    _comparison(r), _layout(r), _provenance(r), _reproduce(r)])
    stamp = time.strftime("%Y-%m-%d %H:%M:%S %z")
    return ("<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8"/>'
            '<meta name="viewport" content="width=device-width, initial-scale=1"/>'
            f"<title>{e(r.verdict)} · run {e(r.name)} · iree-sdxl-runner</title>"
            f"<style>{CSS}</style></head><body>{_header(r)}<main>{body}"
            f"<footer>Generated by <code>runner report</code> at {e(stamp)} from "
            f"{_code(r.run_dir.resolve())}.</footer></main></body></html>\n")

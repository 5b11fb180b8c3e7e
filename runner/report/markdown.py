"""`summary.md`: sized for a GitHub CI job summary ($GITHUB_STEP_SUMMARY), verdict line first.

GitHub renders HTML inside Markdown, so every value that came from a file is escaped.
"""

from __future__ import annotations

import re

from runner.base.mdtable import md_table
from runner.report.collect import (
    FAIL,
    PASS,
    SUBSET,
    RunReport,
    label_parts,
    margin_text,
    score_text,
)

ICONS = {PASS: "✅", FAIL: "❌", SUBSET: "🔹"}
STATUS = {"pass": "✅ pass", "fail": "❌ FAIL", "skip": "⚪ skipped"}


def esc(value: object) -> str:
    """Text for a Markdown cell or line: no HTML, no table breaks."""
    return (str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("\n", " "))


def code(value: object) -> str:
    text = str(value).replace("\n", " ")
    ticks = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def fence(text: str, lang: str = "") -> list[str]:
    ticks = "`" * max(3, max((len(m) for m in re.findall(r"`{3,}", text)), default=0) + 1)
    return [ticks + lang, text.rstrip("\n"), ticks]


def layout_line(report: RunReport) -> str:
    lay = report.layout
    parts = [f"backend {lay.get('backend', '?')}", f"devices {lay.get('devices', '?')}",
             f"CPD {lay.get('cpd', '?')}", f"batch {lay.get('batch_size', '?')}"
             + (f" (VAE {lay['vae_batch_size']})" if lay.get("vae_batch_size") not in
                (None, lay.get("batch_size")) else "")]
    if lay.get("partition"):
        parts.append(f"partition {str(lay['partition']).upper()}")
    if lay.get("numa"):
        parts.append("NUMA-pinned")
    parts.append(f"{len(report.plan_workers) or len(report.workers)} workers")
    return ", ".join(parts)


def iree_line(info: dict | None) -> str:
    info = info or {}
    if not info.get("available", True) or not info:
        return "not available" + (f" ({esc(info['error'])})" if info.get("error") else "")
    commit = str(info.get("commit", "?"))[:12]
    return f"{esc(info.get('version', '?'))} @ {code(commit)} from {code(info.get('file', '?'))}"


def throughput_line(report: RunReport) -> str:
    t = report.timing
    if t.samples_per_s is None:
        return "no finished attempt recorded"
    attempt = f"; attempt {t.attempts} of {t.attempts}" if t.attempts > 1 else ""
    return (f"**{t.samples_per_s:.3f} samples/s** ({t.samples} samples in {t.wall_s:.2f} s "
            f"across {len(report.workers)} workers{attempt})")


def deaths_line(report: RunReport) -> str:
    if not report.deaths:
        return "none"
    return "; ".join(f"{esc(d.worker)} (exit {'?' if d.exit_code is None else d.exit_code}, "
                     f"attempt {d.attempt}, {d.requeued} batch(es) requeued)"
                     for d in report.deaths)


def image_line(report: RunReport) -> str:
    if not report.image:
        return f"none ({esc(report.executor)} executor)"
    img = report.image
    return f"{code(img.get('ref', '?'))} ID {code(img.get('id', '?'))}"


def headline(report: RunReport) -> str:
    icon = ICONS.get(report.verdict, "⚪")
    return (f"## {icon} {report.verdict}: run {code(report.name)} · profile "
            f"{code(report.profile)} · {esc(report.model)} ({esc(report.precision)}) · "
            f"{report.done}/{report.requested} samples")


def _run_rows(r: RunReport) -> list[list[object]]:
    """The run's facts, one per row: how it was laid out, which IREE and image ran it, on
    what host and when; Slurm and the plan's notes only where there are any."""
    t = r.timing
    rows: list[list[object]] = [
        ["layout", esc(layout_line(r))],
        ["IREE compiler", iree_line(r.iree.get("iree.compiler"))],
        ["IREE runtime", iree_line(r.iree.get("iree.runtime"))],
        ["iree-compile", code(r.iree.get("iree-compile") or "not found")],
        ["harness image", image_line(r)],
        ["throughput", throughput_line(r)],
        ["worker deaths", deaths_line(r)],
        ["host", esc(f"{r.host.get('hostname', '?')}, {r.host.get('platform', '?')}, "
                     f"Python {r.host.get('python', '?')}")],
        ["started / finished", esc(f"{t.started_at or '?'} / {t.finished_at or '?'}")]]
    if r.slurm:
        rows.append(["Slurm", esc(f"{r.slurm.get('version', '?')}: {r.slurm.get('jobs')} "
                                  f"job(s), {r.slurm.get('nodes')} node task(s)")])
    if r.plan_notes:
        rows.append(["plan notes", esc("; ".join(r.plan_notes))])
    return rows


def markdown(report: RunReport) -> str:
    r, s = report, report.scores
    lines = [headline(r), ""]
    if r.failures:
        lines += ["**Failed:** " + "; ".join(esc(c.message) for c in r.failures), ""]
    if s is None:
        lines += [f"Accuracy not scored: {esc(r.score_note)}.", ""]
    for head, rest in map(label_parts, r.labels):
        lines += [f"> ⚠️ **{esc(head or 'Caution')}:** {esc(rest)}", ""]
    lines += ["### Checks", "",
              *md_table(["check", "result", "detail"],
                      [[esc(c.title), STATUS[c.status], esc(c.message)] for c in r.checks]), ""]
    rows: list[list[object]]  # each table below, reused
    if s is not None:
        rows = [[metric, "—", "—", "—", f"⚪ {esc(s.not_scored_note(metric))}"] if m is None
                else [m.metric, f"**{score_text(m.value)}**",
                      f"[{score_text(m.low)}, {score_text(m.high)}]",
                      margin_text(m), "⚪ not judged (subset)" if s.subset
                      else "✅ PASS" if m.passed else "❌ FAIL"]
                for metric, m in (("FID", s.fid), ("CLIP", s.clip))]
        lines += ["### Scores", "", *md_table(["metric", "score", "range", "margin", "result"],
                                            rows), "",
                  f"{s.n} samples scored ({esc(s.sample_ids)}; ranges set for "
                  f"{esc(s.ranges_samples)}); backbones: {esc(s.backbones)}.",
                  f"MLPerf line: {code(s.mlperf_line)}", ""]
    lines += ["### Run", "", *md_table(["", ""], _run_rows(r)), ""]
    if r.workers:
        rows = [[esc(w.name), esc(w.device), w.samples, f"{w.busy_s:.2f}",
                 f"{w.samples_per_s:.3f}", f"{w.load_s:.2f}",
                 ", ".join(f"{k} {v:.1f}" for k, v in w.stage_ms.items())] for w in r.workers]
        lines += ["### Per worker", "",
                  *md_table(["worker", "device", "samples", "busy s", "samples/s", "load s",
                           "stage ms/call"], rows), ""]
    if r.comparison is not None:
        c = r.comparison
        rows = [[p.diff.qsl_idx, f"{p.diff.psnr:.2f}",
                 f"{p.diff.ssim:.5f}", p.diff.max_abs,
                 f"{100 * p.diff.differing_fraction:.3f}%"] for p in c.worst]
        summary = c.summary
        lines += [f"### Compared with {code(c.against)}", "",
                  f"{summary.get('common')} common samples, {summary.get('identical')} "
                  "identical.", ""]
        if rows:
            lines += [*md_table(["qsl_idx", "PSNR dB", "SSIM", "max abs", "pixels differing"],
                              rows), ""]
    lines += ["### Reproduce", "", *fence(r.reproduce or "# no reproduce.sh in the run dir",
                                          "sh"), ""]
    return "\n".join(lines)

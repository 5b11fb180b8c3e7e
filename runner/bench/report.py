"""`bench.md`: the bench as Markdown tables, fit for a CI job summary ($GITHUB_STEP_SUMMARY)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.base.mdtable import md_table
from runner.base.spread import spread
from runner.bench import dispatch_report as dr
from runner.bench.dispatch_report import NA  # one placeholder for every bench table
from runner.config.model_config import precision_text
from runner.report.markdown import code

if TYPE_CHECKING:
    from runner.bench.goldens import GoldenResult
    from runner.bench.result import BenchReport
    from runner.bench.throughput import LayoutResult



def _f(value: float | None, digits: int = 3) -> str:
    return NA if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return NA if value is None else f"{100 * value:.1f}%"


def _name(r: LayoutResult, several: bool) -> str:
    return f"{r.label} ({r.iree})" if several else r.label


def _throughput(report: BenchReport) -> list[str]:
    """One table for every combination; an IREE column when builds are compared and Slurm
    columns (job, queue wait) for a Slurm sweep."""
    several = any(a.image for a in report.arms)  # only the host arm runs without one
    slurm = report.options.executor == "slurm"
    rows = []
    for r in report.layouts:
        name = f"**{r.label}** (best)" if r.best else r.label
        status = r.status if not r.reason else f"{r.status}: {r.reason.splitlines()[0]}"
        lead: list[object] = [name, *([f"`{r.iree}`"] if several else [])]
        tail: list[object] = [", ".join(r.slurm.get("jobs", [])) or NA,
                              _f(r.slurm.get("queue_wait_s"), 1)] if slurm else []
        if r.status in ("ok", "incomplete"):
            per_worker = ", ".join(f"{w.samples_per_s:.2f}" for w in r.per_worker)
            rate = f"**{r.samples_per_s:.3f}**" if r.best else f"{r.samples_per_s:.3f}"
            rows.append([*lead, r.workers, r.samples, _f(r.wall_s, 2), rate, per_worker,
                         _pct(r.overhead), _f(r.time_to_first_sample_s, 2), *tail, status])
        else:
            rows.append([*lead, r.workers or NA, NA, NA, NA, NA, NA, NA, *tail, status])
    wall = ("first node task started -> last ended; queue wait apart" if slurm
            else "workers started -> last exited")
    lines = ["## Throughput (MLPerf Offline-style)", "",
             f"{len(report.options.sample_ids)} samples per layout; samples/s = samples / wall "
             f"({wall}); per-worker = samples / busy seconds inside "
             "batches; overhead = 1 - worker busy / (workers x wall).", "",
             *md_table(["layout", *(["IREE"] if several else []), "workers", "samples",
                      "wall s", "samples/s", "per-worker samples/s", "overhead",
                      "first sample s", *(["Slurm job", "queue wait s"] if slurm else []),
                      "status"], rows)]
    if several:
        lines += ["", "IREE builds: " + "; ".join(
            f"`{a.spec}` = image `{a.image}`" if a.image else f"`{a.spec}` = this host's"
            for a in report.arms) + "."]
    best = report.best
    if best is not None:
        lines += ["", f"Best: **{best.label}** at **{best.samples_per_s:.3f} samples/s**."]
    workers = [[_name(r, several), w.worker, w.device, w.samples, _f(w.busy_s, 2),
                f"{w.samples_per_s:.3f}", _f(w.load_s, 2),
                ", ".join(f"{k} {v:.1f}" for k, v in w.stage_ms.items())]
               for r in report.layouts for w in r.per_worker]
    if workers:
        lines += ["", "### Per worker", "",
                  *md_table(["layout", "worker", "device", "samples", "busy s", "samples/s",
                           "load s", "in-run stage ms/call"], workers)]
        done = [r for r in report.layouts if r.per_worker]
        lines += ["", "Overhead breakdown: " + "; ".join(
            f"{_name(r, several)}: startup {_f(r.startup_s, 2)} s (spawn + module load), tail "
            f"{_f(r.tail_s, 2)} s" for r in done) + "."]
    return lines


def _stages(report: BenchReport) -> list[str]:
    s = report.options.settings
    rows = [[r.batch_size, r.stage, f"`{r.function}`",
             _f(r.latency.mean_ms) if r.latency else NA,
             _f(r.latency.median_ms) if r.latency else NA,
             _f(r.latency.stddev_ms) if r.latency else NA,
             f"{r.latency.repetitions} x {r.latency.iterations}" if r.latency else NA,
             _f(r.in_run_ms), _f(r.in_run_ratio, 2), r.view or NA,
             "ok" if r.latency else (r.error.splitlines()[0] if r.error else "planned")]
            for r in report.stages]
    return ["## Stage latency (iree-benchmark-module)", "",
            f"Mean `real_time` over {s.repetitions} repetitions"
            + (f", min time {s.min_time} each" if s.min_time else "") + "; inputs recorded "
            "from one pipeline pass; run in the device view of the layout's first worker "
            "(its visibility variables, cores and NUMA binding, as the view column says). "
            "In-run ms/call is that worker's mean inside its layout's run; in-run / stage is "
            "1.00 when the harness calls IREE at IREE's own speed.", "",
            *md_table(["batch", "stage", "function", "mean ms", "median ms", "stddev ms",
                     "reps x calls", "in-run ms/call", "in-run / stage", "device view",
                     "status"], rows)]


def _dispatches(report: BenchReport) -> list[str]:
    """Per stage: the time breakdown, then its kinds and top dispatches."""
    profiled = [r for r in report.stages if r.dispatches is not None]
    lines = ["## Dispatch profile (IREE HAL profiler)", "",
             "A second, profiled run of each stage benchmark "
             f"({report.options.settings.dispatch_calls} calls, after the timed run: "
             "profiling perturbs timing). Times are per stage "
             "call; *busy* is the wall time at least one dispatch ran (the sum counts "
             "overlapping dispatches twice); shares are of the dispatch time. Kinds come "
             "from IREE's dispatch names; `dispatch_profile_fields` in bench.json defines "
             "every field. Open a stage's `dispatches.trace.json` in "
             "https://ui.perfetto.dev.", "",
             *md_table(["batch", "stage", *dr.SUMMARY_HEADER],
                       [[r.batch_size, r.stage, *dr.summary_row(r.dispatches)]
                        for r in profiled])]
    for r in profiled:
        p = r.dispatches
        assert p is not None
        if p["status"] != "ok":
            continue
        label = f"{r.stage} (batch {r.batch_size})"
        lines += ["", f"### {label}", "", dr.breakdown(p) + ".", "",
                  f"Trace: {code(p['files']['trace'])}", ""]
        for t in dr.profile_tables(label, p):
            lines += [*t.markdown(), ""]
    return lines


def _dispatch_times(report: BenchReport) -> list[str]:
    """Per stage, both mechanisms side by side against the stage's unprofiled wall time,
    then the top dispatches timed alone."""
    timed = [r for r in report.stages if r.dispatch_times is not None]
    rows = []
    for r in timed:
        for name, p in (("HAL profiler", r.dispatches), ("replay + executable benchmarks",
                                                         r.dispatch_times)):
            if p is None:
                continue
            if p["status"] != "ok":
                rows.append([r.batch_size, r.stage, name, *[NA] * 6,
                             f"{p['status']}: {p['note'].splitlines()[0]}"])
                continue
            c = p["per_call_ms"]
            busy = c.get("dispatch_busy", c["dispatch_sum"])
            unprofiled = p.get("unprofiled_ms", c.get("unprofiled"))
            rows.append([r.batch_size, r.stage, name, str(p["calls"]),
                         f"{p['dispatches_per_call']:g}", _f(busy), _f(unprofiled),
                         NA if p.get("explained") is None else f"{100 * p['explained']:.1f}%",
                         NA if unprofiled is None else _f(unprofiled - busy), "ok"])
    lines = ["## Dispatch times per stage", "",
             "Each stage's dispatch time per call by two mechanisms, held against the "
             "stage's own unprofiled mean latency: IREE's HAL profiler (a profiled run; "
             "busy time), and every dispatch of one recorded call (a HAL replay) run alone "
             "by `iree-benchmark-executable`, weighted by how often the call runs it "
             "(`dispatch_times_fields` in bench.json). *Explained* is dispatch time over "
             "the unprofiled wall; the rest is host work and gaps between dispatches.", "",
             *md_table(["batch", "stage", "mechanism", "calls", "dispatches/call",
                        "dispatch ms/call", "unprofiled ms", "explained", "rest ms",
                        "status"], rows)]
    for r in timed:
        p = r.dispatch_times
        assert p is not None
        if p["status"] != "ok":
            continue
        top = p["dispatches"][:dr.TABLE_ROWS]
        table = dr.Table(f"{r.stage} (batch {r.batch_size}): top {len(top)} of "
                         f"{p['functions']} dispatch functions timed alone",
                         ["dispatch", "kind", "count/call", "ms/call", "share", "µs each"],
                         [[d["name"], d["kind"], f"{d['count']:g}", _f(d["ms_per_call"]),
                           f"{100 * d['share']:.1f}%", _f(d["us_per_dispatch"], 1)]
                          for d in top], (0,))
        lines += ["", *table.markdown()]
    return lines


def _ab(report: BenchReport) -> list[str]:
    assert report.ab is not None
    rows = [[r["batch_size"], r["stage"], f"`{r['function']}`", _f(r["without_ms"]),
             _f(r["with_ms"]), NA if r["change"] is None else f"{100 * r['change']:+.1f}%"]
            for r in report.ab.rows()]
    return [f"## Tuning spec A/B (`{report.ab.spec}`)", "",
            "Same stages, inputs and settings; only `--iree-codegen-tuning-spec-path` "
            "differs. Negative change = faster with the spec.", "",
            *md_table(["batch", "stage", "function", "without ms", "with ms", "change"], rows),
            *_ab_dispatches(report)]


def _ab_dispatches(report: BenchReport) -> list[str]:
    assert report.ab is not None
    changes = report.ab.dispatch_changes()
    if not changes:
        return []
    return ["", "### Dispatches the spec moved (without -> with)", "",
            *dr.changes_markdown(changes)]


def _golden_cell(r: GoldenResult, name: str) -> tuple[str, str]:
    c = r.check(name)
    if c is None:
        return NA, NA
    measured = NA if c.measured is None else f"{c.measured:g}"
    mark = "" if c.ok is None else (" ok" if c.ok else " OVER")
    limit = f"{c.limit:g}" if name != "time_ms" else f"{c.golden:g} x {c.limit / c.golden:.2g}"
    return measured + mark, limit


def goldens_markdown(results: list[GoldenResult]) -> list[str]:
    rows = []
    for r in results:
        t, tl = _golden_cell(r, "time_ms")
        d, dl = _golden_cell(r, "dispatch_count")
        z, zl = _golden_cell(r, "size_bytes")
        verdict = r.status.upper() + (f": {r.message.splitlines()[0]}"
                                      if r.message and r.status != "passed" else "")
        rows.append([r.name, r.sku, f"`{r.function}`", t, tl, d, dl, z, zl, verdict])
    return ["## Benchmark goldens (IREE CI schema)", "",
            "Pass iff mean time <= golden x tolerance, dispatches <= golden, size <= golden.",
            "", *md_table(["test", "sku", "function", "time ms", "golden x tol", "dispatches",
                         "golden", "size B", "golden", "verdict"], rows),
            *_noise_lines(results)]


def _noise_lines(results: list[GoldenResult]) -> list[str]:
    """Each timed test's repetitions (median and interval) and what else the machine did
    meanwhile: a time read without them cannot be told from a busy neighbour."""
    lines = []
    for r in results:
        if r.latency is None or not r.latency.times_ms:
            continue
        s = spread(r.latency.times_ms)
        where = f"; {r.conditions.line()}" if r.conditions else ""
        lines.append(f"- {r.name}: median {s.median:.4g} ms, [{s.low:.4g}, {s.high:.4g}] "
                     f"({s.confidence:.0%}, {s.n} repetitions){where}")
    return ["", "Repetitions and conditions:", "", *lines] if lines else []


def markdown(report: BenchReport) -> str:
    v = report.versions
    runtime = (v.get("iree.runtime") or {}).get("version", "?")
    compiler = v.get("compiler", {})
    precision = precision_text(report.precision.get("dtype", "?"),
                               report.precision.get("vae_dtype", "?"))
    where = " (modules compiled elsewhere)" if compiler.get("elsewhere") else ""
    lines = [f"# Benchmark: profile `{report.profile}` (model {report.model}, {precision})", "",
             f"IREE runtime {runtime}, compiler {compiler.get('version') or '?'} @ "
             f"{compiler.get('commit') or '?'}{where}; "
             f"host {v.get('host', {}).get('hostname', '?')}; "
             f"{report.seconds:.1f} s in all.", ""]
    if report.layouts:
        lines += [*_throughput(report), ""]
    if report.stages:
        lines += [*_stages(report), ""]
    if any(r.dispatches is not None for r in report.stages):
        lines += [*_dispatches(report), ""]
    if any(r.dispatch_times is not None for r in report.stages):
        lines += [*_dispatch_times(report), ""]
    if report.ab is not None:
        lines += [*_ab(report), ""]
    if report.tuning_specs:
        lines += [f"Final tuning specs dumped: {len(report.tuning_specs)} file(s) under "
                  "`tuning-specs/`.", ""]
    lines += [f"Note: {n}." for n in report.notes]
    return "\n".join(lines)

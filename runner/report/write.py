"""`write_reports`: the four report files of a run dir, rendered first, then written.

All four are rendered in memory before the first is written, so a failure leaves the
previous set; each file is replaced atomically (runner.base.fileio).
"""

from __future__ import annotations

import json
from pathlib import Path

from runner.base.fileio import atomic_write_bytes
from runner.report.ci import publish
from runner.report.collect import WORST_DEFAULT, RunReport, collect, label_parts
from runner.report.html import render_html
from runner.report.junit import junit_xml
from runner.report.markdown import markdown
from runner.report.results import results

SUMMARY_MD, RESULTS_JSON, JUNIT_XML, REPORT_HTML = (
    "summary.md", "results.json", "junit.xml", "report.html")
REPORT_FILES = (SUMMARY_MD, RESULTS_JSON, JUNIT_XML, REPORT_HTML)


def render(report: RunReport) -> dict[str, bytes]:
    return {
        SUMMARY_MD: markdown(report).encode("utf-8"),
        RESULTS_JSON: (json.dumps(results(report), indent=2, sort_keys=True, allow_nan=False)
                       + "\n").encode("utf-8"),
        JUNIT_XML: junit_xml(report),
        REPORT_HTML: render_html(report).encode("utf-8"),
    }


def report_plan(run_dir: Path, against: Path | None = None, out: Path | None = None
                ) -> list[str]:
    """What `runner report --dry-run` prints: the run (and `against`) checked as the report
    reads them, then the files it would write."""
    from runner.accuracy.samples import open_source
    from runner.rundir.directory import RunDir

    manifest = RunDir(run_dir).load()
    lines = [f"# report on {run_dir}: profile {manifest.profile}, "
             f"{len(manifest.sample_ids)} samples requested"]
    if against is not None:
        lines.append(f"# images compared with {open_source(against, verify=False).location}")
    target = out or run_dir
    return [*lines, f"# would write {', '.join(str(target / n) for n in REPORT_FILES)}"]


def write_reports(run_dir: Path, against: Path | None = None, out: Path | None = None,
                  worst: int = WORST_DEFAULT) -> list[Path]:
    """summary.md, results.json, junit.xml, report.html into `out` (default: the run dir).

    `against`: another run (or generate dir, or accuracy log dir) to compare images with;
    needs the [metrics] extra. Returns the paths written, in REPORT_FILES order. Under
    GitHub Actions, summary.md also goes to the job summary and failures become annotations.
    """
    report = collect(Path(run_dir), Path(against) if against else None, worst)
    files = render(report)
    target = Path(out) if out else Path(run_dir)
    paths = []
    for name, data in files.items():
        path = target / name
        atomic_write_bytes(path, data)
        paths.append(path)
    publish(files[SUMMARY_MD].decode("utf-8"),
            errors=[(c.title, c.message) for c in report.failures],
            warnings=[(head or "note", rest) for head, rest in map(label_parts, report.labels)])
    return paths

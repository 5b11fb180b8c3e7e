"""What `goldens check` leaves behind: JUnit XML for CI, a Markdown summary for the PR, JSON."""

from __future__ import annotations

import shlex
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

from runner.base.fileio import atomic_write_bytes, atomic_write_json, atomic_write_text

if TYPE_CHECKING:
    from runner.goldens.result import CheckReport, TestResult

LABELS = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "xfailed": "XFAIL",
          "skipped": "SKIP", "planned": "PLAN"}


def _timing(r: TestResult) -> str:
    compile_part = "cached" if r.compile_cached else f"{r.compile_seconds:.1f}s"
    return f"compile {compile_part}, run {r.run_seconds:.2f}s"


def console_line(r: TestResult, dry_run: bool = False) -> str:
    """One block per test: the verdict, each output's numbers, the failure, the commands."""
    lines = [f"{LABELS[r.status]:5} {r.test.name}"
             + ("" if dry_run or r.status == "error" else f"  ({_timing(r)})")]
    for o in r.outputs:
        if o.passed:
            lines.append(f"      output {o.index} {o.spec}: max_abs {o.max_abs:.3g} "
                         f"mean_abs {o.mean_abs:.3g} max_rel {o.max_rel:.3g} (ok)")
    lines.extend(f"      {s.describe()}" for s in r.stats)
    if r.message and r.status != "passed":
        lines.extend("      " + line for line in r.message.splitlines())
    lines.extend(f"      warning: {w}" for w in r.warnings)
    lines.extend(f"      note: {n}" for n in r.notes)
    if dry_run:
        lines.extend(shlex.join(c) for c in r.commands)
    return "\n".join(lines)


def junit_xml(report: CheckReport) -> bytes:
    results = report.results
    suite = ET.Element("testsuite", name="goldens", tests=str(len(results)),
                       failures=str(sum(r.status == "failed" for r in results)),
                       errors=str(sum(r.status == "error" for r in results)),
                       skipped=str(sum(r.status in ("xfailed", "skipped") for r in results)),
                       time=f"{report.seconds:.3f}")
    props = ET.SubElement(suite, "properties")
    for name, value in (("iree_compile", report.compiler.path),
                        ("iree_version", report.compiler.version),
                        ("iree_commit", report.compiler.commit),
                        ("sku", report.options.sku), ("rocm_chip", report.options.rocm_chip)):
        ET.SubElement(props, "property", name=name, value=value)
    for r in results:
        t = r.test
        case = ET.SubElement(suite, "testcase", classname=f"goldens.{t.model}",
                             name=t.name.split("/", 1)[1], file=str(t.path),
                             time=f"{r.compile_seconds + r.run_seconds:.3f}")
        if r.status == "failed":
            first = r.message.splitlines()[0] if r.message else "failed"
            ET.SubElement(case, "failure", message=f"{r.phase}: {first}",
                          type=r.phase).text = r.message
        elif r.status == "error":
            ET.SubElement(case, "error", message=r.message.splitlines()[0] if r.message
                          else "error", type=r.phase).text = r.message
        elif r.status == "xfailed":
            ET.SubElement(case, "skipped", message=f"expected failure: {r.message[:200]}")
        elif r.status == "skipped":
            ET.SubElement(case, "skipped", message=r.message[:200])
        out = [f"status: {r.status}", *(o.describe() for o in r.outputs),
               *(s.describe() for s in r.stats), *(f"warning: {w}" for w in r.warnings),
               *(f"note: {n}" for n in r.notes), *(shlex.join(c) for c in r.commands)]
        ET.SubElement(case, "system-out").text = "\n".join(out)
    ET.indent(suite)
    return ET.tostring(suite, encoding="utf-8", xml_declaration=True) + b"\n"


def _compstat_section(compstats: list[TestResult]) -> list[str]:
    """The compile-statistics tests' table: each statistic measured against its golden,
    which it must not exceed."""
    lines = ["", "## Compile statistics (each must be <= its golden)", "",
             "| test | status | dispatch count | golden | delta | binary size (B) "
             "| golden | delta |", "|---|---|---|---|---|---|---|---|"]
    for r in compstats:
        cells = []
        for name in ("dispatch_count", "binary_size"):
            s = next((s for s in r.stats if s.name == name), None)
            cells += ["-", "-", "-"] if s is None else [
                str(s.measured), "-" if s.golden is None else str(s.golden),
                "-" if s.delta is None else f"{s.delta:+d}"]
        lines.append(f"| {r.test.name} | {LABELS[r.status]} | " + " | ".join(cells) + " |")
    return lines


def markdown(report: CheckReport) -> str:
    c = report.compiler
    counts = ", ".join(f"{n} {s}" for s, n in report.counts().items())
    lines = [
        "# IREE golden check", "",
        f"- compiler: `{c.path}` {c.version} @ {c.commit}",
        f"- SKU {report.options.sku}, ROCm chip {report.options.rocm_chip}"
        + (f", tuning spec `{report.options.tuning_spec}`" if report.options.tuning_spec
           else ""),
        f"- {len(report.results)} tests in {report.seconds:.1f}s: {counts}", "",
        "| test | status | compile | run (s) | output | max_abs | mean_abs | max_rel "
        "| tolerance | over |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report.results:
        if r.test.kind == "compstat":
            continue
        compile_cell = "cached" if r.compile_cached else f"{r.compile_seconds:.1f}s"
        head = f"| {r.test.name} | {LABELS[r.status]} | {compile_cell} | {r.run_seconds:.2f} "
        if not r.outputs:
            lines.append(head + "| - | | | | | |")
        for o in r.outputs:
            tol = "exact" if o.atol is None else f"{o.atol:g} + {o.rtol:g}·\\|e\\|"
            lines.append(head + f"| {o.index} `{o.spec}` | {o.max_abs:.3g} | {o.mean_abs:.3g} "
                         f"| {o.max_rel:.3g} | {tol} | {o.mismatches}/{o.elements} |")
            head = "| | | | "
    compstats = [r for r in report.results if r.test.kind == "compstat"]
    if compstats:
        lines += _compstat_section(compstats)
    warned = [r for r in report.results if r.warnings]
    if warned:
        lines += ["", "## Warnings", ""]
        lines += [f"- {r.test.name}: {w}" for r in warned for w in r.warnings]
    problems = [r for r in report.results if r.status not in ("passed", "planned")]
    if problems:
        lines += ["", "## Failures, expected failures and skips"]
        for r in problems:
            lines += ["", f"### {r.test.name}: {r.status} ({r.phase})", "", "```",
                      r.message.strip(), "```"]
    lines += ["", "## Commands", ""]
    for r in report.results:
        lines += [f"<details><summary>{r.test.name}</summary>", "", "```sh",
                  *(shlex.join(cmd) for cmd in r.commands), "```", "", "</details>"]
    return "\n".join(lines) + "\n"


def write_reports(report: CheckReport, out: Path) -> None:
    atomic_write_bytes(out / "junit.xml", junit_xml(report))
    atomic_write_text(out / "summary.md", markdown(report))
    atomic_write_json(out / "results.json", {
        "compiler": {"path": report.compiler.path, "version": report.compiler.version,
                     "commit": report.compiler.commit},
        "seconds": report.seconds, "exit_code": report.exit_code,
        "results": [r.to_dict() for r in report.results]})

"""`junit.xml`: one testcase per check, so CI shows which one failed and by how much."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from runner.report.collect import RunReport

_NOT_XML = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(value: object) -> str:
    """XML 1.0 cannot hold most control characters (a log tail may carry ANSI escapes)."""
    return _NOT_XML.sub("\ufffd", str(value))


def junit_xml(report: RunReport) -> bytes:
    r = report
    checks = r.checks
    suite = ET.Element("testsuite", name=f"run {r.name}", tests=str(len(checks)),
                       failures=str(sum(c.status == "fail" for c in checks)), errors="0",
                       skipped=str(sum(c.status == "skip" for c in checks)),
                       time=f"{r.timing.total_s:.3f}")
    props = ET.SubElement(suite, "properties")
    runtime = r.iree.get("iree.runtime") or {}
    for name, value in (("verdict", r.verdict), ("profile", r.profile), ("model", r.model),
                        ("run_dir", str(r.run_dir.resolve())),
                        ("iree_runtime_version", runtime.get("version")),
                        ("iree_commit", runtime.get("commit")),
                        ("image_id", (r.image or {}).get("id")),
                        *(("label", label) for label in r.labels)):
        if value is not None:
            ET.SubElement(props, "property", name=name, value=xml_text(value))
    for c in checks:
        case = ET.SubElement(suite, "testcase", classname=f"report.{r.profile}", name=c.name,
                             time=f"{c.seconds:.3f}")
        if c.status == "fail":
            ET.SubElement(case, "failure", message=xml_text(c.message), type=c.name).text = (
                xml_text("\n\n".join(x for x in (c.message, c.details) if x)))
        elif c.status == "skip":
            ET.SubElement(case, "skipped", message=xml_text(c.message))
        out = [f"{c.title}: {c.status}", c.message, *(f"note: {lab}" for lab in r.labels)]
        ET.SubElement(case, "system-out").text = xml_text("\n".join(out))
    ET.indent(suite)
    return ET.tostring(suite, encoding="utf-8", xml_declaration=True) + b"\n"

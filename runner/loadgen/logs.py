"""LoadGen's `mlperf_log_summary.txt` as data: the result, why, throughput and latencies.

The summary is the file MLPerf's submission checker and compliance scripts read (the
detail log is for audits); its layout is `key : value` lines in banner-separated sections,
constraint lines indented under `Result is`, recommendations as ` * ` bullets.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.base.errors import BadInput

SUMMARY_LOG = "mlperf_log_summary.txt"
DETAIL = "mlperf_log_detail.txt"
ACCURACY_LOG = "mlperf_log_accuracy.json"
TRACE = "mlperf_log_trace.json"
LOG_FILES = (SUMMARY_LOG, DETAIL, ACCURACY_LOG, TRACE)
_PERCENTILE = re.compile(r"^(\d+(?:\.\d+)?) percentile latency \(ns\)$")
_COUNT = re.compile(r"^(No|\d+) (warnings?|errors?|ERRORS?) encountered", re.IGNORECASE)


@dataclass(frozen=True)
class Summary:
    path: str
    scenario: str
    mode: str
    result: str | None  # VALID | INVALID; None when the run ended before the summary did
    samples_per_second: float | None  # Offline: samples/s; Server: completed; SingleStream: QPS
    constraints: dict[str, bool]  # "Min duration satisfied": True ...
    recommendations: tuple[str, ...]
    latency_ns: dict[str, float]  # min, max, mean, p50, p90, ..., p99.9
    parameters: dict[str, str]  # "Test Parameters Used"
    warnings: int
    errors: int
    fields: dict[str, str] = field(repr=False)  # every key : value line

    @property
    def valid(self) -> bool:
        return self.result == "VALID"

    @property
    def reasons(self) -> list[str]:
        """Why a result is INVALID, in LoadGen's words."""
        failed = [f"{name}: NO" for name, ok in self.constraints.items() if not ok]
        return failed + list(self.recommendations)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "scenario": self.scenario, "mode": self.mode,
                "result": self.result, "valid": self.valid, "reasons": self.reasons,
                "samples_per_second": self.samples_per_second,
                "constraints": self.constraints, "latency_ms": {
                    k: v / 1e6 for k, v in self.latency_ns.items()},
                "parameters": self.parameters, "warnings": self.warnings,
                "errors": self.errors}


def detail_values(path: Path) -> dict[str, Any]:
    """Every `key: value` of the detail log (one `:::MLLOG {json}` record per line; a key
    logged twice keeps its last value), and its error messages under "errors"."""
    facts: dict[str, Any] = {"errors": []}
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return facts
    for line in lines:
        if not line.startswith(":::MLLOG "):
            continue
        try:
            entry = json.loads(line[len(":::MLLOG "):])
        except ValueError:
            continue
        key = str(entry.get("key", ""))
        if key and key != "errors":
            facts[key] = entry.get("value")
        if (entry.get("metadata") or {}).get("is_error"):
            facts["errors"].append(str(entry.get("value")))
    return facts


def detail_facts(path: Path) -> dict[str, Any]:
    """The detail log's `effective_*` values (what LoadGen really ran) and its errors."""
    return {k: v for k, v in detail_values(path).items()
            if k == "errors" or k.startswith("effective_")}


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _scenario_from_detail(path: Path) -> dict[str, str]:
    """The Scenario and Mode fields of an accuracy-mode summary, which holds only the error
    counts, from the detail log beside it."""
    facts = detail_facts(path.with_name(DETAIL))
    if "effective_scenario" not in facts:
        raise BadInput("not a LoadGen summary (no `Scenario :` line, no detail log "
                       "beside it)", where=str(path),
                       fix="point at a LoadGen test's output directory")
    return {"Scenario": facts["effective_scenario"],
            "Mode": facts.get("effective_test_mode", "")}


def parse_summary(path: Path) -> Summary:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise BadInput(f"cannot read LoadGen's summary: {e}", where=str(path),
                       fix="the LoadGen test did not finish; see mlperf_log_detail.txt") from e
    fields: dict[str, str] = {}
    constraints: dict[str, bool] = {}
    recommendations: list[str] = []
    latency: dict[str, float] = {}
    parameters: dict[str, str] = {}
    section, counts = "", {"warning": 0, "error": 0}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or set(line) == {"="}:
            continue
        if (m := _COUNT.match(line)) is not None:
            kind = "warning" if m.group(2).lower().startswith("warning") else "error"
            counts[kind] = 0 if m.group(1) == "No" else int(m.group(1))
            continue
        if line in ("Additional Stats", "Test Parameters Used", "MLPerf Results Summary"):
            section = line
            continue
        if line.startswith("* "):
            recommendations.append(line[2:].strip())
            continue
        key, sep, value = (part.strip() for part in line.partition(":"))
        if not sep:
            if recommendations and raw.startswith(" "):  # a bullet's wrapped line
                recommendations[-1] += " " + line
            continue
        if section == "Test Parameters Used":
            parameters[key] = value
            continue
        fields.setdefault(key, value)
        if raw.startswith("  ") and value in ("Yes", "NO"):
            constraints[key] = value == "Yes"
        elif key in ("Min latency (ns)", "Max latency (ns)", "Mean latency (ns)"):
            latency[key.split()[0].lower()] = float(value)
        elif (m := _PERCENTILE.match(key)) is not None:
            latency[f"p{float(m.group(1)):g}"] = float(value)
    if "Scenario" not in fields:  # an accuracy-mode summary: only the error counts
        fields.update(_scenario_from_detail(Path(path)))
    rate = (fields.get("Samples per second") or fields.get("Completed samples per second")
            or fields.get("QPS w/o loadgen overhead"))  # SingleStream: one sample per query
    return Summary(str(path), fields["Scenario"], fields.get("Mode", ""),
                   fields.get("Result is"), _number(rate) if rate else None, constraints,
                   tuple(recommendations), latency, parameters, counts["warning"],
                   counts["error"], fields)

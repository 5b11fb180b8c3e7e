"""One LoadGen test (accuracy, performance or a compliance run) over a running QueueSUT.

The settings are MLPerf's built-in rules for SDXL (LoadGen's embedded mlperf.conf) with the
merged user.conf on top, then the mode; the audit.config path is always explicit, so a
stray `audit.config` in the working directory (LoadGen's default) can never turn a
submission run into a compliance test unnoticed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import RunnerError
from runner.fileio import atomic_write_text
from runner.loadgen.conf import MODEL
from runner.loadgen.logs import SUMMARY, Summary, parse_summary
from runner.loadgen.sut import QueueSUT

SETTING_FIELDS = (
    "min_duration_ms", "max_duration_ms", "min_query_count", "max_query_count",
    "offline_expected_qps", "server_target_qps", "server_target_latency_ns",
    "server_target_latency_percentile", "performance_sample_count_override",
    "accuracy_log_sampling_target", "accuracy_log_rng_seed", "performance_issue_same",
    "performance_issue_same_index", "qsl_rng_seed", "sample_index_rng_seed",
    "schedule_rng_seed")


@dataclass(frozen=True)
class TestSpec:
    """One LoadGen test: `name` is its directory (accuracy, performance, TEST01, TEST04)."""

    name: str
    scenario: str  # Offline | Server
    mode: str  # accuracy | performance
    audit: str | None = None  # audit.config text for a compliance test


@dataclass(frozen=True)
class TestOutcome:
    spec: TestSpec
    log_dir: Path
    seconds: float
    summary: Summary | None
    sut: dict[str, Any]
    failure: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.spec.name, "scenario": self.spec.scenario,
                "mode": self.spec.mode, "log_dir": str(self.log_dir),
                "seconds": self.seconds, "failure": self.failure,
                "summary": self.summary.to_dict() if self.summary else None, "sut": self.sut}


def test_settings(spec: TestSpec, user_conf: Path):
    """LoadGen's TestSettings: built-in SDXL rules, then the user.conf, then the mode."""
    import mlperf_loadgen as lg

    settings = lg.TestSettings()
    settings.scenario = getattr(lg.TestScenario, spec.scenario)
    if settings.FromConfig("", MODEL, spec.scenario, 0) != 0:
        raise RunnerError(f"LoadGen has no built-in rules for {MODEL} {spec.scenario}",
                          where="mlperf_loadgen", fix="install mlcommons-loadgen>=6.0")
    rc = settings.FromConfig(str(user_conf), MODEL, spec.scenario, 1)
    if rc != 0:
        raise RunnerError(f"LoadGen refused the user.conf (error {rc})", where=str(user_conf))
    settings.mode = (lg.TestMode.AccuracyOnly if spec.mode == "accuracy"
                     else lg.TestMode.PerformanceOnly)
    return settings


def describe_settings(settings) -> dict[str, Any]:
    return {name: getattr(settings, name) for name in SETTING_FIELDS}


def run_test(spec: TestSpec, sut: QueueSUT, user_conf: Path, log_dir: Path,
             total: int, performance_count: int, batcher_limit_s: float | None) -> TestOutcome:
    """Runs the test to its end; LoadGen's logs land in `log_dir` even when it fails."""
    import mlperf_loadgen as lg

    settings = test_settings(spec, user_conf)
    log_dir.mkdir(parents=True, exist_ok=True)
    audit = log_dir / "audit.config"
    if spec.audit is not None:
        atomic_write_text(audit, spec.audit)
    else:
        audit.unlink(missing_ok=True)
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(log_dir)
    log_settings.log_output.copy_summary_to_stdout = False
    log_settings.enable_trace = False  # the trace log is large and nobody here reads it
    # Captions are read by the workers, so loading a sample into memory here is a no-op.
    qsl = lg.ConstructQSL(total, performance_count, lambda ids: None, lambda ids: None)
    lg_sut = lg.ConstructSUT(sut.issue_query, sut.flush_queries)
    sut.begin_test(batcher_limit_s if spec.scenario == "Server" else None)
    start = time.monotonic()
    try:
        lg.StartTestWithLogSettings(lg_sut, qsl, settings, log_settings, str(audit))
    finally:
        sut.end_test()
        lg.DestroySUT(lg_sut)
        lg.DestroyQSL(qsl)
    seconds = time.monotonic() - start
    summary_path = log_dir / SUMMARY
    summary = parse_summary(summary_path) if summary_path.is_file() else None
    return TestOutcome(spec, log_dir, seconds, summary, sut.stats.to_dict(), sut.failure)


def log_files(log_dir: Path) -> list[str]:
    return sorted(p for p in os.listdir(log_dir) if p.startswith("mlperf_log_"))

"""One LoadGen test (accuracy, performance or a compliance run), in a process of its own.

LoadGen allows one conf load per process: a second `FromConfig` in the same process logs
"Multiple conf files are used. This is not valid for official submission." into the next
test's detail log. So each test runs as `python -m runner.loadgen.session TASK.json`, a
short-lived process holding LoadGen and the QueueSUT, while the process that started the
workers keeps them (and hands a dead worker's batches back to the queue) across tests.

The settings are MLPerf's built-in rules for SDXL (LoadGen's embedded mlperf.conf, which
`FromConfig(..., conf_type=1)` loads before the user.conf), then the mode; the audit.config
path is always explicit, so a stray `audit.config` in the working directory (LoadGen's
default) can never turn a submission run into a compliance test unnoticed.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runner.base.errors import BadInput, RunnerError
from runner.base.fileio import atomic_write_json, atomic_write_text
from runner.base.progress import Progress
from runner.base.signals import exit_at_once, handlers_ready, start_child, work_done
from runner.batch.lifeline import die_with_parent
from runner.config.sources import redact_secrets
from runner.loadgen.conf import MODEL
from runner.loadgen.logs import SUMMARY_LOG, Summary, parse_summary
from runner.loadgen.sut import QueueSUT

# The TestSettings a test's record and the dry run show: the ones every scenario reads,
# then each scenario's own.
SETTING_FIELDS = (
    "mode", "min_duration_ms", "max_duration_ms", "min_query_count", "max_query_count",
    "performance_sample_count_override", "qsl_rng_seed", "sample_index_rng_seed",
    "schedule_rng_seed", "accuracy_log_rng_seed", "accuracy_log_sampling_target",
    "accuracy_log_probability", "performance_issue_unique", "performance_issue_same",
    "performance_issue_same_index")
SCENARIO_FIELDS = {
    "Offline": ("offline_expected_qps",),
    "Server": ("server_target_qps", "server_target_latency_ns",
               "server_target_latency_percentile"),
    "SingleStream": ("single_stream_expected_latency_ns",
                     "single_stream_target_latency_percentile"),
}
TASK, SUT_RECORD = "loadgen_task.json", "sut.json"
TRACE_MEMORY = "RUNNER_LOADGEN_TRACE_MEMORY"  # set: the test's Python heap peak is recorded
DRIVER_PID_ENV = "RUNNER_DRIVER_PID"  # the test process ends with the driver that started it


@dataclass(frozen=True)
class LoadgenTest:
    """One LoadGen test: `name` is its directory (accuracy, performance, TEST01, TEST04)."""

    name: str
    scenario: str  # SingleStream | Offline | Server
    mode: str  # accuracy | performance
    audit: str | None = None  # audit.config text for a compliance test

    @property
    def key(self) -> str:
        """The test's log directory under the out dir, and its key in records."""
        return f"{self.scenario}/{self.name}"


@dataclass(frozen=True)
class TestOutcome:
    spec: LoadgenTest
    log_dir: Path
    seconds: float
    summary: Summary | None
    sut: dict[str, Any]
    failure: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.spec.name, "key": self.spec.key, "scenario": self.spec.scenario,
                "mode": self.spec.mode, "log_dir": str(self.log_dir),
                "seconds": self.seconds, "failure": self.failure,
                "summary": self.summary.to_dict() if self.summary else None, "sut": self.sut}


def _settings(spec: LoadgenTest):
    import mlperf_loadgen as lg

    settings = lg.TestSettings()
    settings.scenario = getattr(lg.TestScenario, spec.scenario)
    return settings


def _set_mode(settings, spec: LoadgenTest) -> None:
    import mlperf_loadgen as lg

    settings.mode = (lg.TestMode.AccuracyOnly if spec.mode == "accuracy"
                     else lg.TestMode.PerformanceOnly)


def loadgen_settings(spec: LoadgenTest, user_conf: Path):
    """LoadGen's TestSettings in the test's own process: built-in SDXL rules and the
    user.conf (`conf_type=1`, once per process), then the mode; StartTest applies the
    audit.config on top."""
    settings = _settings(spec)
    rc = settings.FromConfig(str(user_conf), MODEL, spec.scenario, 1)
    if rc != 0:
        raise BadInput(f"LoadGen refused the user.conf (error {rc})", where=str(user_conf),
                       fix="check its lines against LoadGen's user.conf keys")
    _set_mode(settings, spec)
    return settings


def planned_settings(spec: LoadgenTest, user_conf: Path, audit: Path | None) -> dict[str, Any]:
    """What LoadGen will use in the test, computed here for any number of tests.

    LoadGen loads its built-in rules only on the first `FromConfig(..., conf_type=1)` of a
    process (a second one gets LoadGen's bare defaults: 100 ms target latency, zero seeds),
    so this replays the steps without that counter: the built-in rules (`conf_type=0`), the
    user.conf, the mode, then the audit.config as StartTest reads it (model `*`).
    """
    settings = _settings(spec)
    settings.FromConfig("", MODEL, spec.scenario, 0)
    rc = settings.FromConfig(str(user_conf), MODEL, spec.scenario, 2)
    if rc != 0:
        raise BadInput(f"LoadGen refused the user.conf (error {rc})", where=str(user_conf),
                       fix="check its lines against LoadGen's user.conf keys")
    _set_mode(settings, spec)
    if audit is not None:
        rc = settings.FromConfig(str(audit), "*", spec.scenario, 2)
        if rc != 0:
            raise BadInput(f"LoadGen refused the audit.config (error {rc})",
                           where=str(audit),
                           fix="use MLPerf's shipped audit.config (drop --audit-conf)")
    return describe_settings(settings, spec.scenario)


def describe_settings(settings, scenario: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in (*SETTING_FIELDS, *SCENARIO_FIELDS[scenario]):
        value = getattr(settings, name)
        out[name] = value.name if name == "mode" else value
    return out


def run_loadgen_test(task: dict[str, Any]) -> dict[str, Any]:
    """In the test's own process: LoadGen over a QueueSUT; LoadGen's logs land in the log
    dir even when the workers fail. Returns the SUT's record of the test."""
    import mlperf_loadgen as lg

    spec = LoadgenTest(**task["spec"])
    log_dir = Path(task["log_dir"])
    settings = loadgen_settings(spec, Path(task["user_conf"]))
    audit = log_dir / "audit.config"
    if spec.audit is not None:
        atomic_write_text(audit, spec.audit)
    else:
        audit.unlink(missing_ok=True)
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(log_dir)
    log_settings.log_output.copy_summary_to_stdout = False
    log_settings.enable_trace = False  # the trace log is large and nobody here reads it
    # Accuracy mode answers in qsl order, except SingleStream: LoadGen issues its next
    # sample only when the last is answered, so an answer cannot wait for a later issue.
    sut = QueueSUT(Path(task["work_dir"]), task["batch_size"],
                   ordered=spec.mode == "accuracy" and spec.scenario != "SingleStream")
    # Captions are read by the workers, so loading a sample into memory here is a no-op.
    qsl = lg.ConstructQSL(task["total"], task["performance_count"], lambda ids: None,
                          lambda ids: None)
    lg_sut = lg.ConstructSUT(sut.issue_query, sut.flush_queries)
    trace = bool(os.environ.get(TRACE_MEMORY))
    if trace:  # scripts/bench_loadgen.py: is every answered image released?
        tracemalloc.start()
    # Accuracy mode issues the QSL once; Offline's one query says how many it holds; the
    # others run for LoadGen's min_duration and min_query_count (no total to show).
    sut.progress = Progress(f"LoadGen {spec.key}", task["total"] if spec.mode == "accuracy"
                            else None, unit="samples")
    sut.one_query = spec.scenario == "Offline"
    sut.begin_test(task["batcher_limit_s"] if spec.scenario == "Server" else None)
    start = time.monotonic()
    try:
        with sut.progress:
            lg.StartTestWithLogSettings(lg_sut, qsl, settings, log_settings, str(audit))
    finally:
        sut.end_test()
        lg.DestroySUT(lg_sut)
        lg.DestroyQSL(qsl)
    memory = {"peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
              "python_heap_peak_bytes": tracemalloc.get_traced_memory()[1] if trace else None}
    return {"seconds": time.monotonic() - start, "sut": {**sut.stats.to_dict(), **memory},
            "failure": sut.failure}


def start_test(spec: LoadgenTest, work_dir: Path, user_conf: Path, log_dir: Path, total: int,
               performance_count: int, batch_size: int, batcher_limit_s: float | None
               ) -> subprocess.Popen:
    """Starts the test's process; its record lands in `log_dir`/sut.json."""
    log_dir.mkdir(parents=True, exist_ok=True)
    task = {"spec": asdict(spec), "work_dir": str(work_dir), "user_conf": str(user_conf),
            "log_dir": str(log_dir), "total": total, "performance_count": performance_count,
            "batch_size": batch_size, "batcher_limit_s": batcher_limit_s}
    atomic_write_json(log_dir / TASK, task)
    return start_child([sys.executable, "-m", "runner.loadgen.session", str(log_dir / TASK)],
                       stdin=subprocess.DEVNULL,
                       env={**os.environ, DRIVER_PID_ENV: str(os.getpid())})


def read_outcome(spec: LoadgenTest, log_dir: Path, rc: int, deaths: list[dict[str, Any]]
                 ) -> TestOutcome:
    """The ended test's outcome, from its record and LoadGen's summary."""
    try:
        record = json.loads((log_dir / SUT_RECORD).read_text())
    except (OSError, ValueError):
        record = {"seconds": 0.0, "sut": {}, "failure": f"the LoadGen test process exited "
                  f"({rc}) without its record; see the messages above"}
    summary_path = log_dir / SUMMARY_LOG
    summary = parse_summary(summary_path) if summary_path.is_file() else None
    return TestOutcome(spec, log_dir, record["seconds"], summary,
                       {**record["sut"], "deaths": deaths}, record["failure"])


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    task_file = Path(args[0])
    # A signal ends the test at once: its logs are cut short, and a resume runs it again.
    exit_at_once()
    handlers_ready()
    # Ends with `runner mlperf`, which always starts it as its own child.
    die_with_parent(int(os.environ.get(DRIVER_PID_ENV, "0")), only_child=True)
    try:
        record = run_loadgen_test(json.loads(task_file.read_text()))
    except RunnerError as e:
        print(f"error: {redact_secrets(str(e))}", file=sys.stderr, flush=True)
        work_done()
        return 2
    atomic_write_json(task_file.with_name(SUT_RECORD), record)
    work_done()  # the record is whole: a signal now cannot undo the test
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`runner mlperf`: LoadGen tests driven over the runner's per-device workers.

Everything that can be wrong with the request (scenario, mode, conf files, counts) is
checked by `prepare` before anything is compiled or started. Then the workers start once,
load their modules, and serve every test of the command in turn (a submission is the
accuracy test, the performance test and the compliance tests), each test's LoadGen logs in
its own directory of the out dir; the work run dir (`work/`) is an ordinary run dir with
its manifest, worker logs and reproduce.sh.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner import shellscript
from runner.errors import RunnerError
from runner.fileio import atomic_write_text
from runner.loadgen.conf import (
    COMPLIANCE_TESTS,
    MODES,
    SCENARIOS,
    Flags,
    audit_text,
    effective_value,
    merged_user_conf,
    parse_conf_text,
    read_conf,
)
from runner.loadgen.session import TestOutcome, TestSpec, describe_settings, loadgen_settings
from runner.mlperf_data import CAPTIONS_FILE, load_captions
from runner.profile import Profile

MLPERF_SAMPLES = 5000  # MLPerf SDXL's QSL: the 5000 COCO captions
WORK_DIR = "work"
USER_CONF = "user.conf"
RECORD = "mlperf.json"
READY_POLL_S = 0.1
EXIT_WAIT_S = 30.0


@dataclass(frozen=True)
class MlperfRequest:
    profile: Profile
    scenario: str  # offline | server
    mode: str  # accuracy | performance | submission
    out: Path
    compliance: tuple[str, ...] = ()
    user_conf: Path | None = None
    audit_conf: Path | None = None
    flags: Flags = field(default_factory=Flags)
    argv: list[str] = field(default_factory=list)
    captions: Path | None = None
    score: bool = True  # FID/CLIP of the accuracy test's log


@dataclass(frozen=True)
class Prepared:
    request: MlperfRequest
    scenario: str  # LoadGen's spelling: Offline | Server
    user_conf_text: str
    tests: tuple[TestSpec, ...]
    total: int  # QSL size
    performance_count: int
    batcher_limit_s: float | None
    settings: dict[str, dict[str, Any]]  # per test, LoadGen's effective values


def _tests(request: MlperfRequest, scenario: str) -> tuple[TestSpec, ...]:
    if request.mode not in MODES:
        raise RunnerError(f"unknown mode {request.mode!r}", where="--mode",
                          fix=f"use one of {', '.join(MODES)}")
    unknown = [t for t in request.compliance if t not in COMPLIANCE_TESTS]
    if unknown:
        raise RunnerError(f"unknown compliance test {unknown[0]!r}", where="--compliance",
                          fix=f"SDXL's required tests are {', '.join(COMPLIANCE_TESTS)}")
    if request.compliance and request.mode != "submission":
        raise RunnerError("compliance tests are verified against the same command's accuracy "
                          "and performance logs", where="--compliance",
                          fix="use --mode submission")
    if request.audit_conf is not None and len(request.compliance) != 1:
        raise RunnerError("--audit-conf replaces one compliance test's audit.config",
                          where="--audit-conf", fix="name exactly one --compliance test")
    tests = []
    if request.mode in ("accuracy", "submission"):
        tests.append(TestSpec("accuracy", scenario, "accuracy"))
    if request.mode in ("performance", "submission"):
        tests.append(TestSpec("performance", scenario, "performance"))
    tests += [TestSpec(t, scenario, "performance", audit_text(t, request.audit_conf))
              for t in request.compliance]
    return tuple(tests)


def prepare(request: MlperfRequest) -> Prepared:
    """Checks the whole request and computes LoadGen's settings; writes and starts nothing."""
    scenario = SCENARIOS.get(request.scenario)
    if scenario is None:
        raise RunnerError(f"unknown scenario {request.scenario!r}", where="--scenario",
                          fix=f"use one of {', '.join(SCENARIOS)}")
    tests = _tests(request, scenario)
    flags = request.flags
    captions = load_captions(request.captions or CAPTIONS_FILE)
    total = flags.count if flags.count is not None else MLPERF_SAMPLES
    if not 1 <= total <= len(captions):
        raise RunnerError(f"--count {total} is outside 1..{len(captions)} (the captions file "
                          f"{captions.path})", where="--count")
    if flags.time_s is not None and flags.time_s <= 0:
        raise RunnerError("--time must be positive (seconds)", where="--time")
    if flags.qps is not None and flags.qps <= 0:
        raise RunnerError("--qps must be positive", where="--qps")
    user_lines = read_conf(request.user_conf, "user.conf") if request.user_conf else []
    text = merged_user_conf(scenario, request.profile.mlperf, user_lines, flags,
                            str(request.user_conf) if request.user_conf else None)
    merged = parse_conf_text(text, "merged user.conf")
    count_text = effective_value(merged, scenario, "performance_sample_count_override")
    performance_count = int(float(count_text)) if count_text else min(total, MLPERF_SAMPLES)
    if not 1 <= performance_count <= total:
        raise RunnerError(f"performance sample count {performance_count} must be within the "
                          f"QSL's {total} samples", where=str(request.user_conf or "--count"),
                          fix="lower performance_sample_count_override or raise --count")
    for spec in tests:
        same = spec.audit and effective_value(parse_conf_text(spec.audit, spec.name), scenario,
                                              "performance_issue_same_index")
        if same and int(float(same)) >= performance_count:
            raise RunnerError(f"{spec.name} issues sample {same} only, but the performance "
                              f"set has {performance_count} samples", where="--count",
                              fix="use --count 4 or more")
    settings = {}
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / USER_CONF
        atomic_write_text(conf, text)
        for spec in tests:
            settings[spec.name] = describe_settings(loadgen_settings(spec, conf))
    limit = request.profile.mlperf.batcher_limit_ms / 1000.0
    return Prepared(request, scenario, text, tests, total, performance_count,
                    limit if scenario == "Server" else None, settings)


def dry_run_text(prepared: Prepared, plan, executor, compiled) -> str:
    """What a real run would do, exactly: compile commands, workers, LoadGen's settings."""
    from runner.batch.worker import task_path

    out = prepared.request.out
    work = (out / WORK_DIR).resolve()
    lines = [f"# runner mlperf {prepared.scenario} {prepared.request.mode}: QSL "
             f"{prepared.total} samples, performance set {prepared.performance_count}, "
             f"executor {executor.name}",
             "# compile (modules already in the cache are reused):",
             *[shellscript.join(c.command) for c in compiled.compiled],
             f"# {len(plan.workers)} worker(s) per node, started once for every test:",
             *plan.table().splitlines()]
    describe = getattr(executor, "describe", None)  # Slurm nodes plan their own workers
    if describe is not None:
        lines += [describe(work, w, task_path(work, w.name)) for w in plan.workers]
    lines += [f"# {shellscript.sanitize(str(out / USER_CONF))}:", *[f"#   {line}" for line in
                                         prepared.user_conf_text.splitlines()]]
    for spec in prepared.tests:
        lines.append(f"# LoadGen test {spec.name} ({spec.mode}) -> "
                     f"{shellscript.sanitize(str(out / spec.name))}/")
        lines += [f"#   {k} = {v}" for k, v in prepared.settings[spec.name].items()]
        if spec.audit:
            lines += [f"#   audit.config: {line}" for line in spec.audit.splitlines()]
    return "\n".join(lines) + "\n"


def _wait_ready(work: Path, expected: int, execution) -> None:
    """Until every worker has loaded its modules (its stats file exists) or died: LoadGen
    must not start timing while models are still loading."""
    from runner.batch.worker import TASKS_DIR

    while True:
        alive = execution.poll()
        ready = len(list((work / TASKS_DIR).glob("*.stats.json")))
        if not alive:
            raise RunnerError("every worker died while loading its modules; no LoadGen test "
                              "ran", where=str(work / "logs"), fix="read the worker logs there")
        if ready and ready + len(execution.result().deaths) >= expected:
            return
        time.sleep(READY_POLL_S)


def _stop(execution) -> None:
    """The queue is closed: idle workers exit by themselves; stragglers are killed."""
    deadline = time.monotonic() + EXIT_WAIT_S
    while execution.poll():
        if time.monotonic() > deadline:
            execution.stop()
            return
        time.sleep(READY_POLL_S)


def execute(prepared: Prepared, executor) -> tuple[list[TestOutcome], str | None]:
    """Creates the work run dir through the lifecycle (plan, compile, manifest), starts the
    workers on an empty, open queue, runs every test; (outcomes, failure)."""
    from runner.batch.queue import WorkQueue
    from runner.lifecycle import Lifecycle

    request = prepared.request
    out = request.out
    if (out / RECORD).exists():
        raise RunnerError("this directory already holds a `runner mlperf` run", where=str(out),
                          fix="use another --out")
    work = out / WORK_DIR
    # No sample ids: LoadGen, not the run, decides what is computed (the store is keyed by
    # issue, and emptied as samples are answered), so the lifecycle has nothing to track.
    lc = Lifecycle.create(work, request.profile, [], request.argv, executor,
                          captions=request.captions, score=False)
    outcomes: list[TestOutcome] = []
    try:
        atomic_write_text(out / USER_CONF, prepared.user_conf_text)
        queue = WorkQueue(work)
        queue.open()
        execution = lc.start(fill=False)
        assert execution is not None  # fill=False always starts the workers
        try:
            _wait_ready(work, len(lc.plan.workers), execution)
            for spec in prepared.tests:
                outcome = _run_one(prepared, spec, execution, lc.plan.layout.batch_size)
                outcomes.append(outcome)
                if outcome.failure:
                    break
        finally:
            queue.close()
            _stop(execution)
        lc.finish_attempt(execution.result())
        failure = next((o.failure for o in outcomes if o.failure), None)
        lc.manifest.status = "failed" if failure else "complete"
        lc.run.save(lc.manifest)
    finally:
        lc.close()
    return outcomes, failure


def _run_one(prepared: Prepared, spec: TestSpec, execution, batch_size: int) -> TestOutcome:
    """One test's process, while this process watches the workers: a dead worker's batches
    go back to the queue; when none is left alive, the test is told so (marker file)."""
    from runner.batch.queue import WorkQueue
    from runner.loadgen.session import read_outcome, start_test
    from runner.loadgen.sut import WORKERS_DEAD

    out, work = prepared.request.out, prepared.request.out / WORK_DIR
    print(f"LoadGen {spec.name}: {prepared.scenario} {spec.mode}", file=sys.stderr, flush=True)
    deaths_before = len(execution.result().deaths)
    proc = start_test(spec, work, out / USER_CONF, out / spec.name, prepared.total,
                      prepared.performance_count, batch_size, prepared.batcher_limit_s)
    try:
        while proc.poll() is None:
            if not execution.poll():
                (WorkQueue(work).root / WORKERS_DEAD).touch()
            time.sleep(execution.interval)
    except BaseException:
        proc.kill()
        raise
    outcome = read_outcome(spec, out / spec.name, proc.returncode,
                           execution.result().deaths[deaths_before:])
    result = (outcome.summary.result or "log written") if outcome.summary else "no summary"
    print(f"LoadGen {spec.name}: {result} in {outcome.seconds:.1f}s", file=sys.stderr,
          flush=True)
    return outcome

"""`runner mlperf`: LoadGen tests driven over the runner's per-device workers.

Everything that can be wrong with the request (scenarios, mode, conf files, counts, and for
a submission the round's scenario set, compliance tests and system description) is checked
by `prepare` before anything is compiled or started. Then the workers start once, load
their modules, and serve every test of the command in turn (per scenario: the accuracy
test, the performance test and the compliance tests), each test's LoadGen logs in
`<out>/<Scenario>/<test>/`; the work run dir (`work/`) is an ordinary run dir with its
manifest, worker logs and reproduce.sh.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runner.base import shellscript
from runner.base.errors import BadInput, StepFailed
from runner.base.fileio import atomic_write_text, sha256_file
from runner.base.steps import StepStatus
from runner.config.mlperf_data import CAPTIONS_FILE, load_captions
from runner.config.profile import Profile
from runner.loadgen.conf import (
    MLPERF_SAMPLES,
    MODES,
    QPS_FLAGS,
    SCENARIOS,
    ConfLine,
    Flags,
    audit_text,
    effective_value,
    merged_user_conf,
    parse_conf_text,
    read_conf,
)
from runner.loadgen.rules import COMPLIANCE_TESTS, Round, check_scenarios, installed_round
from runner.loadgen.session import LoadgenTest, TestOutcome, planned_settings
from runner.loadgen.system import SystemDescription, check_name, describe_system

WORK_DIR = "work"
USER_CONF = "user.conf"
MLPERF_RECORD = "mlperf.json"
READY_POLL_S = 0.1
EXIT_WAIT_S = 30.0


@dataclass(frozen=True)
class MlperfRequest:
    profile: Profile
    scenarios: tuple[str, ...]  # singlestream | offline | server, in the order they run
    mode: str  # accuracy | performance | submission
    out: Path
    compliance: tuple[str, ...] | None = None  # None: the round's (submission) or none
    user_conf: Path | None = None
    audit_confs: dict[str, Path] = field(default_factory=dict)  # test -> its audit.config
    flags: Flags = field(default_factory=Flags)
    argv: list[str] = field(default_factory=list)
    captions: Path | None = None
    score: bool = True  # FID/CLIP of the accuracy test's log
    share_gpus: bool = False  # start where other processes hold the GPUs (the preflight's)
    division: str | None = None  # default: the profile's mlperf.division
    submitter: str | None = None  # default: the profile's mlperf.submitter
    nodes: int = 1  # systems JSON number_of_nodes


@dataclass(frozen=True)
class SubmissionPlan:
    """Where and as what the tree is written: the round's rules and the system."""

    rules: Round
    division: str
    submitter: str
    system: SystemDescription


@dataclass(frozen=True)
class Prepared:
    request: MlperfRequest
    scenarios: tuple[str, ...]  # LoadGen's spelling: SingleStream | Offline | Server
    compliance: tuple[str, ...]
    user_conf_text: str
    tests: tuple[LoadgenTest, ...]
    total: int  # QSL size
    performance_count: int
    batcher_limit_s: float | None  # Server's; the other scenarios never hold a sample
    settings: dict[str, dict[str, Any]]  # per test key, what LoadGen will use
    submission: SubmissionPlan | None = None


def _scenarios(request: MlperfRequest) -> tuple[str, ...]:
    if not request.scenarios:
        raise BadInput("no scenario given", where="--scenario",
                       fix=f"use {', '.join(SCENARIOS.values())} (comma-separated for "
                       "several)")
    out: list[str] = []
    for name in request.scenarios:
        scenario = SCENARIOS.get(name.lower())  # MLPerf's Offline, as any case of it
        if scenario is None:
            raise BadInput(f"unknown scenario {name!r}", where="--scenario",
                           fix=f"use one of {', '.join(SCENARIOS.values())} (any case)")
        if scenario in out:
            raise BadInput(f"scenario {name!r} is given twice", where="--scenario",
                           fix="name each scenario once")
        out.append(scenario)
    return tuple(out)


def _compliance(request: MlperfRequest, rules: Round | None) -> tuple[str, ...]:
    if request.mode not in MODES:
        raise BadInput(f"unknown mode {request.mode!r}", where="--mode",
                       fix=f"use one of {', '.join(MODES)}")
    given = request.compliance
    unknown = [t for t in given or () if t not in COMPLIANCE_TESTS]
    if unknown:
        raise BadInput(f"unknown compliance test {unknown[0]!r}", where="--compliance",
                       fix=f"SDXL's required tests are {', '.join(COMPLIANCE_TESTS)}")
    if given and request.mode != "submission":
        raise BadInput("compliance tests are verified against the same command's accuracy "
                       "and performance logs", where="--compliance",
                       fix="use --mode submission")
    if rules is None:
        return ()
    if given is None:
        return rules.compliance
    missing = [t for t in rules.compliance if t not in given]
    if missing:
        raise BadInput(f"an MLPerf {rules.version} SDXL submission needs "
                       f"{', '.join(rules.compliance)}; missing {', '.join(missing)}",
                       where="--compliance",
                       fix=f"use --compliance {','.join(rules.compliance)} (the default)")
    return tuple(t for t in rules.compliance if t in given)


def _tests(request: MlperfRequest, scenarios: tuple[str, ...], compliance: tuple[str, ...]
           ) -> tuple[LoadgenTest, ...]:
    stray = [t for t in request.audit_confs if t not in compliance]
    if stray:
        raise BadInput(f"--audit-conf {stray[0]}=... names no compliance test of this "
                       "command", where="--audit-conf",
                       fix=f"use one of {', '.join(compliance) or '(none: --mode submission)'}")
    tests = []
    for scenario in scenarios:
        if request.mode in ("accuracy", "submission"):
            tests.append(LoadgenTest("accuracy", scenario, "accuracy"))
        if request.mode in ("performance", "submission"):
            tests.append(LoadgenTest("performance", scenario, "performance"))
        tests += [LoadgenTest(t, scenario, "performance", audit_text(t, request.audit_confs.get(t)))
                  for t in compliance]
    return tuple(tests)


def _submission(request: MlperfRequest, scenarios: tuple[str, ...]) -> SubmissionPlan:
    """The round, the system description and the scenario set, checked before anything
    runs (the systems JSON's framework is the local IREE here; the tree gets the one the
    workers ran, from the work dir's manifest)."""
    from runner.base.provenance import iree_provenance, runner_provenance

    rules = installed_round()
    mlperf = request.profile.mlperf
    where = f"{request.profile.path}: mlperf"
    division = request.division or mlperf.division
    if division is None:
        raise BadInput("no division for the submission", where="--division",
                       fix="pass --division closed|open or set mlperf.division")
    submitter = check_name(request.submitter or mlperf.submitter, "submitter",
                           "--submitter" if request.submitter else f"{where}.submitter")
    system = describe_system(rules, request.profile, division, submitter, request.nodes,
                             request.out, iree_provenance(), runner_provenance())
    check_scenarios(rules, str(system.fields["system_type"]), list(scenarios),
                    f"{where}.system.system_type")
    return SubmissionPlan(rules, division, submitter, system)


def _performance_count(request: MlperfRequest, merged: list[ConfLine],
                       scenarios: tuple[str, ...], tests: tuple[LoadgenTest, ...], total: int
                       ) -> int:
    """The performance set's size, which every scenario must agree on (one QSL serves every
    test), within the QSL and holding the sample each compliance audit issues."""
    counts = {effective_value(merged, scenario, "performance_sample_count_override")
              for scenario in scenarios}
    if len(counts) != 1:
        raise BadInput("the scenarios' performance sample counts differ "
                       f"({', '.join(sorted(c or 'default' for c in counts))}); one QSL "
                       "serves every test", where=str(request.user_conf or "--count"),
                       fix="set performance_sample_count_override for all scenarios")
    (count_text,) = counts
    performance_count = int(float(count_text)) if count_text else min(total, MLPERF_SAMPLES)
    if not 1 <= performance_count <= total:
        raise BadInput(f"performance sample count {performance_count} must be within the "
                       f"QSL's {total} samples", where=str(request.user_conf or "--count"),
                       fix="lower performance_sample_count_override or raise --count")
    for spec in tests:
        same = spec.audit and effective_value(parse_conf_text(spec.audit, spec.name),
                                              spec.scenario, "performance_issue_same_index")
        if same and int(float(same)) >= performance_count:
            raise BadInput(f"{spec.name} issues sample {same} only, but the performance "
                           f"set has {performance_count} samples", where="--count",
                           fix="use --count 4 or more")
    return performance_count


def _count_of(request: MlperfRequest, user_lines: list[ConfLine]) -> Flags:
    """The flags with --count's default filled in: the QSL is the profile's `count`, as
    `runner run` makes (MLPerf's 5000 in the SDXL lab profiles, which a submission's rules
    ask for; 32 in the tiny ones, a short run), and so is the performance set, written as
    --count N would write it, unless the user.conf sets it."""
    flags = request.flags
    if flags.count is not None or any(
            line.key == "performance_sample_count_override" for line in user_lines):
        return flags
    return replace(flags, count=request.profile.count)


def prepare_loadgen(request: MlperfRequest) -> Prepared:
    """Checks the whole request and computes LoadGen's settings; writes and starts nothing."""
    scenarios = _scenarios(request)
    submission = _submission(request, scenarios) if request.mode == "submission" else None
    compliance = _compliance(request, submission.rules if submission else None)
    tests = _tests(request, scenarios, compliance)
    captions = load_captions(request.captions or CAPTIONS_FILE)
    user_lines = read_conf(request.user_conf, "user.conf") if request.user_conf else []
    flags = _count_of(request, user_lines)
    total = flags.count if flags.count is not None else request.profile.count
    if not 1 <= total <= len(captions):
        given = f"--count {total}" if request.flags.count is not None else \
            f"the profile's count, {total},"
        raise BadInput(f"{given} is outside 1..{len(captions)} (the captions file "
                       f"{captions.path})", where="--count",
                       fix=f"use --count 1..{len(captions)}")
    if flags.time_s is not None and flags.time_s <= 0:
        raise BadInput("--min-duration must be positive (seconds)", where="--min-duration",
                       fix="e.g. --min-duration 600 (MLPerf's 10 minutes)")
    for scenario, qps in (("Offline", flags.offline_qps), ("Server", flags.server_qps)):
        flag = QPS_FLAGS[scenario]
        if qps is not None and qps <= 0:
            raise BadInput(f"{flag} must be positive", where=flag, fix=f"e.g. {flag} 2.5")
        if qps is not None and scenario not in scenarios:  # it would set nothing
            raise BadInput(f"{flag} is the {scenario} scenario's, which --scenario does "
                           f"not run ({', '.join(scenarios)})", where=flag,
                           fix=f"drop {flag}, or add {scenario.lower()} to --scenario")
    text = "".join(merged_user_conf(scenario, request.profile.mlperf, user_lines, flags,
                                    str(request.user_conf) if request.user_conf else None)
                   for scenario in scenarios)
    performance_count = _performance_count(request, parse_conf_text(text, "merged user.conf"),
                                           scenarios, tests, total)
    limit_ms = request.profile.mlperf.batcher_limit_ms
    settings = {}
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / USER_CONF
        atomic_write_text(conf, text)
        for spec in tests:
            audit = None
            if spec.audit:
                audit = Path(tmp) / f"{spec.name}.audit.config"
                atomic_write_text(audit, spec.audit)
            settings[spec.key] = {**planned_settings(spec, conf, audit),
                                  "batcher_limit_ms": limit_ms if spec.scenario == "Server"
                                  else None}
    return Prepared(request, scenarios, compliance, text, tests, total, performance_count,
                    limit_ms / 1000.0, settings, submission)


def loadgen_preflight(prepared: Prepared, executor, dry_run: bool, before=()):
    """The run's preflight for every test at once: the QSL's samples on disk, and what
    scoring reads when an accuracy test's log is scored; shown and judged as a run's is
    (runner.lifecycle.preflight: a failure raises, exit 2)."""
    from runner.batch.run import plan_for
    from runner.lifecycle import preflight
    from runner.preflight.run import PreflightRequest

    request = prepared.request
    scored = request.score and any(spec.name == "accuracy" for spec in prepared.tests)
    return preflight(PreflightRequest(
        (request.out / WORK_DIR).resolve(), request.profile, plan_for(request.profile),
        prepared.total, scored, request.captions, request.share_gpus), executor, dry_run,
        before)


def dry_run_text(prepared: Prepared, plan, executor, compiled) -> str:
    """What a real run would do, exactly, after its preflight's lines (`loadgen_preflight`
    prints them): compile commands, workers, and per test the settings LoadGen will use (and
    the batcher's wait limit)."""
    from runner.lifecycle import plan_lines

    request = prepared.request
    out = request.out
    work = (out / WORK_DIR).resolve()
    lines = [f"# runner mlperf {','.join(prepared.scenarios)} {request.mode}: QSL "
             f"{prepared.total} samples, performance set {prepared.performance_count}, "
             f"executor {executor.name}"]
    sub = prepared.submission
    if sub is not None:
        detected = sum(1 for s in sub.system.sources.values() if s != "profile")
        lines.append(f"# submission tree: {shellscript.sanitize(str(out))}/submission/"
                     f"{sub.division}/{sub.submitter}/ (MLPerf {sub.rules.version}, system "
                     f"{sub.system.id}, {sub.system.fields['system_type']}; "
                     f"{detected} systems JSON fields detected or derived, "
                     f"{len(sub.system.sources) - detected} from the profile)")
    lines += plan_lines(plan, executor, work, compiled,
                        f"# the workers, started once for every test, in "
                        f"{shellscript.sanitize(str(work))}:")
    lines += [f"# {shellscript.sanitize(str(out / USER_CONF))}:", *[f"#   {line}" for line in
                                         prepared.user_conf_text.splitlines()]]
    for spec in prepared.tests:
        lines.append(f"# LoadGen test {spec.key} ({spec.mode}) -> "
                     f"{shellscript.sanitize(str(out / spec.key))}/")
        lines += [f"#   {k} = {'none' if v is None else v}"
                  for k, v in prepared.settings[spec.key].items()]
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
            raise StepFailed("every worker died while loading its modules; no LoadGen test "
                             "ran", where=str(work / "logs"), fix="read the worker logs there")
        if ready and ready + len(execution.result().deaths) >= expected:
            return
        time.sleep(READY_POLL_S)


def _stop(execution) -> None:
    """The queue is closed: idle workers exit by themselves; stragglers are stopped."""
    deadline = time.monotonic() + EXIT_WAIT_S
    while execution.poll():
        if time.monotonic() > deadline:
            execution.stop()
            return
        time.sleep(READY_POLL_S)


def _log_files(log_dir: Path) -> dict[str, str]:
    """name -> sha256 of every file a test left in its log dir."""
    return {str(p.relative_to(log_dir)): sha256_file(p)
            for p in sorted(log_dir.rglob("*")) if p.is_file()}


def _kept(prepared: Prepared, attempt) -> dict[str, TestOutcome]:
    """The tests an interrupted attempt finished, whose LoadGen logs are all still there
    as they were: kept, not run again."""
    from runner.loadgen.session import read_outcome

    kept: dict[str, TestOutcome] = {}
    if attempt is None or not attempt.resumed:
        return kept
    for spec in prepared.tests:
        log_dir = prepared.request.out / spec.key
        if attempt.kept(f"test:{spec.key}", lambda detail, log_dir=log_dir: log_dir.is_dir()
                        and _log_files(log_dir) == detail["files"]) is not None:
            kept[spec.key] = read_outcome(spec, log_dir, 0, [])
    return kept


def _work_run(prepared: Prepared, executor, resumed: bool, checked=None):
    """The workers' run dir: made, or (an interrupted attempt's) opened again with the same
    profile and modules, its queue and leftover samples of a cut-short test cleared."""
    from runner.batch.queue import WorkQueue
    from runner.lifecycle import Lifecycle
    from runner.loadgen.sut import WORKERS_DEAD
    from runner.rundir.directory import RunDir
    from runner.rundir.store import SampleStore

    request = prepared.request
    work = request.out / WORK_DIR
    if not (resumed and RunDir(work).exists()):
        # No sample ids: LoadGen, not the run, decides what is computed (the store is keyed
        # by issue, and emptied as samples are answered), so the lifecycle tracks none.
        return Lifecycle.create(work, request.profile, [], request.argv, executor,
                                captions=request.captions, score=False, checked=checked)
    lc = Lifecycle.open(work)
    try:
        lc.check_request(request.profile)
        lc.resume(executor, checked=checked)
        queue = WorkQueue(work)
        queue.clear()
        (queue.root / WORKERS_DEAD).unlink(missing_ok=True)
        shutil.rmtree(SampleStore(work).dir, ignore_errors=True)  # keyed by a dead test's issue
    except BaseException:
        lc.close()
        raise
    return lc


def execute(prepared: Prepared, executor, attempt=None, checked=None
            ) -> tuple[list[TestOutcome], str | None]:
    """Creates the work run dir through the lifecycle (plan, compile, manifest), starts the
    workers on an empty, open queue, runs every test; (outcomes, failure). `attempt` (the
    out dir's record, runner/base/outdir.py) keeps the tests an interrupted attempt
    finished, and records each test as it finishes. `checked`: the preflight
    (`loadgen_preflight`) the work run records."""
    from runner.batch.queue import WorkQueue

    request = prepared.request
    out = request.out
    kept = _kept(prepared, attempt)
    if len(kept) == len(prepared.tests):
        for key in kept:
            print(f"LoadGen {key}: kept (its logs are complete)", file=sys.stderr)
        return [kept[spec.key] for spec in prepared.tests], None
    lc = _work_run(prepared, executor, attempt is not None and attempt.resumed, checked)
    work = lc.run.path
    try:
        atomic_write_text(out / USER_CONF, prepared.user_conf_text)
        queue = WorkQueue(work)
        queue.open()
        execution = lc.start(fill=False)
        assert execution is not None  # fill=False always starts the workers
        try:
            _wait_ready(work, len(lc.plan.workers), execution)
            outcomes = _run_tests(prepared, execution, lc.plan.layout.batch_size, kept, attempt)
        except BaseException:
            queue.close()
            execution.stop()  # a signal or an error: the workers stop now, and are waited for
            raise
        queue.close()
        _stop(execution)
        lc.finish_attempt(execution.result())
        failure = next((o.failure for o in outcomes if o.failure), None)
        lc.manifest.status = "failed" if failure else "complete"
        lc.run.save(lc.manifest)
    finally:
        lc.close()
    return outcomes, failure


def _run_tests(prepared: Prepared, execution, batch_size: int,
               kept: dict[str, TestOutcome], attempt) -> list[TestOutcome]:
    """Each test in turn on the started workers, up to the first that fails; a test an
    earlier attempt finished is kept rather than run again, and each one finished is
    recorded in `attempt`, so that an interrupted run resumes after it."""
    out = prepared.request.out
    outcomes: list[TestOutcome] = []
    for spec in prepared.tests:
        if spec.key in kept:
            print(f"LoadGen {spec.key}: kept from an earlier attempt (its logs "
                  "are complete)", file=sys.stderr, flush=True)
            outcomes.append(kept[spec.key])
            continue
        shutil.rmtree(out / spec.key, ignore_errors=True)  # a cut-short test's logs
        start = time.perf_counter()
        outcome = _run_one(prepared, spec, execution, batch_size)
        outcomes.append(outcome)
        if attempt is not None:
            attempt.record_part(f"test:{spec.key}", StepStatus.FAILED if outcome.failure
                                else StepStatus.FINISHED, time.perf_counter() - start,
                                {"files": _log_files(out / spec.key)})
        if outcome.failure:
            break
    return outcomes


def _run_one(prepared: Prepared, spec: LoadgenTest, execution, batch_size: int) -> TestOutcome:
    """One test's process, while this process watches the workers: a dead worker's batches
    go back to the queue; when none is left alive, the test is told so (marker file)."""
    from runner.batch.executors import stop_workers
    from runner.batch.queue import WorkQueue
    from runner.loadgen.session import read_outcome, start_test
    from runner.loadgen.sut import WORKERS_DEAD

    out, work = prepared.request.out, prepared.request.out / WORK_DIR
    print(f"LoadGen {spec.key}: {spec.mode}", file=sys.stderr, flush=True)
    deaths_before = len(execution.result().deaths)
    proc = start_test(spec, work, out / USER_CONF, out / spec.key, prepared.total,
                      prepared.performance_count, batch_size, prepared.batcher_limit_s)
    try:
        while proc.poll() is None:
            if not execution.poll():
                (WorkQueue(work).root / WORKERS_DEAD).touch()
            time.sleep(execution.interval)
    except BaseException:
        stop_workers([proc])  # the test process ends, and is waited for, before we go on
        raise
    outcome = read_outcome(spec, out / spec.key, proc.returncode,
                           execution.result().deaths[deaths_before:])
    result = (outcome.summary.result or "log written") if outcome.summary else "no summary"
    print(f"LoadGen {spec.key}: {result} in {outcome.seconds:.1f}s", file=sys.stderr,
          flush=True)
    return outcome
